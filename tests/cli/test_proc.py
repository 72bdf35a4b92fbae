"""envbuild.common.proc, the one door to processes: output captured or streamed, and a program
that is missing or may not run is an error with a hint (exit 'cannot run'), for both doors."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.common import proc
from envbuild.common.errors import EXIT_CANNOT_RUN
from envbuild.common.proc import ProcessError


def test_run_and_stream() -> None:
    r = proc.run(["sh", "-c", "echo out; echo err >&2"])
    assert r.ok and (r.stdout, r.stderr) == ("out\n", "err\n")
    lines: list[str] = []
    assert proc.stream(["sh", "-c", "echo a; echo b >&2; exit 3"], lines.append) == 3
    assert lines == ["a", "b"]


@pytest.mark.parametrize("door", ["run", "stream"])
def test_missing_and_forbidden_programs(door: str, tmp_path: Path) -> None:
    script = tmp_path / "tool"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o644)
    call = (lambda argv: proc.run(argv)) if door == "run" else (
        lambda argv: proc.stream(argv, lambda line: None))
    for argv, words in (([str(tmp_path / "nope")], "command not found"),
                        ([str(script)], "permission denied")):
        with pytest.raises(ProcessError) as exc:
            call(argv)
        assert words in exc.value.message and exc.value.exit_code == EXIT_CANNOT_RUN
