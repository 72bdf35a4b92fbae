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

from tests.test_validator import VALIDATOR_PATH, V, by_id, host_spec, run_validator

HAVE_GXX = shutil.which("g++") is not None


def _tc(**kw: Any) -> dict[str, Any]:
    base = {"cxx_wanted": "g++", "cxx": "/usr/bin/g++", "cc_wanted": "cc/gcc/clang",
            "cc": "/usr/bin/cc", "python_h": "/usr/include/python3.12/Python.h",
            "python_include": "/usr/include/python3.12"}
    base.update(kw)
    return base


CPU_OK = {"device": "cpu", "backend": "inductor C++", "rel_err": 1e-7, "grad_rel_err": 2e-7}
GPU_OK = {"device": "cuda:0", "backend": "inductor Triton", "rel_err": 1e-7, "grad_rel_err": 1e-7}


@pytest.mark.parametrize(("toolchain", "runs", "status", "words"), [
    (_tc(), [CPU_OK], "pass", "match eager"),
    (_tc(), [CPU_OK, GPU_OK], "pass", "cuda:0"),
    (_tc(cxx=None), [CPU_OK], "fail", "C++ compiler"),
    (_tc(cc=None), [CPU_OK], "pass", "match eager"),  # Inductor C++ needs no C compiler
    (_tc(python_h=None), [CPU_OK], "fail", "Python's C headers"),  # its pybind loader does
    (_tc(cc=None), [CPU_OK, GPU_OK], "fail", "C compiler for Triton"),
    (_tc(python_h=None), [CPU_OK, GPU_OK], "fail", "Python's C headers"),
    (_tc(), [{**CPU_OK, "rel_err": 0.3}], "fail", "differ"),
    (_tc(), [{**CPU_OK, "grad_rel_err": float("nan")}], "fail", "rel error nan"),
    (_tc(), [{"device": "cpu", "backend": "inductor C++", "error":
              "InductorError: InvalidCxxCompiler: No working C++ compiler found in "
              "torch._inductor.config.cpp.cxx: (None, 'g++')"}], "fail", "cannot build"),
    (_tc(), [CPU_OK, {"device": "cuda:0", "backend": "inductor Triton", "error":
                      "RuntimeError: Failed to find C compiler. Please specify via CC "
                      "environment variable or set triton.knobs.build.impl."}], "fail",
     "Triton found no C compiler"),
    (_tc(), [CPU_OK, {"device": "cuda:0", "backend": "inductor Triton", "error":
                      "CalledProcessError: /tmp/x/main.c:1:10: fatal error: Python.h: No such "
                      "file or directory"}], "fail", "headers"),
    (_tc(), [{"device": "cpu", "backend": "inductor C++", "error":
              "RuntimeError: Dynamo is not supported on Python 3.13+"}], "warn", "cpu"),
    (_tc(), [{"device": "cpu", "backend": "inductor C++", "error":
              "RuntimeError: torch.compile is not supported on Python 3.14+"}], "warn",
     "not supported"),
    (_tc(), [{"device": "cpu", "backend": "inductor C++", "error": "ImportError: triton"}],
     "fail", "triton"),
])
def test_compile_verdict(toolchain: dict[str, Any], runs: list[dict[str, Any]], status: str,
                         words: str) -> None:
    out = V.compile_verdict(toolchain, runs)
    assert out.status == status, out.detail
    assert words in out.detail
    if status == "fail" and "cannot build" in out.detail:
        assert "apt-get install g++ python3-dev" in out.remediation and "CXX" in out.remediation


def test_in_image_remediation_says_rebuild() -> None:
    out = V.compile_verdict(_tc(cxx=None), [CPU_OK], in_image=True)
    assert "rebuild the image" in out.remediation


@pytest.mark.parametrize(("env", "cxx", "cc"), [
    ({}, "/bin/g++", "/bin/cc"),
    ({"CXX": "clang++"}, None, "/bin/cc"),
    ({"CXX": "/nonexistent/g++"}, None, "/bin/cc"),
    ({"CC": "/nonexistent/cc"}, "/bin/g++", None),
    ({"CC": "gcc"}, "/bin/g++", "/bin/gcc"),
])
def test_find_toolchain_resolves_like_inductor_and_triton(env: dict[str, str], cxx: str | None,
                                                          cc: str | None) -> None:
    have = {"g++": "/bin/g++", "cc": "/bin/cc", "gcc": "/bin/gcc"}
    tc = V.find_toolchain(env, have.get, "/inc", lambda p: p == "/inc/Python.h")
    assert (tc["cxx"], tc["cc"], tc["python_h"]) == (cxx, cc, "/inc/Python.h")
    assert V.find_toolchain({}, lambda n: None, None, os.path.exists)["python_h"] is None


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
