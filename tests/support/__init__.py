"""What every kind of test shares: the repository's paths, the CI flag and the CLI runner.

Test modules import helpers from here (and from the modules beside this one), never from another
test module; fixtures shared by several files live in the conftest.py of their kind."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
FIXTURES = TESTS / "fixtures"
GOLDEN = TESTS / "golden"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


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


def work_dir() -> Path:
    return Path(os.environ.get("ENVBUILD_WORK", ROOT / ".work"))
