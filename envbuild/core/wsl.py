"""What envbuild says about a WSL 2 host, in one voice for `doctor` and `explain` (pure).

Every fact and command comes from matrix/wsl2.toml: the Linux NVIDIA driver packages
([do_not_install_linux_driver] driver_packages), the causes of NVML's "GPU access blocked by the
operating system" ([gpu_access_blocked]) and what to do about each ([gpu_access_blocked_fixes]),
the limits on pinned memory ([memory]) and NCCL ([nccl]).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from envbuild.matrix import Matrix
from envbuild.validator import rules


def table(m: Matrix, name: str) -> dict[str, Any]:
    """One table of matrix/wsl2.toml ({} when the matrix has none)."""
    t = (m.extra.get("wsl2") or {}).get(name)
    return dict(t) if isinstance(t, dict) else {}


def driver_globs(m: Matrix) -> list[str]:
    """The dpkg globs of an NVIDIA Linux driver (not libnvidia-container*, which Docker Engine
    inside WSL 2 needs)."""
    return rules.linux_driver_rule(m.extra.get("wsl2"))["driver_packages"]


def apt_name(name: str) -> bool:
    """A Debian package name (Debian policy, core/packages.py): a recorded name that is not one
    (a damaged or hostile recording) goes into no command."""
    from envbuild.core.packages import apt_name as policy  # packaging: only when a WSL host has one

    return policy(name)


def purge(packages: Sequence[str]) -> str:
    """The one command that removes Linux driver packages found inside WSL 2 (names checked by
    the caller: Debian package names, or the matrix's globs)."""
    names = " ".join(shlex.quote(p) for p in packages)
    return f"`sudo apt-get purge {names}`, then `sudo ldconfig`"


def families(m: Matrix) -> str:
    """The driver package families, as a list to read ('nvidia-driver-*, ...')."""
    return ", ".join(g.rstrip("*") + "*" for g in driver_globs(m))


def tcc_fix(m: Matrix) -> str:
    """How to see a GPU's driver model on Windows, and switch it to WDDM."""
    fx = table(m, "gpu_access_blocked_fixes")
    if not fx.get("tcc_check"):
        return ""
    return f"{fx['tcc_check']}; for a GPU in TCC mode: {fx.get('tcc_switch', '')}"


def custom_kernel(osrelease: str, suffix: str) -> bool:
    """A kernel release recorded inside WSL 2 that is not one of Microsoft's (no '-WSL2')."""
    release = osrelease.strip()
    return bool(release and suffix) and not release.endswith(suffix)


def blocked_checklist(m: Matrix, osrelease: str = "") -> list[str]:
    """The causes of "GPU access blocked" that nothing recorded inside WSL 2 tells apart, in the
    order to check them, each with its fix: a GPU in TCC mode, a custom WSL kernel (with the
    recorded kernel release as evidence when it lacks Microsoft's suffix), an old WSL."""
    why, fx = table(m, "gpu_access_blocked"), table(m, "gpu_access_blocked_fixes")
    if not why or not fx:
        return []
    suffix = str(why.get("kernel_suffix", ""))
    kernel = (f" (this kernel, {osrelease.strip()}, has no {suffix} suffix)"
              if custom_kernel(osrelease, suffix) else "")
    return [f"{why.get('tcc', 'a GPU in TCC mode')}: {tcc_fix(m)}",
            f"{why.get('custom_kernel', 'a custom WSL kernel')}{kernel}: "
            f"{fx.get('custom_kernel_fix', '')}",
            f"an old WSL: {fx.get('old_wsl_fix', '')}"]


def numbered(items: Sequence[str]) -> str:
    return " ".join(f"({i}) {item};" for i, item in enumerate(items, 1)).rstrip(";")


def limits(m: Matrix) -> tuple[str, str]:
    """The WSL 2 limits doctor states (pinned memory, NCCL) and what to do when they bite."""
    mem, nccl = table(m, "memory"), table(m, "nccl")
    if not mem.get("pinned") or not nccl.get("min_version"):
        return "", ""
    said = (f"{mem['pinned']}; NCCL needs >= {nccl['min_version']}; "
            f"{str(nccl.get('ipc', '')).rstrip('.')}")
    advice = "; ".join(str(x) for x in (mem.get("pinned_advice"), nccl.get("advice")) if x)
    return said, advice
