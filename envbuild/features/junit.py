"""`--junit FILE`: the checks of a run written as JUnit XML (envbuild.core.junit) for CI.

The file is checked before anything runs (`check_path`): not a path, a symlink, a directory or a
special file, the command's own input file, or a place no file can be written (a read-only
directory, /proc) is a usage error; its directories are made, and an old file there is removed,
so a file left at FILE is always this run's. It is written atomically when the run ends: with
failed checks too, and when the run stops on an error, as one <error> testcase saying why.
Ctrl-C writes nothing. A write that fails at the end is a warning: the run's output, exit code
and own error stay what they are.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild.common.errors import EnvbuildError, UsageError

if TYPE_CHECKING:
    from envbuild.core.junit import Suite

HINT = "give a file path for the JUnit XML, e.g. --junit reports/envbuild.xml"


def _checked(path: Path) -> os.stat_result | None:
    """What is at `path` now if a JUnit file may replace it (None: nothing); UsageError when it
    is not a path, is a symlink or is not a regular file, or its directory is a file."""
    from envbuild.common.boundedio import kind_of, path_text
    from envbuild.common.echo import shown

    text = str(path)
    if not text.strip() or "\x00" in text:
        raise UsageError(f"--junit {shown(text)} is not a path", HINT)
    if os.path.islink(path):
        raise UsageError(f"--junit {path_text(path)}: is a symlink (envbuild would replace the "
                         "link with a file)", "give the file the link points to, or another "
                         "path, e.g. --junit reports/envbuild.xml")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UsageError(f"--junit {path_text(path)}: {exc.strerror or exc}", HINT) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UsageError(f"--junit {path_text(path)}: is {kind_of(st.st_mode)}, not a file",
                         HINT)
    probe = path.absolute().parent
    while not os.path.lexists(probe) and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"--junit {path_text(path)}: {path_text(probe)} is not a directory",
                         HINT)
    return st


def _same(a: Path, b: Path) -> bool:
    """The same file: one inode (a hard link, another spelling), or the same place once
    resolved (a file not there yet)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def check_path(path: Path, inputs: Iterable[Path] = ()) -> Path:
    """`path` if the run can write its JUnit file there: checked (see _checked), not one of the
    command's `inputs` (its spec, team file, lock, logs), its directories made and a file
    created and removed next to it; an old file there is removed. UsageError otherwise."""
    import tempfile

    from envbuild.common.boundedio import path_text

    st = _checked(path)
    for given in inputs:
        if str(given) != "-" and _same(path, given):
            raise UsageError(f"--junit {path_text(path)} is the command's own input "
                             f"{path_text(given)}: writing it would destroy it", HINT)
    where = path.absolute().parent
    try:
        where.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=where)
        os.close(fd)
        os.unlink(probe)
        if st is not None:
            os.unlink(path)  # a stale file from an earlier run: never taken for this one's
    except OSError as exc:
        raise UsageError(f"--junit {path_text(path)}: cannot create a file in "
                         f"{path_text(where)}: {exc.strerror or exc}", HINT) from None
    return path


def write(path: Path, suites: Sequence[Suite], name: str) -> str | None:
    """Write the JUnit file; what went wrong (one line) instead of raising: a file that cannot
    be written at the end must not take the run's own output, exit code or error."""
    from envbuild.common.boundedio import path_text
    from envbuild.common.files import write_atomic
    from envbuild.core.junit import to_xml

    try:
        _checked(path)  # again: it may have changed while the checks ran
        path.absolute().parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, to_xml(suites, name))
    except UsageError as exc:
        return f"{exc.message} (not written)"
    except OSError as exc:
        return f"--junit {path_text(path)}: not written: {exc.strerror or exc}"
    return None


@contextmanager
def report(path: Path | None, name: str, warn: Callable[[str], None]
           ) -> Iterator[Callable[[Sequence[Suite]], None]]:
    """Around a run: the run gives its suites to the function this yields; they are written to
    `path` (None: nothing) when the block ends. An EnvbuildError that ends the block is written
    as one <error> testcase, then raised on. A write that fails is `warn`ed, one line, and
    changes nothing else."""
    from envbuild.core.junit import error_suite

    got: list[Sequence[Suite]] = []

    def put(suites: Sequence[Suite]) -> None:
        if path is not None and (problem := write(path, suites, name)) is not None:
            warn(f"warning: {problem}")

    try:
        yield got.append
    except EnvbuildError as exc:
        put([error_suite(name, exc.message, exc.hint)])
        raise
    put(got[-1] if got else [])


def team_suites(data: Mapping[str, Any]) -> list[Suite]:
    """`team check`'s result: one suite per image of the lock (a multi-platform image: its index,
    then each platform image), one testcase per check (classname: the image)."""
    from envbuild.core.junit import Check, Suite

    by_image: dict[str, list[Check]] = {}
    for c in data.get("checks", []):
        by_image.setdefault(str(c["image"]), []).append(
            Check(str(c["check"]), str(c["status"]), str(c["title"]), str(c["message"]),
                  classname=str(c["image"])))
    return [Suite(f"image {row['name']}", tuple(by_image.get(str(row["name"]), ())))
            for row in data.get("images", [])]


def validation_suites(report_: Mapping[str, Any], subject: str) -> list[Suite]:
    from envbuild.core.junit import validation_suite

    return [validation_suite(report_, subject)]
