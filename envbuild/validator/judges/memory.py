"""Pure decisions: `envbuild fit`'s measured figure for a reference step (fake tensors under
MemTracker) against the same step's real peak, torch.cuda.max_memory_allocated()."""

from __future__ import annotations

from typing import Any

from .results import Outcome, passed, skipped, warned

MEMORY_TOLERANCE = 0.10  # issue 28: the estimate within 10% of max_memory_allocated()
GIB = 1 << 30


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def judge_memory_estimate(estimate_bytes: int, real_bytes: int,
                          tolerance: float = MEMORY_TOLERANCE,
                          evidence: dict[str, Any] | None = None) -> Outcome:
    """Pass when estimate / real is within 1 +- tolerance; else warn (the environment works,
    fit's answers on it need that margin): an underestimate is the direction that ends in
    `CUDA out of memory`, and says so."""
    ev: dict[str, Any] = {**(evidence or {}), "estimate_bytes": estimate_bytes,
                          "real_bytes": real_bytes, "tolerance": tolerance}
    if real_bytes <= 0 or estimate_bytes <= 0:
        ev["ratio"] = None
        return warned("rerun `envbuild validate`; if it repeats, report it with this evidence",
                      f"no peak to compare (estimate {estimate_bytes} B, real {real_bytes} B)",
                      ev)
    ratio = estimate_bytes / real_bytes
    ev["ratio"] = round(ratio, 4)
    said = (f"fit's measured peak {_gib(estimate_bytes)} vs max_memory_allocated() "
            f"{_gib(real_bytes)}: ratio {ratio:.3f}")
    if abs(ratio - 1) <= tolerance:
        return passed(f"{said} (within {tolerance:.0%})", ev)
    if ratio < 1:
        fix = (f"fit's measured method underestimates this torch's peak by {1 - ratio:.0%}: "
               f"treat `envbuild fit` answers for this image as {1 / ratio:.2f}x larger (a job "
               "it says fits may run out of memory), and report it with this evidence")
    else:
        fix = (f"fit's measured method overestimates this torch's peak by {ratio - 1:.0%} "
               "(a job it judges too big may fit): report it with this evidence")
    return warned(fix, f"{said} (outside {tolerance:.0%})", ev)


def memory_probe_refused(stage: str, code: str, message: str) -> Outcome:
    """The probe could not run the reference step: `stage` "fake" (fit's measured method) or
    "real" (the step on the GPU); `code` memprobe's error code."""
    ev = {"stage": stage, "code": code, "message": message}
    if code in ("no-torch", "no-memtracker"):
        return skipped(f"{message}: fit's measured method (fake tensors under MemTracker) cannot "
                       "run on this torch, so its figure was not compared with "
                       "torch.cuda.max_memory_allocated() (fit uses its formula here)", ev)
    if stage == "real" and code == "out-of-memory":
        return skipped(f"the reference step did not fit the GPU's free memory ({message}): fit's "
                       "figure was not compared with torch.cuda.max_memory_allocated(); free "
                       "the GPU and rerun", ev)
    if stage == "fake":
        return warned("`envbuild fit` falls back to its formula on this torch; report it with "
                      "this evidence",
                      f"fit's measured method cannot trace the reference step: {message}", ev)
    return warned("see train.smoke and device.kernel; report it with this evidence if they pass",
                  f"the reference step failed on the GPU: {message}", ev)
