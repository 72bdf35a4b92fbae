"""The GPU <-> driver edge: which driver branches can drive a GPU at all. Pure.

A GPU is driven only by the branches between the first one that knows its architecture (the GA
driver of the first toolkit that compiles for it, `min_cuda` in gpus.toml) and the last one that
still supports it (`last_driver_branch`: R470 for Kepler, R580 for Maxwell, Pascal and Volta).
"""

from __future__ import annotations

from collections.abc import Iterable

from envbuild.common.record import record
from envbuild.common.versions import branch_of, version_key
from envbuild.core import compat
from envbuild.matrix import Matrix


@record
class DriverWindow:
    label: str  # "NVIDIA GeForce RTX 5090 (sm_120)"
    cc: str
    arch_name: str
    min_cuda: str
    first_driver: str | None  # GA driver of the min_cuda toolkit, when the matrix knows it
    last_branch: int | None  # newest branch that drives it; None = still supported

    def too_old(self, driver: str) -> bool:
        return self.first_driver is not None and \
            version_key(driver) < version_key(self.first_driver)

    def too_new(self, driver: str) -> bool:
        return self.last_branch is not None and branch_of(driver) > self.last_branch

    def admits(self, driver: str) -> bool:
        return not (self.too_old(driver) or self.too_new(driver))

    def describe(self) -> str:
        low = (f"R{branch_of(self.first_driver)} ({self.first_driver}, the CUDA {self.min_cuda} "
               "GA driver)" if self.first_driver else None)
        high = f"R{self.last_branch}" if self.last_branch is not None else None
        if low and high:
            return f"branches {low} to {high}"
        if high:
            return f"branches up to {high} (the last that supports {self.arch_name})"
        if low:
            return f"branches from {low} on"
        return "every branch the matrix knows"


def window(m: Matrix, cc: str, label: str) -> DriverWindow | None:
    """The driver window of an NVIDIA GPU of compute capability `cc`; None for an unknown arch."""
    arch = m.arch(cc)
    if arch is None:
        return None
    return DriverWindow(
        label=label, cc=cc, arch_name=arch.name, min_cuda=arch.min_cuda,
        first_driver=compat.ga_driver(m, arch.min_cuda) or None,
        last_branch=int(arch.last_driver_branch) if arch.last_driver_branch else None)


@record
class FleetWindow:
    """The intersection of several GPUs' windows."""

    windows: tuple[DriverWindow, ...]

    @property
    def first_driver(self) -> str | None:
        firsts = [w.first_driver for w in self.windows if w.first_driver]
        return max(firsts, key=version_key) if firsts else None

    @property
    def last_branch(self) -> int | None:
        lasts = [w.last_branch for w in self.windows if w.last_branch is not None]
        return min(lasts) if lasts else None

    def empty(self) -> bool:
        first, last = self.first_driver, self.last_branch
        return first is not None and last is not None and branch_of(first) > last

    def capping(self) -> DriverWindow | None:
        lasts = [w for w in self.windows if w.last_branch is not None]
        return min(lasts, key=lambda w: w.last_branch or 0) if lasts else None

    def raising(self) -> DriverWindow | None:
        firsts = [w for w in self.windows if w.first_driver]
        return max(firsts, key=lambda w: version_key(w.first_driver or "0")) if firsts else None

    def outside(self, driver: str) -> list[DriverWindow]:
        return [w for w in self.windows if not w.admits(driver)]


def fleet(windows: Iterable[DriverWindow | None]) -> FleetWindow:
    return FleetWindow(tuple(w for w in windows if w is not None))
