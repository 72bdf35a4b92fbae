"""The validator's checks: probes (the only code that touches torch), the torch checks the
worker runs, the stdlib host checks the supervisor runs, and the check table."""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .judges import (
    EXIT_CANNOT_RUN,
    WSL_LIB,
    Outcome,
    _err,
    _gpu_present,
    compile_verdict,
    compiler_error,
    device_coverage_rows,
    driver_packages,
    driver_userspace_verdict,
    failed,
    find_toolchain,
    is_wsl2,
    judge_arch_coverage,
    judge_archs,
    judge_cuda_libs,
    judge_cuda_packages,
    judge_cuda_version,
    judge_cudnn,
    judge_device_count,
    judge_device_properties,
    judge_flavor,
    judge_nccl,
    judge_perf,
    judge_python,
    judge_require_cuda,
    judge_rocm_version,
    judge_spec_gpus,
    judge_torch_version,
    judge_torchaudio,
    judge_torchaudio_version,
    judge_torchvision,
    judge_torchvision_version,
    judge_triton,
    lib_stem,
    library_origin_verdict,
    loss_verdict,
    no_gpu_outcome,
    parse_ldconfig,
    parse_ldd,
    parse_mountinfo,
    passed,
    scan_driver_userspace,
    shm_verdict,
    skipped,
    tolerance_verdict,
    toolchain_missing,
    wsl2_verdict,
)
from .rules import (
    LINUX_DRIVER_DATA,
    cuda_major_of_dist,
    cudnn_version_str,
    is_cuda_dist,
    linux_driver_rule,
    nccl_version_str,
    parse_cc,
    split_arch_flags,
    torch_pin_from_requires,
)

# ---------------------------------------------------------------------------------------------
# Probes: the only code that touches torch. Each returns plain data for the judges above.


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


# ---------------------------------------------------------------------------------------------
# Worker-side context: lazy torch, cached facts


@dataclass
class Options:
    require_gpu: bool = False
    in_image: bool = False
    timeout_scale: float = 1.0


class TorchContext:
    def __init__(self, spec: dict[str, Any], peaks: dict[str, Any] | None, opts: Options) -> None:
        self.spec = spec
        self.peaks = peaks
        self.opts = opts
        self.torch: Any = None
        self.import_error: str | None = None
        self.facts: dict[str, Any] = {}

    def import_torch(self) -> None:
        try:
            self.torch = import_torch()
        except BaseException as e:  # a broken wheel can raise anything, SystemExit included
            if isinstance(e, KeyboardInterrupt):
                raise
            self.import_error = _err(e)

    def _fact(self, key: str, probe: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        if key not in self.facts:
            self.facts[key] = probe()
        value: dict[str, Any] = self.facts[key]
        return value

    def all_facts(self, *keys: str) -> dict[str, Any]:
        probes: dict[str, Callable[[], dict[str, Any]]] = {
            "torch": lambda: probe_torch(self.torch),
            "torchvision": lambda: probe_companion(self.torch, "torchvision"),
            "torchaudio": lambda: probe_companion(self.torch, "torchaudio"),
            "devices": lambda: probe_devices(self.torch),
        }
        for k in keys:
            self._fact(k, probes[k])
        return self.facts

    def device_facts(self) -> dict[str, Any]:
        return self.all_facts("torch", "devices")

    def compute_device(self) -> tuple[str, Outcome | None]:
        """Where numerics/training/perf run: the first GPU if any (failing if torch has no kernels
        for it), else the CPU."""
        facts = self.device_facts()
        if not _gpu_present(facts):
            return "cpu", None
        dev = facts["devices"]
        if dev["backend"] == "mps":
            return "mps", None
        row = device_coverage_rows(facts)[0]
        if not row["covered"]:
            return "", failed(
                "torch has no kernels for this GPU: see device.arch_coverage",
                f"{row['name']} not covered by torch's arch list", {"device": row})
        return "cuda:0", None


def _sync(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    elif device == "mps":
        torch.mps.synchronize()


@contextlib.contextmanager
def _tf32(torch: Any, enabled: bool) -> Iterator[None]:
    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _rel_err(torch: Any, out: Any, ref: Any) -> float:
    diff = out.detach().to("cpu", torch.float64) - ref
    return float(diff.norm() / ref.norm())


def low_precision(backend: str, cc: str | None) -> str:
    """The autocast/perf half precision: bf16 where the hardware has it (CUDA cc >= 8.0, ROCm,
    CPU), else fp16 (pre-Ampere NVIDIA, MPS). torch.cuda.is_bf16_supported() is no guide: it
    counts emulation."""
    if backend == "cuda":
        return "bf16" if cc and parse_cc(cc) >= (8, 0) else "fp16"
    return "fp16" if backend == "mps" else "bf16"


def _supports_tf32(facts: dict[str, Any]) -> bool:
    dev = facts.get("devices") or {}
    if dev.get("backend") != "cuda" or not dev.get("devices"):
        return False
    return parse_cc(str(dev["devices"][0]["cc"])) >= (8, 0)


# ---------------------------------------------------------------------------------------------
# Torch checks (run in the worker)


def t_facts_torch(ctx: TorchContext) -> Outcome:
    f = ctx.all_facts("torch")["torch"]
    dnn = (f"MIOpen {f['cudnn']}" if f["hip"]
           else f"cuDNN {cudnn_version_str(f['cudnn']) or 'none'}")
    detail = (f"torch {f['version']} (CUDA {f['cuda'] or 'none'}, HIP {f['hip'] or 'none'}, "
              f"{dnn}, NCCL {f['nccl'] or 'none'})")
    return passed(detail, f)


def t_facts_torchvision(ctx: TorchContext) -> Outcome:
    return judge_torchvision(ctx.spec, ctx.all_facts("torch", "torchvision"))


def t_facts_torchaudio(ctx: TorchContext) -> Outcome:
    return judge_torchaudio(ctx.spec, ctx.all_facts("torch", "torchaudio"))


def _spec_judge(judge: Callable[[dict[str, Any], dict[str, Any]], Outcome],
                *keys: str) -> Callable[[TorchContext], Outcome]:
    def run(ctx: TorchContext) -> Outcome:
        return judge(ctx.spec, ctx.all_facts(*keys))
    return run


def _device_judge(judge: Callable[[dict[str, Any], bool, str | None], Outcome],
                  ) -> Callable[[TorchContext], Outcome]:
    def run(ctx: TorchContext) -> Outcome:
        return judge(ctx.device_facts(), ctx.opts.require_gpu, ctx.spec.get("target"))
    return run


def t_device_kernel(ctx: TorchContext) -> Outcome:
    torch = ctx.torch
    facts = ctx.device_facts()
    if not _gpu_present(facts):
        return no_gpu_outcome(facts, ctx.opts.require_gpu, ctx.spec.get("target"))
    rows = device_coverage_rows(facts)
    results: list[dict[str, Any]] = []
    for row in rows:
        name = "mps" if facts["devices"]["backend"] == "mps" else f"cuda:{row['index']}"
        res: dict[str, Any] = {"device": name, "name": row["name"]}
        if not row["covered"]:
            res["error"] = "no kernels for this GPU in this torch build (see device.arch_coverage)"
        else:
            try:
                x = torch.arange(4096, dtype=torch.float32, device=name)
                y = (x + 1.0) * 2.0
                _sync(torch, name)
                if not torch.equal(y.cpu(), (torch.arange(4096, dtype=torch.float32) + 1.0) * 2.0):
                    res["error"] = "wrong result from an elementwise kernel"
            except Exception as e:
                res["error"] = _err(e)
        results.append(res)
    vision = ctx.all_facts("torchvision")["torchvision"]
    if vision.get("installed") and not vision.get("import_error") and rows and rows[0]["covered"]:
        dev0 = results[0]["device"]
        try:
            tv = importlib.import_module("torchvision")
            boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0]], device=dev0)
            keep = tv.ops.nms(boxes, torch.tensor([0.9, 0.8], device=dev0), 0.5).tolist()
            results.append({"device": dev0, "op": "torchvision.ops.nms",
                            **({} if keep == [0] else {"error": f"nms returned {keep}"})})
        except Exception as e:
            results.append({"device": dev0, "op": "torchvision.ops.nms", "error": _err(e)})
    ev = {"results": results}
    bad = [r for r in results if "error" in r]
    if bad:
        first = bad[0]
        return failed(
            "a kernel failed on the GPU: 'no kernel image is available' means the torch build "
            "lacks this GPU's arch; 'CUDA driver version is insufficient' means the host driver "
            "is older than the image's CUDA; a torchvision op failing on the GPU means torchvision "
            "was built for another CUDA/torch",
            f"{first['device']}: {first['error']}", ev)
    return passed(f"kernels ran on {len(rows)} device(s)", ev)


