"""A working directory at the same path each time, claimed by one process at a time.

BuildKit keeps what it received of a build context under a key made of the context's path (the
docker CLI hashes the path with its node id; buildx does the same): a second build from the same
path sends only the files whose size or mtime changed. A context written to a fresh temporary name
each time is sent whole each time: for a CUDA wheelhouse, 2.6 GB and about 25 s a build.

`stable_dir(parent, key)` gives `parent/<prefix><key>/` when no live process holds it, else a fresh
temporary directory beside it (a second build at the same time is correct, only slower). A
directory left by a killed run (the pid in its owner file is gone) is taken over; one without
an owner file is left alone (its maker may be between mkdir and writing it). Either way the
directory is removed when the block ends, Ctrl-C and errors included.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from envbuild.common.files import write_atomic

OWNER = "owner.pid"  # in the claimed directory, beside what the caller writes


def _alive(pid_file: Path) -> bool:
    """Whether the pid written in pid_file names a running process. Read as at most 20 bytes of
    a regular file, never through a link (another user's /tmp entry could point anywhere);
    anything else counts as alive, so the caller leaves it alone."""
    import stat

    try:
        fd = os.open(pid_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # missing too: its maker may be between mkdir and writing it
        return True
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return True
        text = os.read(fd, 20).decode("ascii", "replace").strip()
    except OSError:
        return True
    finally:
        os.close(fd)
    if not text:
        return True  # written atomically, so never seen empty: leave an odd one alone
    if not text.isdecimal() or int(text) <= 0:
        return False
    try:
        os.kill(int(text), 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: another user's live process
        return True
    return True


def _claim(path: Path) -> bool:
    """Create path for this process; a stale one (its owner is gone) is moved aside first."""
    for _ in range(2):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            if path.is_symlink() or not path.is_dir() or _alive(path / OWNER):
                return False
            trash = Path(tempfile.mkdtemp(prefix=path.name + "-stale-", dir=path.parent))
            try:
                os.rename(path, trash / "old")  # atomic: one of two racing takers wins
            except OSError:
                shutil.rmtree(trash, ignore_errors=True)
                return False
            shutil.rmtree(trash, ignore_errors=True)
            continue
        write_atomic(path / OWNER, str(os.getpid()))  # never seen half-written
        return True
    return False


@contextmanager
def stable_dir(parent: Path, prefix: str, key: str) -> Iterator[Path]:
    """parent/<prefix><key> for this block if free, else a fresh parent/<prefix>XXXX; removed
    afterwards. key: ASCII letters and digits naming what the directory is for."""
    if not key or not (key.isascii() and key.isalnum()):
        raise ValueError(f"stable_dir key must be ASCII letters and digits, not {key!r}")
    path = parent / f"{prefix}{key}"
    if not _claim(path):
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
