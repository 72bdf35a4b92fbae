"""The target registry: one entry per target (cuda, rocm, cpu, mps) with everything the code
needs to know about it, so a new target (Intel XPU, say) is one entry here plus matrix data.

Pure data; no imports beyond the standard library (the CLI's start-up reads it).
"""

from __future__ import annotations

from envbuild.common.record import record


@record
class Target:
    name: str
    wheel_kind: str  # the matrix's variant kind whose wheels it installs: cuda | rocm | cpu
    resolver: str  # which resolver part picks its stack: cuda | rocm | cpu | native
    os_candidates: str  # where its OS list comes from: cuda-images | rocm-release | all | none
    container: bool  # False: a native environment (no image)
    label: str = ""  # how messages name its stack: CUDA, ROCm
    gpu_vendor: str = ""  # nvidia | amd | '' (no GPU in the container)
    takes_driver: bool = False  # --driver applies (an NVIDIA driver floor)
    gpu_request: bool = False  # the container gets the GPUs through the NVIDIA runtime/CDI
    devices: tuple[str, ...] = ()  # host device nodes passed into the container
    group_add: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()
    validator_flags: tuple[str, ...] = ()  # extra envbuild-validate flags for this target
    device_checks: bool = False  # the validator has device checks to run (skip without a GPU)


REGISTRY: dict[str, Target] = {t.name: t for t in (
    Target("cuda", wheel_kind="cuda", resolver="cuda", os_candidates="cuda-images",
           container=True, label="CUDA", gpu_vendor="nvidia", takes_driver=True, gpu_request=True,
           device_checks=True),
    Target("rocm", wheel_kind="rocm", resolver="rocm", os_candidates="rocm-release",
           container=True, label="ROCm", gpu_vendor="amd", devices=("/dev/kfd", "/dev/dri"),
           group_add=("video", "render"), security_opt=("seccomp=unconfined",),
           device_checks=True),
    Target("cpu", wheel_kind="cpu", resolver="cpu", os_candidates="all", container=True,
           label="CPU"),
    Target("mps", wheel_kind="cpu", resolver="native", os_candidates="none", container=False,
           label="MPS"),
)}

NAMES: tuple[str, ...] = tuple(REGISTRY)


def get(name: str) -> Target:
    """The entry for a known target name (KeyError for an unknown one: parse names first)."""
    return REGISTRY[name]


def for_vendor(vendor: str) -> Target:
    """The container target of a GPU vendor (nvidia -> cuda, amd -> rocm)."""
    for t in REGISTRY.values():
        if t.container and t.gpu_vendor == vendor:
            return t
    raise KeyError(vendor)


def of_wheel_kind(kind: str) -> list[Target]:
    return [t for t in REGISTRY.values() if t.wheel_kind == kind]