def t_numerics_matmul(ctx: TorchContext) -> Outcome:
    torch = ctx.torch
    device, bad = ctx.compute_device()
    if bad:
        return bad
    n = 256 if device == "cpu" else 1024
    g = torch.Generator().manual_seed(0)
    a = torch.rand(n, n, generator=g, dtype=torch.float64) * 2 - 1
    b = torch.rand(n, n, generator=g, dtype=torch.float64) * 2 - 1
    ref = a @ b
    errors: dict[str, float] = {}
    with _tf32(torch, False):
        out = a.float().to(device) @ b.float().to(device)
        _sync(torch, device)
        errors["fp32"] = _rel_err(torch, out, ref)
    if _supports_tf32(ctx.facts):
        with _tf32(torch, True):
            out = a.float().to(device) @ b.float().to(device)
            _sync(torch, device)
            errors["tf32"] = _rel_err(torch, out, ref)
    outcome = tolerance_verdict(errors, f"matmul {n}x{n} on {device}")
    outcome.evidence.update(device=device, n=n)
    return outcome


def t_numerics_conv2d(ctx: TorchContext) -> Outcome:
    torch = ctx.torch
    device, bad = ctx.compute_device()
    if bad:
        return bad
    fn = torch.nn.functional
    g = torch.Generator().manual_seed(1)
    x = torch.rand(4, 8, 32, 32, generator=g, dtype=torch.float64)
    w = (torch.rand(16, 8, 3, 3, generator=g, dtype=torch.float64) - 0.5) * 0.2
    gout = torch.rand(4, 16, 32, 32, generator=g, dtype=torch.float64)
    xr = x.clone().requires_grad_(True)
    ref = fn.conv2d(xr, w, padding=1)
    (ref * gout).sum().backward()
    with _tf32(torch, False):
        xd = x.float().to(device).requires_grad_(True)
        out = fn.conv2d(xd, w.float().to(device), padding=1)
        (out * gout.float().to(device)).sum().backward()
        _sync(torch, device)
    errors = {"fp32": _rel_err(torch, out, ref.detach())}
    grad_err = _rel_err(torch, xd.grad, xr.grad)
    outcome = tolerance_verdict({"fp32": max(errors["fp32"], grad_err)}, f"conv2d on {device}")
    backend = ctx.facts["devices"]["backend"]
    path = {"cuda": "cuDNN", "rocm": "MIOpen", "mps": "MPS"}.get(backend, "CPU")
    outcome.evidence.update(device=device, path=path, forward_rel_err=errors["fp32"],
                            input_grad_rel_err=grad_err,
                            cudnn_enabled=bool(torch.backends.cudnn.enabled))
    return outcome


def t_numerics_autocast(ctx: TorchContext) -> Outcome:
    torch = ctx.torch
    device, bad = ctx.compute_device()
    if bad:
        return bad
    dev = ctx.facts["devices"]
    dtype_name = low_precision(dev["backend"] if device != "cpu" else "cpu",
                               dev["devices"][0]["cc"] if device != "cpu" else None)
    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float16
    g = torch.Generator().manual_seed(2)
    x = torch.rand(64, 128, generator=g, dtype=torch.float64) - 0.5
    w = (torch.rand(32, 128, generator=g, dtype=torch.float64) - 0.5) * 0.1
    ref = x @ w.T
    device_type = device.split(":", 1)[0]
    wd = w.float().to(device).requires_grad_(True)
    try:
        ac = torch.autocast(device_type=device_type, dtype=dtype)
    except Exception as e:
        return skipped(f"autocast to {dtype_name} is not supported on {device_type}: {_err(e)}")
    with ac:
        y = torch.nn.functional.linear(x.float().to(device), wd)
    scaler = None
    if dtype_name == "fp16" and device_type == "cuda":  # fp16 training needs loss scaling
        amp: Any = getattr(torch, "amp", None)
        scaler = (amp.GradScaler("cuda") if hasattr(amp, "GradScaler")
                  else torch.cuda.amp.GradScaler())
    opt = torch.optim.SGD([wd], lr=0.1)
    before = wd.detach().clone()
    loss = y.float().square().mean()
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    else:
        loss.backward()
        opt.step()
    _sync(torch, device)
    if y.dtype != dtype:
        return failed("autocast did not lower the matmul precision: autocast is broken here",
                      f"autocast output is {y.dtype}, expected {dtype}",
                      {"device": device, "dtype": str(y.dtype)})
    outcome = tolerance_verdict({dtype_name: _rel_err(torch, y, ref)},
                                f"autocast {dtype_name} linear on {device}")
    finite = bool(torch.isfinite(wd.grad).all()) and bool(torch.isfinite(wd.detach()).all())
    changed = not bool(torch.equal(before, wd.detach()))
    outcome.evidence.update(device=device, dtype=dtype_name, step="SGD",
                            grad_scaler=scaler is not None, finite=finite, weights_changed=changed)
    if outcome.status == "pass" and not (finite and changed):
        return failed("the autocast optimizer step produced NaN/inf or did not update the "
                      "weights: mixed-precision training is broken on this device",
                      "autocast step broken", outcome.evidence)
    return outcome


