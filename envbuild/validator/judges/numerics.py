"""Pure decisions: numerics, training, shm."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .results import Outcome, failed, passed, skipped, warned

# Relative Frobenius error allowed against a float64 CPU reference, per compute precision.
TOLERANCES = {"fp64": 1e-12, "fp32": 1e-5, "tf32": 5e-3, "fp16": 5e-3, "bf16": 2e-2}
LOSS_FACTOR = 0.5  # train.smoke: mean of the last 5 losses <= LOSS_FACTOR x mean of the first 5
SHM_WARN_BYTES = 1 << 30

def tolerance_verdict(errors: dict[str, float], what: str) -> Outcome:
    """errors: precision -> relative error against the float64 reference."""
    ev: dict[str, Any] = {"rel_errors": errors,
                          "tolerances": {k: TOLERANCES[k] for k in errors if k in TOLERANCES}}
    bad = {k: v for k, v in errors.items()
           if not (isinstance(v, float) and math.isfinite(v)) or v > TOLERANCES.get(k, 0.0)}
    text = ", ".join(f"{k} {v:.2e}" for k, v in errors.items())
    if bad:
        return failed(
            f"{what} differs from the float64 reference beyond tolerance ({text}): a broken "
            "BLAS/cuDNN/MIOpen library, a bad GPU (check ECC/Xid errors), or a miscompiled kernel",
            f"{what} wrong: {text}", ev)
    return passed(f"{what} rel error {text}", ev)


def loss_verdict(losses: Sequence[float], factor: float = LOSS_FACTOR, window: int = 5) -> Outcome:
    ev: dict[str, Any] = {"losses": [round(x, 5) if math.isfinite(x) else str(x) for x in losses],
                          "factor": factor, "window": window, "steps": len(losses)}
    if len(losses) < 2 * window:
        return failed("training ran too few steps to judge", "too few steps", ev)
    if not all(math.isfinite(x) for x in losses):
        return failed("the loss became NaN/inf: numerics are broken on this device (see the "
                      "numerics.* checks)", "non-finite loss", ev)
    first = sum(losses[:window]) / window
    last = sum(losses[-window:]) / window
    ev.update(initial_avg=round(first, 5), final_avg=round(last, 5))
    if last > factor * first:
        return failed(
            f"the loss fell only from {first:.3f} to {last:.3f} (needs <= {factor} x initial): "
            "optimizer or autograd results are wrong on this device",
            f"loss {first:.3f} -> {last:.3f}", ev)
    return passed(f"loss {first:.3f} -> {last:.3f} in {len(losses)} steps", ev)


def shm_verdict(total_bytes: int | None, writable: bool, error: str | None = None) -> Outcome:
    ev = {"total_bytes": total_bytes, "writable": writable, "error": error,
          "warn_below_bytes": SHM_WARN_BYTES}
    fix = ("give the container more shared memory: `docker run --shm-size=8g` (or `--ipc=host`); "
           "DataLoader workers pass batches through /dev/shm")
    if total_bytes is None:
        return skipped("no /dev/shm on this system", ev)
    size = f"{total_bytes / (1 << 30):.2f} GiB"
    if not writable:
        return failed(fix + "; /dev/shm is not writable", f"/dev/shm {size}, not writable", ev)
    if total_bytes < SHM_WARN_BYTES:
        return warned(fix, f"/dev/shm is only {total_bytes >> 20} MiB", ev)
    return passed(f"/dev/shm {size}, writable", ev)


