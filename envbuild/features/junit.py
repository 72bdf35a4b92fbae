"""`--junit FILE`: the checks of a run written as JUnit XML (envbuild.core.junit) for CI.

The file is checked before anything runs (a directory or a special file is a usage error) and
written atomically when the run ends: with failed checks too (the exit code is the run's), and
when the run stops on an error, as one <error> testcase saying why. Ctrl-C writes nothing.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild.common.errors import EnvbuildError, UsageError

if TYPE_CHECKING:
    from envbuild.core.junit import Suite

HINT = "give a file path for the JUnit XML, e.g. --junit reports/envbuild.xml"


def check_path(path: Path) -> Path:
    """`path` if a JUnit file can be written there: a regular file (replaced) or nothing yet,
    under a directory or a path whose missing directories can be made; UsageError otherwise."""
    from envbuild.common.boundedio import kind_of, path_text
    from envbuild.common.echo import shown

    text = str(path)
    if not text.strip() or "\x00" in text:
        raise UsageError(f"--junit {shown(text)} is not a path", HINT)
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
    return path


def write(path: Path, suites: Sequence[Suite], name: str) -> None:
    from envbuild.common.files import write_atomic
    from envbuild.core.junit import to_xml

    check_path(path)  # again: it may have changed while the checks ran
    try:
        path.absolute().parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, to_xml(suites, name))
    except OSError as exc:
        raise UsageError(f"cannot write --junit {path}: {exc.strerror or exc}", HINT) from None


@contextmanager
def report(path: Path | None, name: str) -> Iterator[Callable[[Sequence[Suite]], None]]:
    """Around a run: the run gives its suites to the function this yields; they are written to
    `path` (None: nothing) when the block ends. An EnvbuildError that ends the block is written
    as one <error> testcase, then raised on."""
    from envbuild.core.junit import error_suite

    got: list[Sequence[Suite]] = []
    try:
        yield got.append
    except EnvbuildError as exc:
        if path is not None:
            write(path, [error_suite(name, exc.message, exc.hint)], name)
        raise
    if path is not None:
        write(path, got[-1] if got else [], name)


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