def _quadrant_data(torch: Any, n: int, size: int, seed: int) -> tuple[Any, Any]:
    """Images with a bright 3x3 blob in one quadrant; the label is the quadrant."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, size, size, generator=g) * 0.3
    y = torch.randint(0, 4, (n,), generator=g)
    half = size // 2
    r0 = (y // 2) * half + torch.randint(0, half - 2, (n,), generator=g)
    c0 = (y % 2) * half + torch.randint(0, half - 2, (n,), generator=g)
    idx = torch.arange(size)
    rows = (idx[None, :] >= r0[:, None]) & (idx[None, :] < r0[:, None] + 3)
    cols = (idx[None, :] >= c0[:, None]) & (idx[None, :] < c0[:, None] + 3)
    x[:, 0] += (rows[:, :, None] & cols[:, None, :]).float()
    return x, y


def _small_net(torch: Any) -> Any:
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 4 * 4, 32), nn.ReLU(), nn.Linear(32, 4))


def t_train_smoke(ctx: TorchContext) -> Outcome:
    torch = ctx.torch
    device, bad = ctx.compute_device()
    if bad:
        return bad
    torch.manual_seed(0)
    x, y = _quadrant_data(torch, 512, 16, seed=3)
    x, y = x.to(device), y.to(device)
    model = _small_net(torch).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses: list[float] = []
    steps, batch = 40, 64
    for step in range(steps):
        i = (step * batch) % x.shape[0]
        loss = torch.nn.functional.cross_entropy(model(x[i:i + batch]), y[i:i + batch])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    with torch.no_grad():
        xt, yt = _quadrant_data(torch, 256, 16, seed=4)
        acc = float((model(xt.to(device)).argmax(1).cpu() == yt).float().mean())
    outcome = loss_verdict(losses)
    outcome.evidence.update(device=device, task="quadrant of a bright blob, 16x16, 4 classes",
                            optimizer="AdamW lr=3e-3", batch=batch, holdout_accuracy=round(acc, 3))
    return outcome


class _PatternDataset:
    """train.dataloader's dataset. Module level and torch-free at import, so spawn/forkserver
    DataLoader workers can unpickle it."""

    def __init__(self, n: int, shape: tuple[int, ...]) -> None:
        self.n = n
        self.shape = shape

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        torch = importlib.import_module("torch")
        return torch.full(self.shape, float(i)), i


def t_train_dataloader(ctx: TorchContext) -> Outcome:
    torch = ctx.torch
    facts = ctx.device_facts()
    pin = _gpu_present(facts) and facts["devices"]["backend"] in ("cuda", "rocm")
    n, shape, batch = 64, (3, 128, 128), 8
    loader = torch.utils.data.DataLoader(_PatternDataset(n, shape), batch_size=batch, num_workers=2,
                                         pin_memory=pin, timeout=60)
    seen: list[int] = []
    problems: list[str] = []
    pinned_all = True
    t0 = time.perf_counter()
    for data, idx in loader:
        seen.extend(int(i) for i in idx)
        want = idx.to(torch.float32).view(-1, 1, 1, 1).expand(-1, *shape)
        if not torch.equal(data, want):
            problems.append(f"batch {idx.tolist()} has wrong contents")
        if pin and not data.is_pinned():
            pinned_all = False
    ev = {"workers": 2, "pin_memory": pin, "samples": len(seen), "batch_bytes":
          batch * 4 * math.prod(shape), "seconds": round(time.perf_counter() - t0, 3),
          "start_method": torch.multiprocessing.get_start_method(allow_none=True) or "default"}
    if seen != list(range(n)) or problems:
        return failed("DataLoader returned wrong or missing samples: shared-memory transport "
                      "between workers is broken", "; ".join(problems[:3]) or "samples missing", ev)
    if pin and not pinned_all:
        return failed("pin_memory did not pin batches: page-locked host memory is unavailable "
                      "(check ulimit -l / the container's memlock limit)", "batches not pinned", ev)
    return passed(f"{n} samples through 2 workers" + (" with pinned memory" if pin else ""), ev)


def state_mismatches(torch: Any, left: Any, right: Any, prefix: str = "") -> list[str]:
    """Paths where two (nested) state dicts differ. Tensors are compared on the CPU: a checkpoint
    loaded with map_location='cpu' and a model on cuda:0 hold the same values on two devices,
    and torch.equal across devices raises instead of answering."""
    if torch.is_tensor(left) or torch.is_tensor(right):
        if not (torch.is_tensor(left) and torch.is_tensor(right)):
            return [prefix or "<root>"]
        a, b = left.detach().cpu(), right.detach().cpu()
        same = a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
        return [] if same else [prefix or "<root>"]
    if isinstance(left, dict) and isinstance(right, dict):
        diffs: list[str] = []
        for key in sorted(set(left) | set(right), key=str):
            where = f"{prefix}.{key}" if prefix else str(key)
            if key not in left or key not in right:
                diffs.append(where)
            else:
                diffs.extend(state_mismatches(torch, left[key], right[key], where))
        return diffs
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        if len(left) != len(right):
            return [prefix or "<root>"]
        diffs = []
        for i in range(len(left)):  # (no zip(strict=): the validator runs on Python 3.9)
            diffs.extend(state_mismatches(torch, left[i], right[i], f"{prefix}[{i}]"))
        return diffs
    return [] if left == right else [prefix or "<root>"]


def _torch_load(torch: Any, path: str, map_location: str) -> Any:
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except TypeError:  # torch < 1.13 has no weights_only
        return torch.load(path, map_location=map_location)


def t_train_checkpoint(ctx: TorchContext) -> Outcome:
    """Save model + optimizer state, load it back twice as users do (map_location onto the
    training device, and map_location='cpu' then into a model moved to the device), and compare
    every tensor, optimizer state included, on one device."""
    torch = ctx.torch
    device, bad = ctx.compute_device()
    if bad:
        return bad
    torch.manual_seed(5)
    model = _small_net(torch).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = _quadrant_data(torch, 32, 16, seed=6)
    x, y = x.to(device), y.to(device)

    def step(m: Any, o: Any) -> None:
        o.zero_grad()
        torch.nn.functional.cross_entropy(m(x), y).backward()
        o.step()

    for _ in range(2):
        step(model, opt)
    want = {"model": model.state_dict(), "optim": opt.state_dict()}
    diffs: list[str] = []
    outputs: dict[str, bool] = {}
    with tempfile.TemporaryDirectory(prefix="envbuild-ckpt-") as tmp:
        path = os.path.join(tmp, "ckpt.pt")
        torch.save(want, path)
        size = os.path.getsize(path)
        for where in dict.fromkeys((device, "cpu")):
            loaded = _torch_load(torch, path, where)
            diffs += [f"load({where}): {d}" for d in state_mismatches(torch, want, loaded)]
            fresh = _small_net(torch)
            fresh.load_state_dict(loaded["model"])
            fresh = fresh.to(device)
            opt2 = torch.optim.AdamW(fresh.parameters(), lr=1e-3)
            opt2.load_state_dict(loaded["optim"])
            diffs += [f"restored({where}): {d}" for d in state_mismatches(
                torch, {"model": model.state_dict(), "optim": opt.state_dict()},
                {"model": fresh.state_dict(), "optim": opt2.state_dict()})]
            with torch.no_grad():
                outputs[where] = bool(torch.equal(model(x).cpu(), fresh(x).cpu()))
    ev = {"device": device, "bytes": size, "tensors": len(model.state_dict()),
          "map_locations": list(outputs), "mismatched": diffs[:20],
          "same_output": outputs, "optimizer": "AdamW (exp_avg, exp_avg_sq, step)"}
    if diffs or not all(outputs.values()):
        return failed("a checkpoint did not round-trip exactly: torch.save/torch.load or the "
                      "filesystem is corrupting data", f"{len(diffs)} tensor(s) differ", ev)
    return passed(f"model+optimizer state ({size} bytes) round-tripped exactly "
                  f"(map_location {', '.join(outputs)})", ev)


def _compile_once(torch: Any, device: str) -> dict[str, Any]:
    backend = "inductor C++" if device == "cpu" else "inductor Triton"
    run: dict[str, Any] = {"device": device, "backend": backend}
    t0 = time.monotonic()
    try:
        torch.manual_seed(7)
        nn = torch.nn
        model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64),
                              nn.Linear(64, 8)).to(device)
        g = torch.Generator().manual_seed(8)
        x = torch.randn(16, 32, generator=g).to(device)
        compiled = torch.compile(model)
        ref = model(x)
        ref.square().mean().backward()
        ref_grads = [p.grad.detach().clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        out = compiled(x)
        out.square().mean().backward()
        _sync(torch, device)
        run["rel_err"] = float((out.detach() - ref.detach()).norm() / ref.detach().norm())
        params = list(model.parameters())
        run["grad_rel_err"] = max(
            float((params[i].grad - r).norm() / max(float(r.norm()), 1e-30))
            for i, r in enumerate(ref_grads))
    except Exception as e:
        text = _err(e)
        run["error"] = text[-2000:] if compiler_error(text) else text[:2000]
    run["seconds"] = round(time.monotonic() - t0, 3)
    return run


def t_compile_smoke(ctx: TorchContext) -> Outcome:
    torch = ctx.torch
    import shutil
    import sysconfig

    facts = ctx.device_facts()
    devices = ["cpu"]
    gpu, bad = ctx.compute_device()
    if gpu.startswith("cuda") and not bad:
        devices.append(gpu)
    toolchain = find_toolchain(dict(os.environ), shutil.which,
                               sysconfig.get_paths().get("include"), os.path.exists)
    if toolchain_missing(toolchain, len(devices) > 1):  # fail fast: no minute-long traceback
        return compile_verdict(toolchain, [{"device": d, "backend": "not run"} for d in devices],
                               ctx.opts.in_image)
    if not hasattr(torch, "compile"):
        return skipped(f"torch {facts['torch'].get('version')} has no torch.compile")
    with contextlib.suppress(Exception):
        torch._dynamo.reset()
    runs = [_compile_once(torch, d) for d in devices]
    return compile_verdict(toolchain, runs, ctx.opts.in_image)


def python_argv() -> list[str]:
    """This interpreter with its mode flags (-I, -S, -E, -X ...): workers run the way we do."""
    flags = getattr(subprocess, "_args_from_interpreter_flags", None)
    return [sys.executable, *(flags() if flags else [])]


# The folder (or zipapp) that holds the `envbuild` package this validator was loaded from: a
# worker puts it first on sys.path, in place of the current directory, so neither an
# installed envbuild nor a file in the working directory can stand in for ours.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BOOT = ("import sys; root = sys.argv.pop(1); sys.path[:] = [root] + [p for p in sys.path if p]; "
         "from envbuild.validator.supervisor import main; sys.exit(main())")


def self_argv() -> list[str]:
    """The command line that runs this validator again (a worker, a distributed child)."""
    return [*python_argv(), "-c", _BOOT, _ROOT]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _kill_tree(proc: subprocess.Popen[Any], group: bool = True) -> None:
    """SIGKILL a child (group=True: the process group of a child started with
    start_new_session), then reap it. The group is signalled only while its leader is not yet
    reaped, so the id cannot have been reused by an unrelated process."""
    if proc.returncode is None:
        try:
            if group and os.name == "posix":
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        except OSError:
            with contextlib.suppress(OSError):
                proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _exit_with_parent() -> None:
    """Exit as soon as the process that started us is gone, so a supervisor killed with
    SIGKILL or SIGTERM leaves no worker (or its children) running."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(EXIT_CANNOT_RUN)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def t_dist_allreduce(ctx: TorchContext) -> Outcome:
    torch = ctx.torch
    facts = ctx.device_facts()
    if not facts["torch"].get("distributed"):
        return skipped("torch.distributed is not available in this torch build")
    dev = facts["devices"]
    rows = device_coverage_rows(facts) if _gpu_present(facts) else []
    gpus = [r for r in rows if r["covered"]] if dev["backend"] in ("cuda", "rocm") else []
    backend = "nccl" if len(gpus) >= 2 else "gloo"
    if backend == "gloo" and not torch.distributed.is_gloo_available():
        return skipped("this torch build has no gloo backend")
    world, limit = 2, 60.0 * ctx.opts.timeout_scale
    env = dict(os.environ)
    if platform.system() == "Linux":
        # The loopback interface always exists; hostname resolution inside containers may not.
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        env.setdefault("NCCL_SOCKET_IFNAME", "lo")
    port = _free_port()
    procs: list[subprocess.Popen[str]] = []
    outputs: list[dict[str, Any]] = []
    t0 = time.monotonic()
    try:
        for rank in range(world):
            cfg = {"rank": rank, "world": world, "port": port, "backend": backend,
                   "timeout": max(10.0, limit - 10.0)}
            procs.append(subprocess.Popen(
                [*self_argv(), "--_dist-child", json.dumps(cfg)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, env=env))
        for rank, p in enumerate(procs):
            remaining = max(1.0, limit - (time.monotonic() - t0))
            try:
                out, err = p.communicate(timeout=remaining)
            except subprocess.TimeoutExpired:
                for q in procs:
                    _kill_tree(q, group=False)
                out, err = p.communicate()
                outputs.append({"rank": rank, "timeout": True, "stderr_tail": (err or "")[-800:]})
                continue
            last = (out or "").strip().splitlines()[-1:] or ["{}"]
            try:
                res = json.loads(last[0])
            except ValueError:
                res = {"ok": False, "error": "no result line", "stdout_tail": (out or "")[-400:]}
            res.update(rank=rank, returncode=p.returncode)
            if p.returncode != 0 or not res.get("ok"):
                res["stderr_tail"] = (err or "")[-800:]
            outputs.append(res)
    finally:
        for q in procs:
            _kill_tree(q, group=False)
    ev = {"backend": backend, "world_size": world, "port": port, "ranks": outputs,
          "seconds": round(time.monotonic() - t0, 3), "gpus": len(gpus)}
    if any(o.get("timeout") for o in outputs):
        return failed(
            "the 2-process all-reduce timed out: processes cannot rendezvous over localhost TCP "
            "or a collective hangs; check firewalls/loopback, GLOO_SOCKET_IFNAME / "
            "NCCL_SOCKET_IFNAME, and /dev/shm size (NCCL uses it)", "all-reduce timed out", ev)
    bad = [o for o in outputs if o.get("returncode") != 0 or not o.get("ok")]
    if bad:
        first = bad[0]
        return failed(
            "the 2-process all-reduce failed: see evidence.ranks[].error/stderr_tail (NCCL: set "
            "NCCL_DEBUG=INFO; check /dev/shm size and --ipc=host for multi-GPU)",
            f"rank {first.get('rank')}: "
            f"{first.get('error') or 'exit ' + str(first.get('returncode'))}",
            ev)
    return passed(f"{backend} all-reduce across {world} processes exact", ev)


def _dist_child(cfg: dict[str, Any]) -> int:
    _exit_with_parent()
    result: dict[str, Any] = {"ok": False}
    try:
        import datetime

        torch = import_torch()
        dist = torch.distributed
        rank, world, backend = int(cfg["rank"]), int(cfg["world"]), str(cfg["backend"])
        device = "cpu"
        if backend == "nccl":
            torch.cuda.set_device(rank)
            device = f"cuda:{rank}"
        t0 = time.monotonic()
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{cfg['port']}", rank=rank,
                                world_size=world,
                                timeout=datetime.timedelta(seconds=float(cfg["timeout"])))
        result["init_s"] = round(time.monotonic() - t0, 3)
        t = torch.arange(1024, dtype=torch.float32, device=device) * (rank + 1)
        dist.all_reduce(t)
        expected = torch.arange(1024, dtype=torch.float32) * (world * (world + 1) / 2)
        result["ok"] = bool(torch.equal(t.cpu(), expected))
        if not result["ok"]:
            result["error"] = (f"all_reduce gave {t[:4].tolist()}..., "
                               f"expected {expected[:4].tolist()}...")
        dist.destroy_process_group()
    except Exception as e:
        result["error"] = _err(e)
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


