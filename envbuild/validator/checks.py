"""The check table: every check's id, title, time limit and code, in the report's order."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .compile_smoke import t_compile_smoke
from .context import Options, TorchContext
from .dist import t_dist_allreduce
from .facts import (
    device_judge,
    spec_judge,
    t_device_kernel,
    t_facts_torch,
    t_libs_origin,
)
from .host import (
    h_cuda_libs,
    h_cuda_packages,
    h_cuda_require,
    h_expect_python,
    h_facts_python,
    h_image_driver,
    h_macos_native,
    h_macos_version,
    h_shm_size,
    h_triton,
    h_wsl2,
)
from .judges import Outcome, spec
from .mps import t_mps_backend, t_mps_limits, t_mps_parity
from .numerics import t_numerics_autocast, t_numerics_conv2d, t_numerics_matmul
from .perf import t_perf_h2d, t_perf_matmul, t_perf_mem_bw
from .training import t_train_checkpoint, t_train_dataloader, t_train_smoke


@dataclass(frozen=True)
class CheckDef:
    id: str
    title: str
    timeout_s: float
    host: Callable[[dict[str, Any], Options], Outcome] | None = None
    torch: Callable[[TorchContext], Outcome] | None = None


def _spec_check(check_id: str, title: str,
                judge: Callable[[dict[str, Any], dict[str, Any]], Outcome],
                *companions: str, timeout_s: float = 10) -> CheckDef:
    """A judge of torch's facts (and a companion's: torchvision, torchaudio) with the spec."""
    return CheckDef(check_id, title, timeout_s, torch=spec_judge(judge, "torch", *companions))


def _device_check(check_id: str, title: str, timeout_s: float,
                  judge: Callable[[dict[str, Any], bool, str | None], Outcome]) -> CheckDef:
    """A judge of the visible GPUs (device facts, --require-gpu, the spec's target)."""
    return CheckDef(check_id, title, timeout_s, torch=device_judge(judge))


# The report's order; torch checks run in this order in the worker.
CHECKS: tuple[CheckDef, ...] = (
    CheckDef("facts.python", "Python interpreter", 5, host=h_facts_python),
    CheckDef("expect.python", "Python version matches the spec", 5, host=h_expect_python),
    CheckDef("macos.native", "macOS/MPS: a native arm64 Python (not x86_64 under Rosetta)", 15,
             host=h_macos_native),
    CheckDef("macos.version", "macOS/MPS: macOS is at least the spec's MPS floor (min_macos)",
             15, host=h_macos_version),
    CheckDef("facts.torch", "torch imports; build facts (CUDA/HIP, cuDNN, NCCL, arch list)", 60,
             torch=t_facts_torch),
    _spec_check("facts.torchvision", "torchvision imports, pins this torch, runs nms",
                spec.judge_torchvision, "torchvision", timeout_s=60),
    _spec_check("facts.torchaudio", "torchaudio imports and pins this torch",
                spec.judge_torchaudio, "torchaudio", timeout_s=60),
    _spec_check("expect.torch_version", "torch version matches the spec", spec.judge_torch_version),
    _spec_check("expect.torchvision_version", "torchvision version matches the spec",
                spec.judge_torchvision_version, "torchvision", timeout_s=60),
    _spec_check("expect.torchaudio_version", "torchaudio version matches the spec",
                spec.judge_torchaudio_version, "torchaudio", timeout_s=60),
    _spec_check("expect.flavor", "torch build matches the target (CUDA / ROCm / CPU / MPS)",
                spec.judge_flavor),
    _spec_check("expect.cuda_version", "torch's CUDA version matches the spec",
                spec.judge_cuda_version),
    _spec_check("expect.cudnn", "cuDNN version matches the spec", spec.judge_cudnn),
    _spec_check("expect.nccl", "NCCL version matches the spec", spec.judge_nccl),
    _spec_check("expect.rocm_version", "torch's ROCm (HIP) version matches the spec",
                spec.judge_rocm_version),
    _spec_check("expect.archs", "torch carries the GPU archs the spec promises", spec.judge_archs),
    CheckDef("cuda.packages", "every nvidia-*/cuda-* package is of the spec's CUDA major", 30,
             host=h_cuda_packages),
    CheckDef("cuda.libs", "libtorch_cuda.so's libraries resolve inside the wheel's directories",
             30, host=h_cuda_libs),
    CheckDef("cuda.require", "NVIDIA_REQUIRE_CUDA and the runtime settings agree with the spec",
             5, host=h_cuda_require),
    CheckDef("cuda.triton", "Triton and its ptxas for torch.compile on NVIDIA GPUs", 30,
             host=h_triton),
    _spec_check("device.spec_gpus", "the spec's GPUs are covered by torch's arch list (static)",
                spec.judge_spec_gpus),
    _device_check("device.count", "GPUs visible to torch", 90, spec.judge_device_count),
    _device_check("device.properties", "GPU names, compute capability, memory", 30,
                  spec.judge_device_properties),
    _device_check("device.arch_coverage", "every visible GPU is covered by torch's arch list", 30,
                  spec.judge_arch_coverage),
    CheckDef("device.kernel", "a kernel runs on every GPU", 90, torch=t_device_kernel),
    CheckDef("mps.backend", "MPS: torch.backends.mps is_built() and is_available(), apart", 60,
             torch=t_mps_backend),
    CheckDef("mps.limits", "MPS: float64 (unsupported) and PYTORCH_ENABLE_MPS_FALLBACK, reported",
             30, torch=t_mps_limits),
    CheckDef("mps.parity", "MPS: a float32 matmul and a training step match the CPU", 90,
             torch=t_mps_parity),
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


