"""Writing one file atomically: readers see the old content or the new, never a part.

The content goes to a temporary file in the same directory (so the rename stays on one file
system), is flushed to disk, and is renamed over the target; on any error the temporary file
is removed and the target is left as it was. The mode is the one asked for, else the target's
own, else 0644.

It lives in the validator (stdlib only, Python 3.9) so that the validator, which images carry
alone, and the host (through envbuild.common.files) share one copy.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

NEW_FILE_MODE = 0o644


@contextlib.contextmanager
def atomic_file(path: str | Path, mode: int | None = None) -> Iterator[IO[bytes]]:
    """A binary file to write `path`'s new content into; it replaces `path` when the block ends
    without an error."""
    path = Path(path)
    if mode is None:
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError:
            mode = NEW_FILE_MODE
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomic(path: str | Path, content: str | bytes, mode: int | None = None) -> None:
    """Write `content` (text as UTF-8) to `path` atomically."""
    with atomic_file(path, mode) as fh:
        fh.write(content.encode("utf-8") if isinstance(content, str) else content)
