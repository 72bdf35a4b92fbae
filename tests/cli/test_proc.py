"""envbuild.common.proc, the one door to processes: output captured or streamed, and a program
that is missing or may not run is an error with a hint (exit 'cannot run'), for both doors."""

from __future__ import annotations

import time
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
def test_a_silent_child_is_stopped_at_the_time_limit(door: str) -> None:
    """stream checked its deadline only when a line came: a child that printed nothing ran on
    (fit's memory probe, hung in a model's code, ran its whole minute past a 3 s limit)."""
    start = time.monotonic()
    with pytest.raises(ProcessError) as exc:
        if door == "run":
            proc.run(["sh", "-c", "sleep 30"], timeout=1)
        else:
            proc.stream(["sh", "-c", "echo up; sleep 30"], lambda line: None, timeout=1)
    assert "did not finish within 1 s" in exc.value.message
    assert time.monotonic() - start < 10


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


def test_cancel_all_stops_children_of_other_threads_and_every_later_start() -> None:
    """Ctrl-C reaches only the main thread; team build --jobs calls cancel_all(): a child that a
    worker thread streams is stopped (its whole group), that thread gets KeyboardInterrupt, not a
    failed command, and nothing starts after it until reset_cancel()."""
    import threading

    got: list[BaseException | int] = []
    started = threading.Event()

    def worker() -> None:
        try:
            got.append(proc.stream(["sh", "-c", "sleep 30 & echo up; wait"],
                                   lambda _line: started.set()))
        except BaseException as exc:
            got.append(exc)

    t = threading.Thread(target=worker)
    t.start()
    assert started.wait(10)
    t0 = time.monotonic()
    try:
        proc.cancel_all()
        t.join(10)
        assert not t.is_alive() and time.monotonic() - t0 < 8
        assert len(got) == 1 and isinstance(got[0], KeyboardInterrupt), got
        with pytest.raises(KeyboardInterrupt):
            proc.run(["true"])
        with pytest.raises(KeyboardInterrupt):
            proc.check_cancelled()
    finally:
        proc.reset_cancel()
    assert proc.run(["true"]).ok and not proc.cancelled()


@pytest.mark.parametrize("door", ["run", "stream"])
@pytest.mark.parametrize("given", ["inherited", "passed"])
def test_no_child_ever_gets_the_signing_password(door: str, given: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether this process's environment holds it or a caller's env= names it: a child's
    environment never carries $ENVBUILD_SIGNING_PASSWORD (every other variable passes)."""
    monkeypatch.setenv("ENVBUILD_PROC_TEST", "kept")
    env = None
    if given == "inherited":
        monkeypatch.setenv(proc.SIGNING_PASSWORD_ENV, "s3cret-password")
    else:
        env = {"PATH": "/usr/bin:/bin", "ENVBUILD_PROC_TEST": "kept",
               proc.SIGNING_PASSWORD_ENV: "s3cret-password"}
    lines: list[str] = []
    if door == "run":
        lines = proc.run(["env"], env=env).stdout.splitlines()
    else:
        assert proc.stream(["env"], lines.append, env=env) == 0
    assert "ENVBUILD_PROC_TEST=kept" in lines
    assert not [x for x in lines if "s3cret-password" in x or proc.SIGNING_PASSWORD_ENV in x]


def test_stream_reads_a_line_without_an_end_in_bounded_pieces() -> None:
    """stream read whole lines: a child printing 64 MiB with no newline (a model's progress
    bar, fit's memory probe) made envbuild hold all of it at once. Pieces are cut at
    proc.MAX_LINE characters; what was printed all arrives."""
    sizes: list[int] = []
    code = proc.stream(["python3", "-c", "import sys; sys.stdout.write('y' * (64 << 20)); "
                        "print(); print('end')"], lambda line: sizes.append(len(line)),
                       timeout=60)
    assert code == 0
    assert max(sizes) <= 1 << 20
    assert sum(sizes) == (64 << 20) + 3 and sizes[-1] == 3
