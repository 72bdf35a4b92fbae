"""A CUDA image checked without a GPU: what the image is, proved from its files."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

from ..rules import (
    major_minor,
    parse_require_cuda,
    version_parts,
)
from .results import Outcome, failed, passed, skipped


def _cuda_spec(spec: dict[str, Any], what: str) -> Outcome | None:
    if spec.get("target") != "cuda" or not spec.get("torch_cuda"):
        return skipped(f"not a CUDA spec: no {what} to check")
    return None


def judge_cuda_packages(spec: dict[str, Any], dists: Sequence[dict[str, Any]]) -> Outcome:
    """Every nvidia-*/cuda-* distribution belongs to the spec's CUDA major: a cu12 package in a
    cu13 image (or the reverse) is a known cause of `undefined symbol` errors at import.
    dists: {name, version, major (None: cannot be told), how}."""
    not_cuda = _cuda_spec(spec, "CUDA major")
    if not_cuda is not None:
        return not_cuda
    want = version_parts(str(spec["torch_cuda"]))[0]
    rows = [dict(d) for d in dists]
    wrong = [d for d in rows if d.get("major") is not None and d["major"] != want]
    unknown = [d["name"] for d in rows if d.get("major") is None]
    ev = {"cuda_major": want, "distributions": rows, "unknown": unknown}
    if not rows:
        return failed(f"no nvidia-* distribution is installed, yet the spec's "
                      f"{spec.get('variant')} wheel brings its CUDA libraries as nvidia-* "
                      "packages: reinstall torch from the spec's index",
                      "no nvidia-* distributions", ev)
    if wrong:
        names = ", ".join(f"{d['name']} {d['version']} (CUDA {d['major']}: {d['how']})"
                          for d in wrong)
        return failed(
            f"remove {', '.join(d['name'] for d in wrong)}: the image is CUDA {want} "
            f"(torch {spec.get('torch')}+{spec.get('variant')}), and a CUDA {wrong[0]['major']} "
            "library beside it is loaded by whichever comes first (`undefined symbol` errors); "
            f"install the -cu{want} build of what needed it",
            f"not CUDA {want}: {names}", ev)
    detail = f"{len(rows)} nvidia-*/cuda-* distributions, all CUDA {want}"
    if unknown:
        detail += f" ({len(unknown)} carry no CUDA major: {', '.join(unknown)})"
    return passed(detail, ev)


def parse_ldd(text: str) -> list[tuple[str, str | None]]:
    """(library, resolved path or None when 'not found') per line of `ldd` output."""
    out: list[tuple[str, str | None]] = []
    for line in text.splitlines():
        line = line.strip()
        if "=>" not in line:
            continue
        name, _, rest = line.partition("=>")
        rest = rest.strip()
        if rest.startswith("not found"):
            out.append((name.strip(), None))
        else:
            out.append((name.strip(), rest.split(" (", 1)[0].strip() or None))
    return out


# The CUDA libraries of the wheels (cudart, cublas, cufft, nvrtc, nvJitLink, cupti, cufile,
# nvshmem, cudnn, nccl, cusparseLt ...); libcuda.so.1 is the driver's, mounted at run time.
CUDA_NEEDED = re.compile(r"^lib(?:cu(?!da\.so)[A-Za-z_]*|nv[A-Za-z_]+|nccl|cudnn[a-z_]*)\.so")


def judge_cuda_libs(spec: dict[str, Any], rows: Sequence[tuple[str, str | None]], library: str,
                    wheel_dirs: Sequence[str], error: str | None = None) -> Outcome:
    """Every library libtorch_cuda.so needs resolves, and every CUDA one (libcu*, libnv*,
    libcudnn, libnccl) inside the wheel's own directories, not a system copy."""
    not_cuda = _cuda_spec(spec, "libtorch_cuda.so")
    if not_cuda is not None:
        return not_cuda
    ev: dict[str, Any] = {"library": library, "wheel_dirs": list(wheel_dirs),
                          "needed": [{"lib": n, "path": p} for n, p in rows]}
    if error:
        return failed(f"cannot list what {library} links against ({error}): is libc-bin's ldd "
                      "in the image?", error, ev)
    missing = [n for n, p in rows if p is None and n != "libcuda.so.1"]
    if missing:
        return failed(
            f"{library} needs {', '.join(missing)}, which the loader cannot find: a nvidia-* "
            "package is missing or of another CUDA major (see cuda.packages); reinstall torch "
            "from the spec's index", f"not found: {', '.join(missing)}", ev)
    cuda = [(n, p) for n, p in rows if p is not None and CUDA_NEEDED.match(os.path.basename(n))]
    foreign = [(n, p) for n, p in cuda if not any(str(p).startswith(d) for d in wheel_dirs)]
    ev["cuda_libs"] = len(cuda)
    if not cuda:
        return failed(f"{library} resolves no CUDA library: a CPU build?", "no CUDA libraries", ev)
    if foreign:
        return failed(
            "CUDA libraries resolve outside the torch wheel's directories: "
            + "; ".join(f"{n} -> {p}" for n, p in foreign)
            + ". Remove the system copy from the loader's path (LD_LIBRARY_PATH, ldconfig)",
            f"{len(foreign)} CUDA libraries from outside the wheel", ev)
    return passed(f"{len(rows)} libraries resolve, {len(cuda)} CUDA ones inside the wheel's "
                  "directories", ev)


