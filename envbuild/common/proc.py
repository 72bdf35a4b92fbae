"""The one door to the outside: every external process envbuild starts goes through here.

Argv lists only (never a shell string), a time limit on everything, and on Ctrl-C the
whole child process group is stopped before the interrupt goes on up. Work running in other
threads (`team build --jobs`) never sees the main thread's Ctrl-C: `cancel_all()` stops every
live child group and makes every later start, and every `check_cancelled()`, raise
KeyboardInterrupt in the thread that asks.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

from envbuild.common.errors import EXIT_CANNOT_RUN, EXIT_FAILED, EnvbuildError
from envbuild.common.record import record


@record
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class ProcessError(EnvbuildError):
    """A command failed, timed out or could not start; carries what it printed."""

    def __init__(self, message: str, hint: str, result: Result | None = None,
                 exit_code: int = EXIT_FAILED, timed_out: bool = False) -> None:
        super().__init__(message, hint, [], exit_code)
        self.result = result
        self.timed_out = timed_out  # it was stopped at its deadline


# Never in a child's environment, whatever it is given: the signing key's password
# (envbuild.features.attach reads it and takes it out of os.environ too)
SIGNING_PASSWORD_ENV = "ENVBUILD_SIGNING_PASSWORD"
NEVER_INHERITED = frozenset({SIGNING_PASSWORD_ENV})

_LIVE: set[subprocess.Popen[str]] = set()  # the child process groups running now, any thread
_LIVE_LOCK = threading.Lock()
_CANCEL = threading.Event()


def cancel_all() -> None:
    """Ctrl-C reached the main thread while other threads work: stop every live child's process
    group, and refuse every later start (KeyboardInterrupt in the thread that starts it)."""
    _CANCEL.set()
    with _LIVE_LOCK:
        live = list(_LIVE)
    for p in live:
        _kill_group(p)


def cancelled() -> bool:
    return _CANCEL.is_set()


def check_cancelled() -> None:
    """KeyboardInterrupt in this thread once cancel_all() was called (a step boundary asks)."""
    if _CANCEL.is_set():
        raise KeyboardInterrupt


def reset_cancel() -> None:
    """A new unit of parallel work starts (a process runs one; tests run several)."""
    _CANCEL.clear()


def which(name: str) -> str | None:
    return shutil.which(name)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def child_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """A child's environment: `env`, else this process's, without NEVER_INHERITED."""
    base = env if env is not None else os.environ
    return {k: v for k, v in base.items() if k not in NEVER_INHERITED}


def _start(argv: Sequence[str], env: Mapping[str, str] | None, cwd: str | Path | None,
           **kw: Any) -> subprocess.Popen[str]:
    """Popen in its own session, text out, registered as live until _done(); a missing or
    forbidden program is a ProcessError; after cancel_all(), KeyboardInterrupt."""
    check_cancelled()
    try:
        p = subprocess.Popen(list(argv), stdout=subprocess.PIPE, text=True, errors="replace",
                             env=child_env(env), cwd=cwd, start_new_session=True, **kw)
    except FileNotFoundError as exc:
        raise ProcessError(f"{argv[0]}: command not found", f"install {argv[0]}",
                           exit_code=EXIT_CANNOT_RUN) from exc
    except PermissionError as exc:
        raise ProcessError(f"{argv[0]}: permission denied",
                           f"make {argv[0]} executable for this user, or run as a user who may",
                           exit_code=EXIT_CANNOT_RUN) from exc
    with _LIVE_LOCK:
        _LIVE.add(p)
    if _CANCEL.is_set():  # cancel_all() ran between the check and the registration
        _done(p)
        _kill_group(p)
        raise KeyboardInterrupt
    return p


def _done(p: subprocess.Popen[str]) -> None:
    with _LIVE_LOCK:
        _LIVE.discard(p)


def run(
    argv: Sequence[str],
    *,
    timeout: float = 60.0,
    check: bool = True,
    input_text: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> Result:
    """Run argv to completion and capture its output."""
    start = time.monotonic()
    proc = _start(argv, env, cwd, stdin=subprocess.PIPE if input_text is not None
                  else subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(input=input_text, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        _kill_group(proc)
        raise ProcessError(f"{argv[0]} did not finish within {timeout:.0f} s",
                           "the command hung; check that the service it talks to answers",
                           exit_code=EXIT_CANNOT_RUN) from exc
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        _done(proc)
    check_cancelled()  # stopped by cancel_all(): an interrupt, not a failed command
    result = Result(tuple(argv), proc.returncode, out, err, time.monotonic() - start)
    if check and not result.ok:
        last = (err.strip() or out.strip()).splitlines()[-1:] or [""]
        raise ProcessError(f"{argv[0]} exited {proc.returncode}: {last[0]}",
                           f"that is the last line {argv[0]} printed; fix what it names and "
                           "run again",
                           result=result)
    return result


MAX_LINE = 1 << 20  # characters of one on_line call of stream()


def stream(
    argv: Sequence[str],
    on_line: Callable[[str], None],
    *,
    timeout: float = 3600.0,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> int:
    """Run argv, calling on_line for every line of its merged output; return the exit code.

    Ctrl-C (KeyboardInterrupt) stops the child's whole process group and re-raises. The time
    limit holds for a child that prints nothing too (a timer stops its group).
    """
    deadline = time.monotonic() + timeout
    proc = _start(argv, env, cwd, stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT, bufsize=1)
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        _kill_group(proc)

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    hung = ProcessError(f"{argv[0]} did not finish within {timeout:.0f} s",
                        "the command hung; check that the service it talks to answers",
                        exit_code=EXIT_CANNOT_RUN, timed_out=True)
    try:
        out = proc.stdout
        assert out is not None
        # readline(MAX_LINE): a line without an end (a progress bar) comes in pieces, so what
        # the child prints is never held whole
        for line in iter(lambda: out.readline(MAX_LINE), ""):
            on_line(line.rstrip("\n"))
            if time.monotonic() > deadline:
                _kill_group(proc)
                raise hung
        code = proc.wait()
        if expired.is_set():
            raise hung
        check_cancelled()  # stopped by cancel_all(): an interrupt, not a failed command
        return code
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        timer.cancel()
        _done(proc)
