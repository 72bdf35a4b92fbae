"""numerics.*: matmul, conv2d and an autocast step against a float64 reference."""

from __future__ import annotations

from typing import Any

from .context import (
    TorchContext,
    allow_tf32,
    low_precision,
    on_compute_device,
    rel_err,
    supports_tf32,
    synchronize,
)
from .judges import (
    Outcome,
    _err,
    failed,
    skipped,
    tolerance_verdict,
)


@on_compute_device
def t_numerics_matmul(ctx: TorchContext, device: str) -> Outcome:
    torch = ctx.torch
    n = 256 if device == "cpu" else 1024
    g = torch.Generator().manual_seed(0)
    a = torch.rand(n, n, generator=g, dtype=torch.float64) * 2 - 1
    b = torch.rand(n, n, generator=g, dtype=torch.float64) * 2 - 1
    ref = a @ b
    errors: dict[str, float] = {}
    with allow_tf32(torch, False):
        out = a.float().to(device) @ b.float().to(device)
        synchronize(torch, device)
        errors["fp32"] = rel_err(torch, out, ref)
    if supports_tf32(ctx.facts):
        with allow_tf32(torch, True):
            out = a.float().to(device) @ b.float().to(device)
            synchronize(torch, device)
            errors["tf32"] = rel_err(torch, out, ref)
    outcome = tolerance_verdict(errors, f"matmul {n}x{n} on {device}")
    outcome.evidence.update(device=device, n=n)
    return outcome


@on_compute_device
def t_numerics_conv2d(ctx: TorchContext, device: str) -> Outcome:
    torch = ctx.torch
    fn = torch.nn.functional
    g = torch.Generator().manual_seed(1)
    x = torch.rand(4, 8, 32, 32, generator=g, dtype=torch.float64)
    w = (torch.rand(16, 8, 3, 3, generator=g, dtype=torch.float64) - 0.5) * 0.2
    gout = torch.rand(4, 16, 32, 32, generator=g, dtype=torch.float64)
    xr = x.clone().requires_grad_(True)
    ref = fn.conv2d(xr, w, padding=1)
    (ref * gout).sum().backward()
    with allow_tf32(torch, False):
        xd = x.float().to(device).requires_grad_(True)
        out = fn.conv2d(xd, w.float().to(device), padding=1)
        (out * gout.float().to(device)).sum().backward()
        synchronize(torch, device)
    errors = {"fp32": rel_err(torch, out, ref.detach())}
    grad_err = rel_err(torch, xd.grad, xr.grad)
    outcome = tolerance_verdict({"fp32": max(errors["fp32"], grad_err)}, f"conv2d on {device}")
    backend = ctx.facts["devices"]["backend"]
    path = {"cuda": "cuDNN", "rocm": "MIOpen", "mps": "MPS"}.get(backend, "CPU")
    outcome.evidence.update(device=device, path=path, forward_rel_err=errors["fp32"],
                            input_grad_rel_err=grad_err,
                            cudnn_enabled=bool(torch.backends.cudnn.enabled))
    return outcome


@on_compute_device
def t_numerics_autocast(ctx: TorchContext, device: str) -> Outcome:
    torch = ctx.torch
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
    synchronize(torch, device)
    if y.dtype != dtype:
        return failed("autocast did not lower the matmul precision: autocast is broken here",
                      f"autocast output is {y.dtype}, expected {dtype}",
                      {"device": device, "dtype": str(y.dtype)})
    outcome = tolerance_verdict({dtype_name: rel_err(torch, y, ref)},
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
