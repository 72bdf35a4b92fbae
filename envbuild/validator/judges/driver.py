"""Pure decisions: driver userspace in the image (the host's driver libraries must not be baked
in)."""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any

from .results import Outcome, failed, passed, warned


def parse_mountinfo(text: str) -> set[str]:
    """Mount points (field 5) of /proc/self/mountinfo, with its octal escapes decoded."""
    points: set[str] = set()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 5:
            points.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return points


DRIVER_LIB_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib",
                   "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "lib64", "usr/local/nvidia/lib",
                   "usr/local/nvidia/lib64")
DRIVER_BIN_DIRS = ("usr/bin", "usr/local/bin", "bin", "usr/local/nvidia/bin")


def _is_driver_file(name: str) -> bool:
    return name.startswith(("libcuda.so", "libnvidia-ml.so")) or name == "nvidia-smi"


def _allowed_driver_path(path: str) -> bool:
    # cuda-compat (forward compatibility) and link-time stubs are meant to be in images.
    return "/stubs/" in path or re.search(r"/cuda[^/]*/compat/", path) is not None


def scan_driver_userspace(root: str, mountpoints: set[str]) -> dict[str, Any]:
    """Find libcuda / libnvidia-ml / nvidia-smi that the image itself ships.

    Files the NVIDIA runtime bind-mounts are mount points; links the runtime's ldconfig made
    point at mount points. Either way they belong to the host driver and are not counted.
    """
    found: dict[str, list[str]] = {"in_image": [], "runtime_mounted": [], "allowed": [],
                                   "dangling": []}
    dirs = [os.path.join(root, d) for d in DRIVER_LIB_DIRS + DRIVER_BIN_DIRS]
    for pattern_dir in ("usr/local",):
        base = os.path.join(root, pattern_dir)
        with contextlib.suppress(OSError):
            for name in sorted(os.listdir(base)):
                if name.startswith("cuda"):
                    dirs.append(os.path.join(base, name, "compat"))
                    dirs.append(os.path.join(base, name, "lib64", "stubs"))
    seen_dirs: set[str] = set()
    seen: set[str] = set()
    scanned: list[str] = []
    for d in dirs:
        real_dir = os.path.realpath(d)
        if real_dir in seen_dirs or not os.path.isdir(d):
            continue
        seen_dirs.add(real_dir)
        scanned.append(d)
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for name in names:
            if not _is_driver_file(name):
                continue
            path = os.path.join(real_dir, name)
            if path in seen:
                continue
            seen.add(path)
            if path in mountpoints:
                found["runtime_mounted"].append(path)
            elif os.path.islink(path):
                target = os.path.realpath(path)
                if target in mountpoints:
                    found["runtime_mounted"].append(path)
                elif not os.path.exists(target):
                    found["dangling"].append(path)
                elif _allowed_driver_path(target + "/" if os.path.isdir(target) else target):
                    found["allowed"].append(path)
                else:
                    found["in_image"].append(path)
            elif _allowed_driver_path(path):
                found["allowed"].append(path)
            else:
                found["in_image"].append(path)
    return {**found, "scanned_dirs": scanned}


def driver_userspace_verdict(scan: dict[str, Any], ld_library_path: str) -> Outcome:
    stub_entries = [p for p in ld_library_path.split(os.pathsep) if "stubs" in p]
    ev = {**scan, "ld_library_path_stub_entries": stub_entries}
    if scan["in_image"]:
        return failed(
            "the image ships NVIDIA driver userspace; remove it (do not install nvidia-driver-*, "
            "libnvidia-compute-*, nvidia-utils-* or copy libcuda.so/libnvidia-ml.so/nvidia-smi "
            "into the image): the NVIDIA container runtime injects the versions matching the "
            "host driver, and image copies either shadow them or break the mount ('file exists')",
            "driver files in the image: " + ", ".join(scan["in_image"]), ev)
    if stub_entries:
        return warned(
            "remove the CUDA stubs directory from LD_LIBRARY_PATH: the stub libcuda.so is for "
            "linking only and at run time makes CUDA fail with 'CUDA driver is a stub library'",
            "stubs on LD_LIBRARY_PATH", ev)
    if scan["dangling"]:
        return warned("remove dangling driver symlinks from the image (they are left-overs of a "
                      "driver package and can collide with the runtime's mounts)",
                      "dangling driver symlinks: " + ", ".join(scan["dangling"]), ev)
    return passed(f"no driver userspace in the image ({len(scan['runtime_mounted'])} "
                  "runtime-mounted file(s) ignored)", ev)


