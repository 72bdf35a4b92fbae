"""Probes: the only code that touches torch (and macos_facts, the platform facts the macOS/MPS
judges read). Each returns plain data (facts) for the judges."""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import os
import platform
import subprocess
import warnings
from typing import Any

from .judges import _err
from .rules import (
    nccl_version_str,
    split_arch_flags,
    torch_pin_from_requires,
    version_parts,
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


def _command(argv: list[str]) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()[:200] if out.returncode == 0 else None


def macos_facts() -> dict[str, Any]:
    """What judges/macos reads (stdlib): on macOS also sysctl.proc_translated (1 = Rosetta; the
    key is missing before macOS 11) and sw_vers -productVersion (the real version: an x86_64
    program built with an old SDK is told 10.16 by platform.mac_ver())."""
    facts: dict[str, Any] = {"system": platform.system(), "machine": platform.machine(),
                             "platform": platform.platform(), "mac_ver": platform.mac_ver()[0],
                             "proc_translated": None, "sw_vers": None}
    if facts["system"] == "Darwin":
        facts["proc_translated"] = _command(["sysctl", "-n", "sysctl.proc_translated"])
        facts["sw_vers"] = _command(["sw_vers", "-productVersion"])
    return facts


def probe_mps(torch: Any, floor: str | None = None) -> dict[str, Any]:
    """torch.backends.mps, each answer on its own: built, available, the device count, whether
    torch reads the macOS as at least the spec's floor, the error a tensor on 'mps' raises when
    unavailable, float64 on 'mps' (Metal has none) and PYTORCH_ENABLE_MPS_FALLBACK."""
    f: dict[str, Any] = {"built": None, "available": None, "device_count": None,
                         "macos_or_newer": None, "error": None, "float64_supported": None,
                         "float64_error": None,
                         "fallback_env": os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK")}
    mps = getattr(torch.backends, "mps", None)
    if mps is None:
        return f
    with contextlib.suppress(Exception):
        f["built"] = bool(mps.is_built())
    with contextlib.suppress(Exception):
        f["available"] = bool(mps.is_available())
    with contextlib.suppress(Exception):
        f["device_count"] = int(torch.mps.device_count())
    parts = version_parts(floor or "")
    if parts:
        with contextlib.suppress(Exception):
            f["macos_or_newer"] = bool(mps.is_macos_or_newer(parts[0], [*parts, 0][1]))
    if f["built"] and not f["available"]:
        try:
            torch.zeros(1, device="mps")
        except Exception as e:
            f["error"] = _err(e)[:500]
    if f["available"]:
        try:
            torch.zeros(2, dtype=torch.float64).to("mps")
            f["float64_supported"] = True
        except Exception as e:
            f["float64_supported"] = False
            f["float64_error"] = _err(e)[:500]
    return f


def mps_parity(torch: Any, device: str, n: int = 256, steps: int = 3) -> dict[str, Any]:
    """The same float32 work on `device` and on the CPU: a matmul and `steps` SGD steps of a
    small MLP from the same weights; relative Frobenius differences (device vs CPU)."""
    out: dict[str, Any] = {"device": device, "n": n, "steps": steps, "matmul_rel_err": None,
                           "train_rel_err": None, "losses_device": [], "losses_cpu": [],
                           "error": None}

    def rel(a: Any, b: Any) -> float:
        return float((a.detach().cpu() - b).norm() / b.norm())

    try:
        g = torch.Generator().manual_seed(0)
        a = torch.rand(n, n, generator=g) * 2 - 1
        b = torch.rand(n, n, generator=g) * 2 - 1
        out["matmul_rel_err"] = rel(a.to(device) @ b.to(device), a @ b)
        x = torch.rand(64, 16, generator=g) - 0.5
        y = torch.rand(64, 4, generator=g) - 0.5
        nn = torch.nn
        lin1, lin2 = nn.Linear(16, 32), nn.Linear(32, 4)
        with torch.no_grad():
            for p in (*lin1.parameters(), *lin2.parameters()):
                p.copy_((torch.rand(p.shape, generator=g) - 0.5) * 0.5)
        start = nn.Sequential(lin1, nn.Tanh(), lin2)

        def train(dev: str) -> tuple[list[float], Any]:
            model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
            model.load_state_dict(start.state_dict())
            model = model.to(dev)
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            xd, yd = x.to(dev), y.to(dev)
            losses = []
            for _ in range(steps):
                loss = torch.nn.functional.mse_loss(model(xd), yd)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(float(loss.detach().cpu()))
            return losses, torch.cat([p.detach().cpu().flatten() for p in model.parameters()])

        out["losses_device"], on_device = train(device)
        out["losses_cpu"], on_cpu = train("cpu")
        out["train_rel_err"] = rel(on_device, on_cpu)
    except Exception as e:
        out["error"] = _err(e)[:500]
    return out
