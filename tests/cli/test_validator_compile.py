"""compile.smoke: torch.compile (Inductor C++ on CPU, Triton on GPUs) works, compared with eager;
without a compiler it fails with a remediation. Real runs on this host's CPU torch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.validator import VALIDATOR_PATH, V, by_id, host_spec, run_validator

HAVE_GXX = shutil.which("g++") is not None


def _compile_only(tmp: Path, env: dict[str, str]) -> dict[str, Any]:
    rc, report, _, stderr = run_validator(tmp, host_spec(), "--only", "compile.smoke", env=env,
                                          timeout=600)
    assert report is not None, stderr
    check = by_id(report)["compile.smoke"]
    assert (rc == 1) == (check["status"] == "fail")
    return check


@pytest.mark.skipif(not HAVE_GXX, reason="no g++ on this host")
def test_compile_smoke_for_real_on_this_cpu(tmp_path: Path) -> None:
    check = _compile_only(tmp_path, {})
    assert check["status"] == "pass", check["detail"]
    run = check["evidence"]["runs"][0]
    assert run["device"] == "cpu" and run["rel_err"] <= V.COMPILE_TOLERANCE


@pytest.mark.parametrize("how", ["CXX names a missing compiler", "PATH has no compiler"])
def test_compile_smoke_without_a_compiler_fails_with_remediation(tmp_path: Path,
                                                                 how: str) -> None:
    pytest.importorskip("torch")
    if how.startswith("CXX"):
        env = {"CXX": str(tmp_path / "no-such-g++")}
    else:
        env = {"PATH": str(Path(sys.executable).parent), "CXX": ""}
    check = _compile_only(tmp_path, env)
    assert check["status"] == "fail" and "C++ compiler" in check["detail"]
    assert "apt-get install g++ python3-dev" in check["remediation"]


def test_real_inductor_error_is_recognised(tmp_path: Path) -> None:
    """Bypass the pre-check: real torch.compile with CXX pointing nowhere raises an error whose
    wording compiler_error() recognises (so a torch upgrade that rewords it is caught here)."""
    pytest.importorskip("torch")
    code = (f"import json, sys; sys.path.insert(0, {str(VALIDATOR_PATH)!r})\n"
            "import torch\n"
            "from envbuild.validator import compile_smoke\n"
            "print(json.dumps(compile_smoke._compile_once(torch, 'cpu')))\n")
    env = {**os.environ, "CXX": str(tmp_path / "no-such-g++"),
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=600, check=False)
    assert r.stdout.strip(), r.stderr[-2000:]
    run = json.loads(r.stdout.strip().splitlines()[-1])
    assert "error" in run, run
    assert V.compiler_error(run["error"]) is not None, run["error"][:500]
