"""compile.smoke: torch.compile (Inductor C++ on CPU, Triton on GPUs) works, compared with eager;
without a compiler it fails with a remediation. Real runs on this host's CPU torch."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.support.validator import V


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


@pytest.mark.parametrize(("device", "problem", "compiled_on"), [
    ("cuda:0", None, ["cuda:0"]),  # a usable GPU: Triton only (CPU compile: 67 s on an H200)
    ("cuda:0", "no kernel image", ["cpu"]),  # a GPU that cannot run: the CPU still says something
    ("cpu", None, ["cpu"]),
    ("mps", None, ["cpu"]),  # Inductor has no MPS path judged here
])
def test_compile_runs_on_the_gpu_or_else_the_cpu(monkeypatch: pytest.MonkeyPatch, device: str,
                                                 problem: str | None,
                                                 compiled_on: list[str]) -> None:
    from types import SimpleNamespace

    from envbuild.validator import compile_smoke

    seen: list[str] = []

    def once(torch: Any, dev: str) -> dict[str, Any]:
        seen.append(dev)
        return {**(CPU_OK if dev == "cpu" else GPU_OK), "device": dev}

    monkeypatch.setattr(compile_smoke, "_compile_once", once)
    monkeypatch.setattr(compile_smoke, "find_toolchain", lambda *a: _tc())
    torch = SimpleNamespace(compile=object(), _dynamo=SimpleNamespace(reset=lambda: None))
    ctx = SimpleNamespace(torch=torch, opts=SimpleNamespace(in_image=False),
                          device_facts=lambda: {"torch": {"version": "2.13.0"}},
                          compute_device=lambda: (device, problem))
    out = compile_smoke.t_compile_smoke(ctx)  # type: ignore[arg-type]
    assert seen == compiled_on and out.status == "pass"
