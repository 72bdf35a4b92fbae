"""compile.smoke: torch.compile forward and backward against eager, on the GPU when one is usable
(Triton), else on the CPU (Inductor C++). Not both: on a real H200 host the CPU compile took
66.6 s of a 93 s validation and the GPU one 3.2 s (tests/fixtures/hosts/h200-*-2026-11-28), and
the GPU job is what the image is for."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from .context import (
    TorchContext,
    synchronize,
)
from .judges import (
    Outcome,
    _err,
    compile_verdict,
    compiler_error,
    find_toolchain,
    skipped,
    toolchain_missing,
)


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
        synchronize(torch, device)
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
    gpu, bad = ctx.compute_device()
    devices = [gpu] if gpu.startswith("cuda") and not bad else ["cpu"]
    toolchain = find_toolchain(dict(os.environ), shutil.which,
                               sysconfig.get_paths().get("include"), os.path.exists)
    if toolchain_missing(toolchain, devices[0] != "cpu"):  # fail fast: no minute-long traceback
        return compile_verdict(toolchain, [{"device": d, "backend": "not run"} for d in devices],
                               ctx.opts.in_image)
    if not hasattr(torch, "compile"):
        return skipped(f"torch {facts['torch'].get('version')} has no torch.compile")
    with contextlib.suppress(Exception):
        torch._dynamo.reset()
    runs = [_compile_once(torch, d) for d in devices]
    return compile_verdict(toolchain, runs, ctx.opts.in_image)
