"""How the validator runs itself again (a worker, a distributed child), and how it ends its
children and outlives no parent."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from .judges import EXIT_CANNOT_RUN


def python_argv() -> list[str]:
    """This interpreter with its mode flags (-I, -S, -E, -X ...): workers run the way we do."""
    flags = getattr(subprocess, "_args_from_interpreter_flags", None)
    return [sys.executable, *(flags() if flags else [])]


# The folder (or zipapp) that holds the `envbuild` package this validator was loaded from: a
# worker puts it first on sys.path, in place of the current directory, so neither an
# installed envbuild nor a file in the working directory can stand in for ours.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BOOT = ("import sys; root = sys.argv.pop(1); sys.path[:] = [root] + [p for p in sys.path if p]; "
         "from envbuild.validator.supervisor import main; sys.exit(main())")


def self_argv() -> list[str]:
    """The command line that runs this validator again (a worker, a distributed child)."""
    return [*python_argv(), "-c", _BOOT, _ROOT]


def kill_tree(proc: subprocess.Popen[Any], group: bool = True) -> None:
    """SIGKILL a child (group=True: the process group of a child started with
    start_new_session), then reap it. The group is signalled only while its leader is not yet
    reaped, so the id cannot have been reused by an unrelated process."""
    if proc.returncode is None:
        try:
            if group and os.name == "posix":
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        except OSError:
            with contextlib.suppress(OSError):
                proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def exit_with_parent() -> None:
    """Exit as soon as the process that started us is gone, so a supervisor killed with
    SIGKILL or SIGTERM leaves no worker (or its children) running."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(EXIT_CANNOT_RUN)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
