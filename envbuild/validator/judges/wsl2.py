"""Pure decisions: WSL2 (facts: matrix/wsl2.toml, S-NV-WSL-GUIDE; NCCL on WSL: NVIDIA/nccl#442)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

from ..rules import driver_package
from .results import Outcome, failed, passed, skipped, warned

WSL_LIB = "/usr/lib/wsl/lib"
# matrix/wsl2.toml [nccl] advice, verbatim (doctor's wsl.limits reads it there; the validator
# runs without the matrix: tests/unit/test_validator_wsl2.py checks that the two agree)
NCCL_ADVICE = "if NCCL fails or hangs, try NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1, or gloo"


def is_wsl2(facts: dict[str, Any]) -> list[str]:
    """The signs of WSL2 that are there (heuristics, matrix/wsl2.toml [detection])."""
    signs = []
    if facts.get("dxg"):
        signs.append("/dev/dxg")
    if facts.get("wsl_lib") is not None:
        signs.append(WSL_LIB)
    if any(m.startswith("/usr/lib/wsl") for m in facts.get("mounts") or []):
        signs.append("/usr/lib/wsl mounts")
    if "microsoft" in str(facts.get("kernel") or "").lower():
        signs.append(f"kernel {facts.get('kernel')}")
    return signs


def parse_ldconfig(text: str, lib: str = "libcuda.so") -> list[str]:
    """Paths `ldconfig -p` resolves a library to ('libcuda.so.1 (libc6,x86-64) => /path')."""
    paths = []
    for line in text.splitlines():
        name, _, path = line.strip().partition(" => ")
        if name.split(" ", 1)[0].startswith(lib) and path:
            paths.append(path.strip())
    return paths


def driver_packages(text: str, globs: Sequence[str]) -> list[str]:
    """Installed NVIDIA Linux driver packages (`globs`: matrix/wsl2.toml driver_packages) in
    `dpkg -l` output or /var/lib/dpkg/status."""
    found: list[str] = []
    if "Package:" in text:
        for block in text.split("\n\n"):
            name = re.search(r"^Package:\s*(\S+)", block, re.M)
            status = re.search(r"^Status:.*\binstalled\b", block, re.M)
            if name and status and driver_package(name.group(1), globs):
                found.append(name.group(1))
        return found
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "ii" and driver_package(fields[1], globs):
            found.append(fields[1])
    return found


def wsl2_verdict(facts: dict[str, Any], forbidden: Sequence[str] = ()) -> Outcome:
    """In a WSL2 container (or WSL2 itself): libcuda must come from the Windows driver mounted
    at /usr/lib/wsl/lib; a Linux NVIDIA driver installed in the image breaks it. Pinned memory
    is capped and multi-GPU NCCL is limited there: said as information."""
    signs = is_wsl2(facts)
    ev = {**facts, "signs": signs}
    if not signs:
        return skipped("not WSL2 (no /dev/dxg, no /usr/lib/wsl, kernel not Microsoft's)", ev)
    libcuda = [p for p in facts.get("libcuda") or []]
    foreign = [p for p in libcuda if not p.startswith("/usr/lib/wsl/")
               and "/stubs/" not in p and "/compat/" not in p]
    packages = list(facts.get("driver_packages") or [])
    if packages or foreign:
        what = ", ".join(packages + foreign)
        return failed(
            "a Linux NVIDIA driver is installed: on WSL2 the Windows driver is the only one "
            f"(its libcuda is mounted at {WSL_LIB}); remove it (apt-get purge "
            + (" ".join(packages) or "the package that ships " + " ".join(foreign))
            + ", never install " + (" / ".join(forbidden) or "a Linux driver") + ": use the "
            "cuda-toolkit-1X-Y meta package or the WSL-Ubuntu CUDA repository)",
            f"WSL2 with a Linux NVIDIA driver: {what}", ev)
    names = facts.get("wsl_lib")
    if facts.get("dxg") and not (names and any(n.startswith("libcuda.so") for n in names)):
        return failed(
            f"WSL2 GPU device /dev/dxg is there but {WSL_LIB} has no libcuda: start the "
            "container with the NVIDIA runtime (`docker run --gpus all`, Docker Desktop's WSL2 "
            "backend or the NVIDIA Container Toolkit inside WSL) so it mounts the Windows "
            "driver's libraries", f"no libcuda in {WSL_LIB}", ev)
    notes = [
        "pinned (page-locked) memory is capped on WSL2 (NVIDIA publishes no number): large "
        "pin_memory buffers can fail; use smaller batches or pin_memory=False if they do",
        "multi-GPU NCCL is limited on WSL2 (GPUs cannot be selected by index in containers, "
        "topology detection can fail with 'Could not find real path of /sys/class/pci_bus'): "
        + NCCL_ADVICE,
    ]
    ev["notes"] = notes
    ld_path = str(facts.get("ld_library_path") or "")
    registered = any(p.startswith("/usr/lib/wsl/") for p in libcuda)
    if names and not registered and WSL_LIB not in ld_path.split(os.pathsep):
        return warned(
            f"add {WSL_LIB} to LD_LIBRARY_PATH (or to /etc/ld.so.conf.d and run ldconfig): the "
            "loader does not know the WSL driver's libcuda, so dlopen('libcuda.so') can fail",
            f"WSL2: {WSL_LIB} is not on the loader path", ev)
    return passed(f"WSL2 ({', '.join(signs)}): libcuda from {WSL_LIB}; note: {notes[0]}", ev)


