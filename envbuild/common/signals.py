"""Termination signals (SIGTERM, SIGHUP) raised as exceptions where the program was, so that the
`finally` blocks that clean up after Ctrl-C (a container removed) run for them too."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any

TERMINATING = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP: unwinds as Ctrl-C does; a process ends with 128 + the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def install(signums: Sequence[int], make: Callable[[int], BaseException]) -> dict[int, Any]:
    """On any of `signums`, raise make(signum) in the main thread; the same signals that come
    while that exception unwinds are ignored (the cleanup it starts is not cut short). Returns
    the handlers it replaced."""

    def handler(signum: int, frame: FrameType | None) -> None:
        for s in signums:
            signal.signal(s, signal.SIG_IGN)
        raise make(signum)

    return {s: signal.signal(s, handler) for s in signums}


@contextmanager
def raised(signums: Sequence[int] = TERMINATING,
           make: Callable[[int], BaseException] = Terminated) -> Iterator[None]:
    """install() for the block, the former handlers back after it; a no-op outside the main
    thread (only it can take signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = install(signums, make)
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)
