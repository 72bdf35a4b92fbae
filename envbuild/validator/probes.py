"""Probes: the only code that touches torch. Each returns plain data (facts) for the judges."""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import os
import platform
import warnings
from typing import Any

from .judges import _err
from .rules import (
    nccl_version_str,
    split_arch_flags,
    torch_pin_from_requires,
)


def import_torch() -> Any:
    return importlib.import_module("torch")


def probe_torch(torch: Any) -> dict[str, Any]:
    f: dict[str, Any] = {
        "version": str(torch.__version__),
        "file": getattr(torch, "__file__", None),
        "cuda": getattr(torch.version, "cuda", None),
        "hip": getattr(torch.version, "hip", None),
        "git_version": getattr(torch.version, "git_version", None),
        "debug": bool(getattr(torch.version, "debug", False)),
        "cudnn": None, "cudnn_error": None, "nccl": None, "nccl_error": None,
        "mps_built": False, "arch_list": [], "num_threads": torch.get_num_threads(),
        "distributed": False,
    }
    try:
        f["cudnn"] = torch.backends.cudnn.version()
    except Exception as e:
        f["cudnn_error"] = _err(e)
    if f["cuda"] or f["hip"]:
        try:
            f["nccl"] = nccl_version_str(torch.cuda.nccl.version())
        except Exception as e:
            f["nccl_error"] = _err(e)
    with contextlib.suppress(Exception):
        f["mps_built"] = bool(torch.backends.mps.is_built())
    with contextlib.suppress(Exception):
        f["distributed"] = bool(torch.distributed.is_available())
    # Not torch.cuda.get_arch_list(): it returns [] whenever no GPU is visible.
    flags = getattr(torch._C, "_cuda_getArchFlags", None)
    if flags is not None:
        with contextlib.suppress(Exception):
            f["arch_list"] = split_arch_flags(flags())
    return f


def probe_companion(torch: Any, pkg: str) -> dict[str, Any]:
    info: dict[str, Any] = {"installed": False, "version": None, "dist_version": None,
                            "torch_pin": None, "import_error": None, "op_error": None,
                            "warnings": []}
    try:
        found = importlib.util.find_spec(pkg) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return info
    info["installed"] = True
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        info["dist_version"] = importlib.metadata.version(pkg)
        info["torch_pin"] = torch_pin_from_requires(importlib.metadata.requires(pkg))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            mod = importlib.import_module(pkg)
            info["version"] = str(getattr(mod, "__version__", info["dist_version"]))
            if pkg == "torchvision":
                info["op"] = "torchvision.ops.nms on CPU"
                boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0],
                                      [20.0, 20.0, 30.0, 30.0]])
                keep = mod.ops.nms(boxes, torch.tensor([0.9, 0.8, 0.7]), 0.5).tolist()
                if keep != [0, 2]:
                    info["op_error"] = f"nms returned {keep}, expected [0, 2]"
        except Exception as e:
            if info["version"] is None:
                info["import_error"] = _err(e)
                info["version"] = info["dist_version"]
            else:
                info["op_error"] = _err(e)
    info["warnings"] = [str(w.message)[:300] for w in caught][:5]
    return info


def probe_devices(torch: Any) -> dict[str, Any]:
    env = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
                                          "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")}
    nodes: list[str] = []
    with contextlib.suppress(OSError):
        nodes = sorted(f"/dev/{n}" for n in os.listdir("/dev")
                       if n.startswith("nvidia") or n in ("kfd", "dri", "dxg"))
    driver = None
    with contextlib.suppress(OSError), open("/proc/driver/nvidia/version") as fh:
        driver = fh.readline().strip()
    info: dict[str, Any] = {"backend": "none", "available": False, "count": 0, "devices": [],
                            "arch_list": [], "init_warnings": [], "error": None, "env": env,
                            "dev_nodes": nodes, "driver": driver, "platform": platform.system()}
    hip = getattr(torch.version, "hip", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            available = bool(torch.cuda.is_available())
        except Exception as e:
            available = False
            info["error"] = _err(e)
    info["init_warnings"] = [str(w.message)[:500] for w in caught][:5]
    if available:
        info["backend"] = "rocm" if hip else "cuda"
        info["count"] = int(torch.cuda.device_count())
        with contextlib.suppress(Exception):
            info["arch_list"] = list(torch.cuda.get_arch_list())
        for i in range(info["count"]):
            p = torch.cuda.get_device_properties(i)
            gfx = getattr(p, "gcnArchName", None) if hip else None
            info["devices"].append({
                "index": i, "name": str(p.name), "cc": f"{p.major}.{p.minor}",
                "gfx": gfx, "total_memory": int(p.total_memory),
                "multi_processor_count": int(getattr(p, "multi_processor_count", 0)),
            })
        info["available"] = info["count"] > 0
        return info
    try:
        mps = bool(torch.backends.mps.is_available())
    except Exception:
        mps = False
    if mps:
        mem = None
        with contextlib.suppress(Exception):
            mem = int(torch.mps.recommended_max_memory())
        info.update(backend="mps", available=True, count=1,
                    devices=[{"index": 0, "name": "Apple MPS", "cc": None, "gfx": None,
                              "total_memory": mem, "multi_processor_count": 0}])
    return info