def judge_require_cuda(spec: dict[str, Any], env: dict[str, str | None]) -> Outcome:
    """NVIDIA_REQUIRE_CUDA (what the container runtime checks the host driver against) names
    the CUDA the spec's minimum driver was computed from: the nvidia/cuda image's minor, or on a
    plain base the X.0 envbuild writes."""
    not_cuda = _cuda_spec(spec, "NVIDIA_REQUIRE_CUDA")
    if not_cuda is not None:
        return not_cuda
    value = env.get("NVIDIA_REQUIRE_CUDA")
    want = spec.get("require_cuda") or major_minor(spec.get("cuda_image"))
    got = parse_require_cuda(value)
    ev = {"NVIDIA_REQUIRE_CUDA": value, "expected": want, "min_driver": spec.get("min_driver"),
          "NVIDIA_VISIBLE_DEVICES": env.get("NVIDIA_VISIBLE_DEVICES"),
          "NVIDIA_DRIVER_CAPABILITIES": env.get("NVIDIA_DRIVER_CAPABILITIES")}
    caps = (env.get("NVIDIA_DRIVER_CAPABILITIES") or "").split(",")
    if not env.get("NVIDIA_VISIBLE_DEVICES") or not ({"compute", "all"} & set(caps)):
        return failed("set NVIDIA_VISIBLE_DEVICES=all and NVIDIA_DRIVER_CAPABILITIES="
                      "compute,utility in the image: without them the NVIDIA container "
                      "runtime mounts no CUDA driver library",
                      "the NVIDIA runtime settings are missing", ev)
    if want is None:
        return skipped("the spec names no image CUDA", ev)
    if got is None:
        return failed(f"set NVIDIA_REQUIRE_CUDA=cuda>={want} in the image: without it the "
                      "container runtime starts it on any driver, and an old one fails at the "
                      "first CUDA call instead of at start", "NVIDIA_REQUIRE_CUDA is not set",
                      ev)
    if got != want:
        return failed(f"the image requires CUDA {got} where the spec's minimum driver "
                      f"{spec.get('min_driver')} was computed for CUDA {want}: the image and "
                      "its spec disagree (another base image?); re-render and rebuild",
                      f"NVIDIA_REQUIRE_CUDA cuda>={got}, spec {want}", ev)
    return passed(f"cuda>={got}: drivers >= {spec.get('min_driver')} (spec)", ev)


def judge_triton(spec: dict[str, Any], facts: dict[str, Any]) -> Outcome:
    """torch.compile on NVIDIA GPUs needs Triton and the ptxas it bundles (a C compiler too:
    compile.smoke). facts: {version, dir, ptxas, ptxas_version, error}."""
    not_cuda = _cuda_spec(spec, "Triton")
    if not_cuda is not None:
        return not_cuda
    ev = dict(facts)
    if not facts.get("version"):
        return failed("install triton (the torch wheel pins it on Linux x86_64): torch.compile "
                      "has no GPU backend without it", "triton is not installed", ev)
    if not facts.get("ptxas"):
        return failed(f"triton {facts['version']} has no ptxas under "
                      f"{facts.get('dir')}/backends/nvidia/bin: reinstall triton",
                      "no ptxas", ev)
    if not facts.get("ptxas_version"):
        return failed(f"{facts['ptxas']} does not run ({facts.get('error') or 'no version'})",
                      "ptxas does not run", ev)
    return passed(f"triton {facts['version']}, ptxas {facts['ptxas_version']}", ev)

