"""Results: an Outcome per check, the report's check rows, its summary and exit code, and what a
GPU target's run on a host without a GPU leaves not run (stdlib only)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..rules import (
    local_tag,
    local_tag_matches_variant,
    public_version,
)

SCHEMA_VERSION = 1
VALIDATOR_VERSION = "0.1.0"
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CANNOT_RUN = 3
# not_run: a check a GPU target needs a GPU for, on a host without one (never a pass)
STATUSES = ("pass", "warn", "fail", "skip", "not_run")
TARGETS = ("cuda", "rocm", "cpu", "mps")

@dataclass
class Outcome:
    status: str
    evidence: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    remediation: str = ""
    detail: str = ""


def passed(detail: str = "", evidence: dict[str, Any] | None = None) -> Outcome:
    return Outcome("pass", evidence or {}, detail=detail)


def warned(remediation: str, detail: str = "", evidence: dict[str, Any] | None = None) -> Outcome:
    return Outcome("warn", evidence or {}, remediation=remediation, detail=detail)


def failed(remediation: str, detail: str = "", evidence: dict[str, Any] | None = None) -> Outcome:
    return Outcome("fail", evidence or {}, remediation=remediation, detail=detail)


def skipped(reason: str, evidence: dict[str, Any] | None = None) -> Outcome:
    return Outcome("skip", evidence or {}, reason=reason, detail=reason)


def worst(statuses: Sequence[str]) -> str:
    for s in ("fail", "warn", "pass"):
        if s in statuses:
            return s
    return "skip"


def _sanitize(obj: Any) -> Any:
    """JSON-safe copy: NaN/inf become strings, tuples lists, unknown objects their repr."""
    if isinstance(obj, dict):
        return {str(k): _sanitize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [_sanitize(v) for v in obj]
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if obj is None or isinstance(obj, (str, int, bool)):
        return obj
    return repr(obj)


def make_check(check_id: str, title: str, outcome: Outcome, duration_s: float) -> dict[str, Any]:
    status = outcome.status if outcome.status in STATUSES else "fail"
    remediation = outcome.remediation
    reason = outcome.reason
    if status == "skip" and not reason:
        reason = "skipped"
    if status in ("warn", "fail") and not remediation:
        remediation = "see evidence"
    return {
        "id": check_id,
        "title": title,
        "status": status,
        "reason": reason,
        "duration_s": round(max(duration_s, 0.0), 3),
        "evidence": _sanitize(outcome.evidence),
        "remediation": remediation,
        "detail": outcome.detail or reason or "",
    }


def summarize(checks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    counts = {s: sum(1 for c in checks if c["status"] == s) for s in STATUSES}
    return {**counts, "status": "fail" if counts["fail"] else "pass"}


def exit_code_for(checks: Sequence[dict[str, Any]]) -> int:
    return EXIT_FAILED if any(c["status"] == "fail" for c in checks) else EXIT_OK


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def version_verdict(package: str, expected: str | None, actual: str | None,
                    variant: str | None) -> Outcome:
    ev: dict[str, Any] = {"expected": expected, "actual": actual, "variant": variant}
    if not expected:
        return skipped(f"spec does not pin {package}", ev)
    if actual is None:
        return failed(f"install {package}=={expected} (the spec pins it; it is not installed)",
                      f"{package} is not installed", ev)
    if public_version(actual) != public_version(expected):
        return failed(
            f"install {package}=={public_version(expected)}"
            + (f" from the PyTorch {variant} wheel index" if variant else "")
            + f"; the environment has {actual}",
            f"{package} {actual}, spec wants {expected}", ev)
    tag = local_tag(actual)
    if tag and variant and not local_tag_matches_variant(tag, variant):
        return failed(
            f"{package} {actual} is the {tag} build; install it from the PyTorch {variant} index",
            f"{package} local tag +{tag} does not match variant {variant}", ev)
    return passed(f"{package} {actual}", ev)



# Checks whose subject is the GPU itself: on a host without one they are not run, never passed.
GPU_ONLY_CHECKS = ("device.count", "device.properties", "device.arch_coverage", "device.kernel",
                   "perf.matmul", "perf.mem_bw", "perf.h2d", "memory.estimate")
# Checks that run on the CPU when no GPU is there: their GPU path is not run.
CPU_FALLBACK_CHECKS = ("numerics.matmul", "numerics.conv2d", "numerics.autocast", "train.smoke",
                       "train.dataloader", "train.checkpoint", "compile.smoke", "dist.allreduce")


# Checks that measure speed, train or compile: under an emulator (qemu user mode) they measure the
# emulator, and take many minutes. An emulated run reports them not_run; what the image *is*
# (versions, arch list, cuDNN, NCCL, libraries and their origin, a CPU matmul) is still checked.
EMULATION_NOT_RUN = ("numerics.conv2d", "numerics.autocast", "train.smoke", "train.dataloader",
                     "train.checkpoint", "compile.smoke", "dist.allreduce", "perf.matmul",
                     "perf.mem_bw", "perf.h2d", "memory.estimate")


def not_run_emulated(check_id: str, title: str, how: str) -> dict[str, Any]:
    """The entry of a check an emulated run does not run."""
    why = (f"not run: emulated ({how}); it measures speed, trains or compiles, which an "
           "emulator makes meaningless and slow: run the check on a native machine")
    c = make_check(check_id, title, Outcome("skip", reason=why), 0.0)
    c["status"] = "not_run"
    return c


def gpu_less(checks: list[dict[str, Any]], target: str | None, gpu_visible: bool,
             ) -> dict[str, Any] | None:
    """A GPU target validated on a host without a GPU: each GPU-only check that skipped for that
    becomes not_run; the summary block says how many facts were proved and what was not run
    (None when a GPU was there, or for CPU and MPS targets)."""
    if target not in ("cuda", "rocm") or gpu_visible:
        return None
    for c in checks:  # a GPU-only check cannot pass without a GPU (perf.matmul measures the CPU)
        if c["id"] in GPU_ONLY_CHECKS and c["status"] in ("skip", "pass"):
            c["status"] = "not_run"
            c["reason"] = c["detail"] = "not run: needs a GPU; " + (
                c["reason"] or "none visible, it measured the CPU")
    not_run = [c["id"] for c in checks if c["status"] == "not_run"
               and c["id"] in GPU_ONLY_CHECKS]
    emulated = [c["id"] for c in checks if c["status"] == "not_run"
                and c["id"] not in GPU_ONLY_CHECKS]
    cpu_only = [c["id"] for c in checks if c["id"] in CPU_FALLBACK_CHECKS
                and c["status"] in ("pass", "warn", "fail")]
    facts = sum(1 for c in checks if c["status"] == "pass")
    out = {"checked_without_gpu": True, "facts": facts, "not_run": not_run,
           "cpu_only": cpu_only}
    if emulated:  # an emulated run's own (EMULATION_NOT_RUN), listed apart
        out["not_run_emulated"] = emulated
    return out
