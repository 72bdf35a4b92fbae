from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from envbuild.matrix import Matrix, load

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def matrix() -> Matrix:
    return load()


@dataclass
class Cli:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, input_text: str | None = None, env: dict[str, str] | None = None,
            timeout: float = 600, cwd: Path | None = None, stdin: Any = None,
            memory: int | None = None) -> Cli:
    """Run the real CLI as a separate process, exactly as a user would. `stdin`: a file (or
    descriptor) instead of `input_text`; `memory`: an address-space limit in bytes (RLIMIT_AS),
    so a runaway read fails in the child instead of filling the machine."""
    def limit() -> None:
        import resource

        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    p = subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True,
                       errors="replace", input=input_text,
                       stdin=stdin if input_text is None else None, timeout=timeout,
                       cwd=cwd or ROOT, env={**os.environ, **(env or {})},
                       preexec_fn=limit if memory is not None else None)
    return Cli(p.returncode, p.stdout, p.stderr)


def docker_available() -> str | None:
    try:
        p = subprocess.run(["/usr/bin/docker", "version", "--format", "{{.Server.Version}}"],
                           capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker not usable: {exc}"
    return None if p.returncode == 0 else f"docker engine not reachable: {p.stderr.strip()}"


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[None]:
    """Tests that need a Docker engine: in CI a missing engine is a failure, never a skip."""
    problem = docker_available()
    if problem:
        if IN_CI:
            pytest.fail(f"CI must provide a Docker engine (make engine): {problem}")
        pytest.skip(problem)
    yield


def work_dir() -> Path:
    return Path(os.environ.get("ENVBUILD_WORK", ROOT / ".work"))


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    """The run order is explicit, not a matter of file names: the `slow` tests (real builds) after
    the others, and the `leak_check` tests at the very end, after everything that could leak.
    The sort is stable: inside each group the collection order stays."""
    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("leak_check"):
            return 2
        return 1 if item.get_closest_marker("slow") else 0

    items.sort(key=rank)
