"""compile.smoke: torch.compile needs a C/C++ toolchain (Inductor's C++ kernels on CPU; Triton
builds a small C launcher against Python.h at first use on CUDA/ROCm)."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .results import Outcome, failed, passed, warned

COMPILE_TOLERANCE = 1e-4  # fp32 relative error of compiled vs eager (fusion reorders sums)
COMPILER_ERRORS = (
    ("InvalidCxxCompiler", "Inductor found no working C++ compiler"),
    ("Failed to find C compiler", "Triton found no C compiler"),
    ("Python.h: No such file or directory", "Python's C headers are missing"),
    ("No working C++ compiler", "Inductor found no working C++ compiler"),
)


def find_toolchain(env: dict[str, str], which: Callable[[str], str | None],
                   python_include: str | None, exists: Callable[[str], bool]) -> dict[str, Any]:
    """Which compilers torch.compile would use, resolved the way Inductor (CXX, else g++ /
    clang++ on macOS) and Triton (CC, else cc / gcc / clang) look them up, and whether
    Python.h is there."""
    cxx_want = env.get("CXX") or ("clang++" if sys.platform == "darwin" else "g++")
    cc_want = env.get("CC")
    cc = which(cc_want) if cc_want else next(
        (p for p in (which(c) for c in ("cc", "gcc", "clang")) if p), None)
    header = os.path.join(python_include, "Python.h") if python_include else None
    return {"cxx_wanted": cxx_want, "cxx": which(cxx_want), "cc_wanted": cc_want or "cc/gcc/clang",
            "cc": cc, "python_h": header if header and exists(header) else None,
            "python_include": python_include}


def toolchain_remediation(missing: Sequence[str], in_image: bool) -> str:
    fix = ("torch.compile needs " + " and ".join(missing) + ": install them (Debian/Ubuntu: "
           "`apt-get install g++ python3-dev` (for a deadsnakes/uv Python, its -dev package); "
           "RHEL/Rocky: `dnf install gcc-c++ python3-devel`; conda: `conda install gxx_linux-64`), "
           "or point CXX (Inductor) / CC (Triton) at a compiler that exists")
    if in_image:
        fix += "; images built by this envbuild ship one: rebuild the image"
    return fix


def toolchain_missing(tc: dict[str, Any], gpu: bool) -> list[str]:
    missing: list[str] = []
    if not tc.get("cxx"):
        missing.append(f"a C++ compiler (CXX / {tc.get('cxx_wanted')} not found)")
    if gpu and not tc.get("cc"):
        missing.append(f"a C compiler for Triton ({tc.get('cc_wanted')} not found)")
    if not tc.get("python_h"):  # Inductor loads its CPU kernels through Python bindings too
        missing.append(f"Python's C headers (no Python.h in {tc.get('python_include')})")
    return missing


def compiler_error(text: str) -> str | None:
    for needle, what in COMPILER_ERRORS:
        if needle in text:
            return what
    return None


def compile_verdict(toolchain: dict[str, Any], runs: Sequence[dict[str, Any]],
                    in_image: bool = False) -> Outcome:
    """runs: one per device {device, backend, error?, rel_err?, grad_rel_err?, seconds}."""
    ev: dict[str, Any] = {"toolchain": toolchain, "runs": list(runs),
                          "tolerance": COMPILE_TOLERANCE}
    gpu = any(r["device"] != "cpu" for r in runs)
    missing = toolchain_missing(toolchain, gpu)
    for r in runs:
        err = r.get("error")
        if err and compiler_error(err):
            missing = missing or [compiler_error(err) or "a compiler"]
    if missing:
        return failed(toolchain_remediation(missing, in_image),
                      "torch.compile cannot build kernels: " + "; ".join(missing), ev)
    broken = [r for r in runs if r.get("error")]
    if broken:
        r = broken[0]
        if "not supported on Python" in r["error"]:
            return warned("this torch's torch.compile does not support this Python version: use "
                          "a Python the torch release supports for Dynamo, or a newer torch",
                          f"{r['device']}: {r['error'][:200]}", ev)
        return failed("torch.compile failed (see evidence.runs[].error): a broken Inductor/Triton "
                      "install, or a torch/triton version mismatch (pip install the triton "
                      "version torch requires)", f"{r['device']} ({r['backend']}): "
                      f"{r['error'][:200]}", ev)
    errors = [float(r.get(k, 0.0)) for r in runs for k in ("rel_err", "grad_rel_err")]
    bad = [e for e in errors if not (math.isfinite(e) and e <= COMPILE_TOLERANCE)]
    if bad:
        return failed("compiled and eager results differ beyond tolerance: Inductor/Triton "
                      "produced wrong kernels on this device",
                      f"compiled vs eager results differ: rel error {bad[0]:.2e}", ev)
    return passed("compiled forward+backward match eager on " + ", ".join(
        f"{r['device']} ({r['backend']}, {r.get('seconds', 0):.1f}s)" for r in runs), ev)




