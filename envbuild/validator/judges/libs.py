"""Pure decisions: where the GPU libraries torch loaded come from (issue 14). The wheel brings its
own: CUDA wheels in site-packages/nvidia/* (nvidia-* packages; older wheels in torch/lib), ROCm
wheels in torch/lib. A copy from /usr/local/cuda or /opt/rocm (LD_LIBRARY_PATH, ldconfig) is
another version, the known cause of `undefined symbol: __nvJitLink...` and cuDNN mismatches."""

from __future__ import annotations

import os
import re
from typing import Any

from .results import Outcome, passed, skipped, warned

GPU_LIB = re.compile(r"^(lib(?:amdhip64|cudnn[a-z_]*|cublas(?:Lt)?|nvJitLink|cusparse(?:Lt)?|"
                     r"cufft|curand|cusolver|nccl|rccl|rocblas|hipblas(?:lt)?|MIOpen|cudart))"
                     r"\.so(?:\.[0-9.]+)?$")
SYSTEM_GPU_DIRS = ("/usr/local/cuda", "/opt/rocm")


def parse_maps(text: str) -> list[str]:
    """File paths mapped in a /proc/<pid>/maps text, first-seen order, each once."""
    seen: dict[str, None] = {}
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/"):
            path = parts[5].removesuffix(" (deleted)")
            seen.setdefault(path, None)
    return list(seen)


def lib_stem(path: str) -> str | None:
    """'libcublasLt' for .../libcublasLt.so.13.1; None for a file that is no GPU library."""
    m = GPU_LIB.match(os.path.basename(path))
    return m.group(1) if m else None


def wheel_lib_dirs(kind: str, torch_dir: str) -> list[str]:
    torch_dir = torch_dir.rstrip("/")
    site = os.path.dirname(torch_dir)
    if kind == "cuda":
        return [f"{site}/nvidia/", f"{torch_dir}/lib/"]
    return [f"{torch_dir}/lib/"]


def library_origin_verdict(kind: str | None, maps_text: str, torch_dir: str,
                           wheel_copies: dict[str, str], ld_library_path: str) -> Outcome:
    """Every GPU library mapped into the process comes from the torch wheel's own directories.

    wheel_copies: library stem -> the path of the wheel's copy (what should have been loaded).
    """
    if kind not in ("cuda", "rocm"):
        return skipped("a CPU build loads no GPU libraries")
    dirs = wheel_lib_dirs(kind, torch_dir)
    loaded = [p for p in parse_maps(maps_text) if lib_stem(p)]
    ev: dict[str, Any] = {"wheel_dirs": dirs, "loaded": loaded,
                          "ld_library_path": ld_library_path}
    if not loaded:
        return skipped(f"no {kind.upper()} library is mapped in this process", ev)
    foreign = [p for p in loaded if not any(p.startswith(d) for d in dirs)]
    if not foreign:
        return passed(f"{len(loaded)} GPU libraries, all from the wheel ({', '.join(dirs)})", ev)
    pairs: list[tuple[str, str | None]] = [(p, wheel_copies.get(lib_stem(p) or ""))
                                           for p in foreign]
    ev["foreign"] = [{"loaded": p, "wheel": w,
                      "system": any(p.startswith(d) for d in SYSTEM_GPU_DIRS)} for p, w in pairs]
    entries = [e for e in ld_library_path.split(os.pathsep) if e]
    shadowing = [e for e in entries
                 if any(p.startswith(e.rstrip("/") + "/") for p in foreign)]
    ev["shadowing_ld_library_path"] = shadowing
    said = "; ".join(f"{p} instead of " + (w or f"the wheel's copy (none found under {dirs[0]})")
                     for p, w in pairs)
    how = (f"remove {', '.join(shadowing)} from LD_LIBRARY_PATH" if shadowing else
           "remove the system copy from the loader's path (ldconfig, LD_PRELOAD, LD_LIBRARY_PATH)")
    return warned(
        f"torch loaded GPU libraries that are not its wheel's: {how}. A system copy of another "
        "version is the known cause of `undefined symbol: __nvJitLink...` and cuDNN/cuBLAS "
        "version mismatches; the wheel brings the versions torch was built with",
        f"not from the wheel: {said}", ev)


