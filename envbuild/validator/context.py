"""The worker's context for the torch checks (lazy torch, facts probed once), and the small
torch helpers the checks share."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .judges import (
    Outcome,
    _err,
    _gpu_present,
    device_coverage_rows,
    failed,
)
from .probes import (
    import_torch,
    macos_facts,
    probe_companion,
    probe_devices,
    probe_mps,
    probe_torch,
)
from .rules import parse_cc


@dataclass
class Options:
    require_gpu: bool = False
    in_image: bool = False
    timeout_scale: float = 1.0
    emulated: str = ""  # how this run is emulated (qemu, a sysfs stand-in); "" = natively


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
            "mps": lambda: probe_mps(self.torch, self.spec.get("min_macos")),
            "platform": macos_facts,
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


def on_compute_device(
        check: Callable[[TorchContext, str], Outcome]) -> Callable[[TorchContext], Outcome]:
    """A check that runs on ctx.compute_device(): it gets that device, or its outcome is the
    failure compute_device gives (torch has no kernels for the GPU)."""
    @functools.wraps(check)
    def run(ctx: TorchContext) -> Outcome:
        device, bad = ctx.compute_device()
        if bad:
            return bad
        return check(ctx, device)

    return run


def synchronize(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    elif device == "mps":
        torch.mps.synchronize()


@contextlib.contextmanager
def allow_tf32(torch: Any, enabled: bool) -> Iterator[None]:
    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def rel_err(torch: Any, out: Any, ref: Any) -> float:
    diff = out.detach().to("cpu", torch.float64) - ref
    return float(diff.norm() / ref.norm())


def low_precision(backend: str, cc: str | None) -> str:
    """The autocast/perf half precision: bf16 where the hardware has it (CUDA cc >= 8.0, ROCm,
    CPU), else fp16 (pre-Ampere NVIDIA, MPS). torch.cuda.is_bf16_supported() is no guide: it
    counts emulation."""
    if backend == "cuda":
        return "bf16" if cc and parse_cc(cc) >= (8, 0) else "fp16"
    return "fp16" if backend == "mps" else "bf16"


def supports_tf32(facts: dict[str, Any]) -> bool:
    dev = facts.get("devices") or {}
    if dev.get("backend") != "cuda" or not dev.get("devices"):
        return False
    return parse_cc(str(dev["devices"][0]["cc"])) >= (8, 0)
