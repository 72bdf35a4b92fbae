"""mps.*: Apple's Metal backend in a native macOS environment: built and available (apart),
what it cannot do (float64, the CPU fallback), and a float32 matmul and training step against
the CPU. The judges (judges/macos) decide; these only gather."""

from __future__ import annotations

from typing import Any

from .context import TorchContext
from .judges import Outcome, judge_mps_backend, judge_mps_limits, judge_mps_parity
from .probes import mps_parity


def _facts(ctx: TorchContext) -> dict[str, Any]:
    return ctx.all_facts("mps", "platform")


def t_mps_backend(ctx: TorchContext) -> Outcome:
    return judge_mps_backend(ctx.spec, _facts(ctx))


def t_mps_limits(ctx: TorchContext) -> Outcome:
    return judge_mps_limits(ctx.spec, _facts(ctx))


def t_mps_parity(ctx: TorchContext) -> Outcome:
    facts = dict(_facts(ctx))
    if facts["mps"].get("available"):
        facts["parity"] = mps_parity(ctx.torch, "mps")
    return judge_mps_parity(ctx.spec, facts)
