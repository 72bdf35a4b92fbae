"""Unit tests: pure, in this process. A test here that starts a process (the CLI, a compiler, a
container) fails: it belongs in tests/cli or tests/integration."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest


@pytest.fixture(autouse=True)
def _no_processes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError("a unit test started a process: move it to tests/cli or "
                             "tests/integration")

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, refuse)
    yield