def measure(torch: Any, device: str, fn: Callable[[], Any], *, warmup_s: float = 0.5,
            repeats: int = 9, repeat_s: float = 0.03) -> tuple[float, dict[str, Any]]:
    """Seconds per call of fn, measured the way the hardware is best shown: a warm-up long
    enough for clocks and caches (and cuBLAS's heuristics) to settle, then `repeats` timed runs
    of k back-to-back calls each (k so a run lasts ~repeat_s), timed with CUDA events on a GPU
    (no host overhead between kernels), and the median of the runs. Returns (seconds, method)."""
    gpu = device.startswith("cuda")

    def sync() -> None:
        _sync(torch, device)

    calls = 0
    t0 = time.perf_counter()
    while calls < 3 or time.perf_counter() - t0 < warmup_s:
        fn()
        calls += 1
        if calls % 8 == 0:
            sync()
        if calls >= 10000:
            break
    sync()
    per_call = max((time.perf_counter() - t0) / calls, 1e-7)
    k = max(1, min(10000, int(repeat_s / per_call + 0.5)))
    times: list[float] = []
    for _ in range(repeats):
        if gpu:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(k):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1000.0 / k)
        else:
            t = time.perf_counter()
            for _ in range(k):
                fn()
            sync()
            times.append((time.perf_counter() - t) / k)
    times.sort()
    median = times[len(times) // 2]
    method = {"timer": "CUDA events" if gpu else "perf_counter + synchronize",
              "warmup_calls": calls, "warmup_s": round(warmup_s, 3), "repeats": repeats,
              "calls_per_repeat": k, "statistic": "median of repeats",
              "spread": [round(times[0] / median, 3), round(times[-1] / median, 3)]}
    return median, method


def _cpu_name() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "CPU"


def _perf_device(ctx: TorchContext) -> tuple[str, str, str, Outcome | None]:
    device, bad = ctx.compute_device()
    facts = ctx.facts
    dev = facts["devices"]
    name = dev["devices"][0]["name"] if _gpu_present(facts) else _cpu_name()
    backend = dev["backend"] if _gpu_present(facts) else "cpu"
    return device, str(name), backend, bad


def _gpu_perf_device(ctx: TorchContext) -> tuple[str, str, str, Outcome | None]:
    """_perf_device for the GPU-only measurements: without a GPU they skip (or fail)."""
    if not _gpu_present(ctx.device_facts()):
        return "", "", "", no_gpu_outcome(ctx.facts, ctx.opts.require_gpu,
                                          ctx.spec.get("target"))
    return _perf_device(ctx)


PERF_MATMUL_N = 8192  # 8192^3: large enough that every SM of today's largest GPUs stays busy
PERF_COPY_BYTES = 1 << 30  # 1 GiB per copy: far past every GPU's L2, so DRAM is what is timed


def _perf_outcome(ctx: TorchContext, metrics: dict[str, float], name: str, backend: str,
                  what: str, **evidence: Any) -> Outcome:
    """The data-driven verdict (peaks table) with how it was measured, and the numbers kept."""
    outcome = judge_perf(metrics, name, backend, ctx.peaks, what)
    outcome.evidence.update(evidence)
    ctx.facts.setdefault("perf", {}).update(metrics)
    return outcome


def t_perf_matmul(ctx: TorchContext) -> Outcome:
    torch = ctx.torch
    device, name, backend, bad = _perf_device(ctx)
    if bad:
        return bad
    metrics: dict[str, float] = {}
    methods: dict[str, Any] = {}
    if device == "cpu":
        n = 512
        ca, cb = torch.rand(n, n), torch.rand(n, n)
        sec, method = measure(torch, device, lambda: ca @ cb, warmup_s=0.1, repeats=5)
        metrics = {"fp32_gflops": 2 * n ** 3 / sec / 1e9}
        ctx.facts.setdefault("perf", {}).update(metrics)
        outcome = judge_perf(metrics, name, "cpu", None, "matmul")
        outcome.evidence.update(n=n, threads=torch.get_num_threads(), method=method)
        return outcome
    mem = ctx.facts["devices"]["devices"][0].get("total_memory") or 0
    plan: list[tuple[str, Any, bool]] = []
    if device == "mps":
        plan.append(("fp32_tflops", torch.float32, False))
    else:
        low = low_precision(backend, ctx.facts["devices"]["devices"][0]["cc"])
        plan.append((f"{low}_tflops", torch.bfloat16 if low == "bf16" else torch.float16, False))
        if _supports_tf32(ctx.facts):
            plan.append(("tf32_tflops", torch.float32, True))
        plan.append(("fp32_tflops", torch.float32, False))
    sizes: dict[str, int] = {}
    for key, dtype, tf32 in plan:
        n = PERF_MATMUL_N if device != "mps" else 4096
        elem = torch.empty((), dtype=dtype).element_size()
        while mem and 3 * n * n * elem > mem // 4 and n > 1024:
            n //= 2
        g = torch.Generator(device=device).manual_seed(0) if device != "mps" else None
        a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
        b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
        out = torch.empty(n, n, device=device, dtype=dtype)
        with _tf32(torch, tf32):
            sec, methods[key] = measure(torch, device,
                                        functools.partial(torch.matmul, a, b, out=out))
        metrics[key] = 2 * n ** 3 / sec / 1e12
        sizes[key] = n
        del a, b, out
    return _perf_outcome(ctx, metrics, name, backend, "matmul", sizes=sizes, method=methods,
                         how="square matmul n x n x n into a preallocated output, 2 n^3 flops "
                             "per call")


def t_perf_mem_bw(ctx: TorchContext) -> Outcome:
    torch = ctx.torch
    device, name, backend, bad = _gpu_perf_device(ctx)
    if bad:
        return bad
    mem = ctx.facts["devices"]["devices"][0].get("total_memory") or (8 << 30)
    size = min(PERF_COPY_BYTES, mem // 8)
    src = torch.empty(size // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    sec, method = measure(torch, device, lambda: dst.copy_(src))
    metrics = {"mem_bw_gbs": 2 * size / sec / 1e9}  # every copied byte is read once, written once
    return _perf_outcome(ctx, metrics, name, backend, "device memory bandwidth", bytes=size,
                         method=method, how="device-to-device copy_, read + write bytes counted")


def t_perf_h2d(ctx: TorchContext) -> Outcome:
    torch = ctx.torch
    device, name, backend, bad = _gpu_perf_device(ctx)
    if bad:
        return bad
    if device == "mps":
        return skipped("host-to-device bandwidth does not apply to unified memory (MPS)")
    size = PERF_COPY_BYTES
    try:
        host = torch.empty(size, dtype=torch.uint8).pin_memory()
    except RuntimeError:  # pinned memory is capped (WSL2, small memlock limits): a smaller copy
        size = 256 << 20
        host = torch.empty(size, dtype=torch.uint8).pin_memory()
    dst = torch.empty(size, dtype=torch.uint8, device=device)
    sec, method = measure(torch, device, lambda: dst.copy_(host, non_blocking=True),
                          warmup_s=0.2, repeats=5)
    metrics = {"h2d_gbs": size / sec / 1e9}
    return _perf_outcome(ctx, metrics, name, backend, "pinned host-to-device bandwidth",
                         bytes=size, method=method, how="pinned host tensor -> device copy_")


# ---------------------------------------------------------------------------------------------
# Host checks (stdlib only, run in the supervisor)


def h_facts_python(spec: dict[str, Any], opts: Options) -> Outcome:
    ev = {"version": platform.python_version(), "implementation": platform.python_implementation(),
          "executable": sys.executable, "prefix": sys.prefix}
    return passed(f"{platform.python_implementation()} {platform.python_version()} "
                  f"({sys.executable})", ev)


def h_expect_python(spec: dict[str, Any], opts: Options) -> Outcome:
    return judge_python(spec, platform.python_version())


def h_shm_size(spec: dict[str, Any], opts: Options) -> Outcome:
    path = "/dev/shm"
    if not os.path.isdir(path):
        return shm_verdict(None, False)
    st = os.statvfs(path)
    total = st.f_frsize * st.f_blocks
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix="envbuild-") as fh:
            block = os.urandom(1 << 20)
            fh.write(block)
            fh.flush()
            fh.seek(0)
            ok = fh.read() == block
        return shm_verdict(total, ok, None if ok else "read back different bytes")
    except OSError as e:
        return shm_verdict(total, False, _err(e))


def h_image_driver(spec: dict[str, Any], opts: Options) -> Outcome:
    if not opts.in_image:
        return skipped("not running as the image's validator (pass --in-image inside the image)")
    mountinfo = ""
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as fh:
        mountinfo = fh.read()
    scan = scan_driver_userspace("/", parse_mountinfo(mountinfo))
    return driver_userspace_verdict(scan, os.environ.get("LD_LIBRARY_PATH", ""))


@functools.lru_cache(maxsize=1)
def shipped_linux_driver_rule() -> dict[str, list[str]]:
    """matrix/wsl2.toml's driver_packages and forbidden_packages: the zipapp carries them (its
    LINUX_DRIVER_DATA, written by envbuild when it renders the image); run from a source tree,
    they are read from the matrix beside it."""
    import pkgutil

    try:
        data = pkgutil.get_data(__package__ or "envbuild.validator", LINUX_DRIVER_DATA)
        if data is not None:
            return dict(json.loads(data))
    except OSError:
        pass
    import tomllib  # a source tree: envbuild's own Python (3.11+)
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "matrix" / "wsl2.toml"
    with open(path, "rb") as fh:
        return linux_driver_rule(tomllib.load(fh))


def wsl2_facts(run_ldconfig: bool = True) -> dict[str, Any]:
    wsl_lib = None
    with contextlib.suppress(OSError):
        wsl_lib = sorted(os.listdir(WSL_LIB))
    kernel = ""
    with contextlib.suppress(OSError), open("/proc/version") as fh:
        kernel = fh.read().strip()[:300]
    mountinfo = ""
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as fh:
        mountinfo = fh.read()
    facts: dict[str, Any] = {
        "dxg": os.path.exists("/dev/dxg"), "wsl_lib": wsl_lib, "kernel": kernel,
        "mounts": sorted(m for m in parse_mountinfo(mountinfo) if m.startswith("/usr/lib/wsl")),
        "ld_library_path": os.environ.get("LD_LIBRARY_PATH", ""), "libcuda": [],
        "driver_packages": []}
    if not is_wsl2(facts):
        return facts
    if run_ldconfig:
        for exe in ("/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"):
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                out = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=10,
                                     check=False).stdout
                facts["libcuda"] = parse_ldconfig(out)
                break
    with contextlib.suppress(OSError), open("/var/lib/dpkg/status", encoding="utf-8",
                                            errors="replace") as fh:
        facts["driver_packages"] = driver_packages(fh.read(),
                                                   shipped_linux_driver_rule()["driver_packages"])
    return facts


def t_libs_origin(ctx: TorchContext) -> Outcome:
    """Which GPU libraries torch mapped (after the GPU checks loaded them), and from where."""
    facts = ctx.all_facts("torch")["torch"]
    kind = ctx.spec.get("target") or ("rocm" if facts.get("hip") else
                                      "cuda" if facts.get("cuda") else "cpu")
    if ctx.torch is not None and kind in ("cuda", "rocm"):
        with contextlib.suppress(Exception):  # loads libcudnn when it is lazy
            ctx.torch.backends.cudnn.version()
    torch_dir = os.path.realpath(os.path.dirname(getattr(ctx.torch, "__file__", "") or "."))
    copies: dict[str, str] = {}
    site = os.path.dirname(torch_dir)
    for top in (os.path.join(site, "nvidia"), os.path.join(torch_dir, "lib")):
        for root, _, names in os.walk(top):
            for name in names:
                stem = lib_stem(name)
                if stem:
                    copies.setdefault(stem, os.path.join(root, name))
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            maps = fh.read()
    except OSError as e:
        return skipped(f"cannot read /proc/self/maps: {_err(e)}")
    return library_origin_verdict(kind, maps, torch_dir, copies,
                                  os.environ.get("LD_LIBRARY_PATH", ""))


def _package_dir(name: str) -> str | None:
    """The directory of an importable top-level package, without importing it."""
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if found is None or not found.submodule_search_locations:
        return None
    return os.path.realpath(next(iter(found.submodule_search_locations)))


def cuda_dists() -> list[dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for dist in importlib.metadata.distributions():
        try:
            name = str(dist.metadata["Name"] or "")
        except KeyError:
            continue
        if not is_cuda_dist(name):
            continue
        files = [str(f) for f in (dist.files or []) if str(f).startswith("nvidia/")]
        major, how = cuda_major_of_dist(name, dist.version, files)
        rows.setdefault(name.lower(), {"name": name, "version": dist.version, "major": major,
                                       "how": how})
    return sorted(rows.values(), key=lambda r: str(r["name"]))


def h_cuda_packages(spec: dict[str, Any], opts: Options) -> Outcome:
    return judge_cuda_packages(spec, cuda_dists())


def h_cuda_libs(spec: dict[str, Any], opts: Options) -> Outcome:
    torch_dir = _package_dir("torch")
    if torch_dir is None:
        return judge_cuda_libs(spec, [], "torch", [], "torch is not installed")
    lib = os.path.join(torch_dir, "lib", "libtorch_cuda.so")
    if not os.path.exists(lib):
        return judge_cuda_libs(spec, [], lib, [], "no libtorch_cuda.so: not a CUDA build of torch")
    site = os.path.dirname(torch_dir)
    dirs = [os.path.join(site, "nvidia") + "/", os.path.join(torch_dir, "lib") + "/"]
    try:
        out = subprocess.run(["ldd", lib], capture_output=True, text=True, timeout=20,
                             check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return judge_cuda_libs(spec, [], lib, dirs, _err(e))
    rows = [(n, os.path.realpath(p) if p else None) for n, p in parse_ldd(out.stdout)]
    return judge_cuda_libs(spec, rows, lib, dirs, None if rows else (out.stderr.strip()[:300]
                                                                    or "ldd printed nothing"))


def h_cuda_require(spec: dict[str, Any], opts: Options) -> Outcome:
    keys = ("NVIDIA_REQUIRE_CUDA", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES")
    return judge_require_cuda(spec, {k: os.environ.get(k) for k in keys})


def triton_facts() -> dict[str, Any]:
    f: dict[str, Any] = {"version": None, "dir": _package_dir("triton"), "ptxas": None,
                         "ptxas_version": None, "error": None}
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        f["version"] = importlib.metadata.version("triton")
    if f["dir"] is None:
        f["version"] = None
        return f
    ptxas = os.path.join(f["dir"], "backends", "nvidia", "bin", "ptxas")
    if os.access(ptxas, os.X_OK):
        f["ptxas"] = ptxas
        try:
            out = subprocess.run([ptxas, "--version"], capture_output=True, text=True,
                                 timeout=20, check=False)
            last = [ln for ln in out.stdout.splitlines() if ln.strip()]
            f["ptxas_version"] = last[-1].strip() if out.returncode == 0 and last else None
            if out.returncode != 0:
                f["error"] = (out.stderr.strip() or f"exit {out.returncode}")[:300]
        except (OSError, subprocess.SubprocessError) as e:
            f["error"] = _err(e)
    return f


def h_triton(spec: dict[str, Any], opts: Options) -> Outcome:
    return judge_triton(spec, triton_facts())


def h_wsl2(spec: dict[str, Any], opts: Options) -> Outcome:
    facts = wsl2_facts()
    if not is_wsl2(facts):
        return wsl2_verdict(facts)
    return wsl2_verdict(facts, shipped_linux_driver_rule()["forbidden_packages"])


# ---------------------------------------------------------------------------------------------
# The check table. Order is the report's order; torch checks run in this order in the worker.


@dataclass(frozen=True)
class CheckDef:
    id: str
    title: str
    timeout_s: float
    host: Callable[[dict[str, Any], Options], Outcome] | None = None
    torch: Callable[[TorchContext], Outcome] | None = None


CHECKS: tuple[CheckDef, ...] = (
    CheckDef("facts.python", "Python interpreter", 5, host=h_facts_python),
    CheckDef("expect.python", "Python version matches the spec", 5, host=h_expect_python),
    CheckDef("facts.torch", "torch imports; build facts (CUDA/HIP, cuDNN, NCCL, arch list)", 60,
             torch=t_facts_torch),
    CheckDef("facts.torchvision", "torchvision imports, pins this torch, runs nms", 60,
             torch=t_facts_torchvision),
    CheckDef("facts.torchaudio", "torchaudio imports and pins this torch", 60,
             torch=t_facts_torchaudio),
    CheckDef("expect.torch_version", "torch version matches the spec", 10,
             torch=_spec_judge(judge_torch_version, "torch")),
    CheckDef("expect.torchvision_version", "torchvision version matches the spec", 60,
             torch=_spec_judge(judge_torchvision_version, "torch", "torchvision")),
    CheckDef("expect.torchaudio_version", "torchaudio version matches the spec", 60,
             torch=_spec_judge(judge_torchaudio_version, "torch", "torchaudio")),
    CheckDef("expect.flavor", "torch build matches the target (CUDA / ROCm / CPU / MPS)", 10,
             torch=_spec_judge(judge_flavor, "torch")),
    CheckDef("expect.cuda_version", "torch's CUDA version matches the spec", 10,
             torch=_spec_judge(judge_cuda_version, "torch")),
    CheckDef("expect.cudnn", "cuDNN version matches the spec", 10,
             torch=_spec_judge(judge_cudnn, "torch")),
    CheckDef("expect.nccl", "NCCL version matches the spec", 10,
             torch=_spec_judge(judge_nccl, "torch")),
    CheckDef("expect.rocm_version", "torch's ROCm (HIP) version matches the spec", 10,
             torch=_spec_judge(judge_rocm_version, "torch")),
    CheckDef("expect.archs", "torch carries the GPU archs the spec promises", 10,
             torch=_spec_judge(judge_archs, "torch")),
    CheckDef("cuda.packages", "every nvidia-*/cuda-* package is of the spec's CUDA major", 30,
             host=h_cuda_packages),
    CheckDef("cuda.libs", "libtorch_cuda.so's libraries resolve inside the wheel's directories",
             30, host=h_cuda_libs),
    CheckDef("cuda.require", "NVIDIA_REQUIRE_CUDA and the runtime settings agree with the spec",
             5, host=h_cuda_require),
    CheckDef("cuda.triton", "Triton and its ptxas for torch.compile on NVIDIA GPUs", 30,
             host=h_triton),
    CheckDef("device.spec_gpus", "the spec's GPUs are covered by torch's arch list (static)", 10,
             torch=_spec_judge(judge_spec_gpus, "torch")),
    CheckDef("device.count", "GPUs visible to torch", 90, torch=_device_judge(judge_device_count)),
    CheckDef("device.properties", "GPU names, compute capability, memory", 30,
             torch=_device_judge(judge_device_properties)),
    CheckDef("device.arch_coverage", "every visible GPU is covered by torch's arch list", 30,
             torch=_device_judge(judge_arch_coverage)),
    CheckDef("device.kernel", "a kernel runs on every GPU", 90, torch=t_device_kernel),
    CheckDef("numerics.matmul", "matmul matches a float64 reference", 60, torch=t_numerics_matmul),
    CheckDef("numerics.conv2d", "conv2d forward/backward match a float64 reference", 60,
             torch=t_numerics_conv2d),
    CheckDef("numerics.autocast", "an autocast (bf16/fp16) step is accurate", 60,
             torch=t_numerics_autocast),
    CheckDef("train.smoke", "a small CNN learns a synthetic task", 120, torch=t_train_smoke),
    CheckDef("train.dataloader", "DataLoader with 2 workers (shared memory, pinning)", 90,
             torch=t_train_dataloader),
    CheckDef("train.checkpoint", "checkpoint save/load round-trips exactly", 60,
             torch=t_train_checkpoint),
    CheckDef("compile.smoke", "torch.compile forward+backward matches eager (CPU; GPU: Triton)",
             300, torch=t_compile_smoke),
    CheckDef("dist.allreduce", "2-process all-reduce (gloo; NCCL with >= 2 GPUs)", 120,
             torch=t_dist_allreduce),
    CheckDef("libs.origin", "torch loads the GPU libraries its wheel brings, not a system copy",
             30, torch=t_libs_origin),
    CheckDef("shm.size", "/dev/shm size and writability", 15, host=h_shm_size),
    CheckDef("image.no_driver_userspace", "no NVIDIA driver userspace inside the image", 30,
             host=h_image_driver),
    CheckDef("wsl.environment", "WSL2: libcuda from the Windows driver, no Linux driver", 20,
             host=h_wsl2),
    CheckDef("perf.matmul", "matmul throughput vs the GPU's peak", 120, torch=t_perf_matmul),
    CheckDef("perf.mem_bw", "device memory bandwidth vs peak", 60, torch=t_perf_mem_bw),
    CheckDef("perf.h2d", "pinned host-to-device bandwidth vs expectation", 60, torch=t_perf_h2d),
)
CHECK_IDS = tuple(c.id for c in CHECKS)
_BY_ID = {c.id: c for c in CHECKS}


def select_checks(only: Sequence[str], skip: Sequence[str]) -> list[CheckDef]:
    """--only/--skip take check ids or group prefixes ('numerics' = numerics.*)."""
    def matches(pattern: str, cid: str) -> bool:
        pattern = pattern.rstrip("*").rstrip(".")
        return cid == pattern or cid.startswith(pattern + ".")

    for pattern in list(only) + list(skip):
        if not any(matches(pattern, c) for c in CHECK_IDS):
            raise ValueError(f"unknown check id {pattern!r}; known: {', '.join(CHECK_IDS)}")
    chosen = [c for c in CHECKS if not only or any(matches(p, c.id) for p in only)]
    return [c for c in chosen if not any(matches(p, c.id) for p in skip)]


