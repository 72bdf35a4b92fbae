"""The check table: every check's id, title, time limit and code, in the report's order."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import (
    compile_smoke,
    dist,
    extensions,
    facts,
    host,
    memory_check,
    mps,
    numerics,
    perf,
    training,
)
from .context import Options, TorchContext
from .facts import device_judge, spec_judge
from .judges import Outcome, spec


@dataclass(frozen=True)
class CheckDef:
    id: str
    title: str
    timeout_s: float
    host: Callable[[dict[str, Any], Options], Outcome] | None = None
    torch: Callable[[TorchContext], Outcome] | None = None


def _row(check_id: str, on: str, timeout_s: float, fn: Callable[..., Outcome], companion: str,
         title: str) -> CheckDef:
    """A row of the table. `on` says how fn runs: "host" (stdlib, in the supervisor:
    fn(spec, opts)), "torch" (in the worker: fn(ctx)), "spec" (a judge of torch's probed facts,
    and the companion package's, with the spec: fn(spec, facts)) or "device" (a judge of the
    visible GPUs: fn(facts, require_gpu, target))."""
    if on == "host":
        return CheckDef(check_id, title, timeout_s, host=fn)
    if on == "spec":
        return CheckDef(check_id, title, timeout_s,
                        torch=spec_judge(fn, "torch", *([companion] if companion else [])))
    if on == "device":
        return CheckDef(check_id, title, timeout_s, torch=device_judge(fn))
    if on == "torch":
        return CheckDef(check_id, title, timeout_s, torch=fn)
    raise ValueError(f"check {check_id!r}: unknown on={on!r}")


# The report's order; torch checks run in this order in the worker.
# (id, how it runs, time limit in s, code, companion package, title)
CHECKS: tuple[CheckDef, ...] = (
    _row("facts.python", "host", 5, host.h_facts_python, "",
         "Python interpreter"),
    _row("expect.python", "host", 5, host.h_expect_python, "",
         "Python version matches the spec"),
    _row("macos.native", "host", 15, host.h_macos_native, "",
         "macOS/MPS: a native arm64 Python (not x86_64 under Rosetta)"),
    _row("macos.version", "host", 15, host.h_macos_version, "",
         "macOS/MPS: macOS is at least the spec's MPS floor (min_macos)"),
    _row("facts.torch", "torch", 60, facts.t_facts_torch, "",
         "torch imports; build facts (CUDA/HIP, cuDNN, NCCL, arch list)"),
    _row("facts.torchvision", "spec", 60, spec.judge_torchvision, "torchvision",
         "torchvision imports, pins this torch, runs nms"),
    _row("facts.torchaudio", "spec", 60, spec.judge_torchaudio, "torchaudio",
         "torchaudio imports and pins this torch"),
    _row("expect.torch_version", "spec", 10, spec.judge_torch_version, "",
         "torch version matches the spec"),
    _row("expect.torchvision_version", "spec", 60, spec.judge_torchvision_version, "torchvision",
         "torchvision version matches the spec"),
    _row("expect.torchaudio_version", "spec", 60, spec.judge_torchaudio_version, "torchaudio",
         "torchaudio version matches the spec"),
    _row("expect.flavor", "spec", 10, spec.judge_flavor, "",
         "torch build matches the target (CUDA / ROCm / CPU / MPS)"),
    _row("expect.cuda_version", "spec", 10, spec.judge_cuda_version, "",
         "torch's CUDA version matches the spec"),
    _row("expect.cudnn", "spec", 10, spec.judge_cudnn, "",
         "cuDNN version matches the spec"),
    _row("expect.nccl", "spec", 10, spec.judge_nccl, "",
         "NCCL version matches the spec"),
    _row("expect.rocm_version", "spec", 10, spec.judge_rocm_version, "",
         "torch's ROCm (HIP) version matches the spec"),
    _row("expect.archs", "spec", 10, spec.judge_archs, "",
         "torch carries the GPU archs the spec promises"),
    _row("cuda.packages", "host", 30, host.h_cuda_packages, "",
         "every nvidia-*/cuda-* package is of the spec's CUDA major"),
    _row("cuda.libs", "host", 30, host.h_cuda_libs, "",
         "libtorch_cuda.so's libraries resolve inside the wheel's directories"),
    _row("cuda.require", "host", 5, host.h_cuda_require, "",
         "NVIDIA_REQUIRE_CUDA and the runtime settings agree with the spec"),
    _row("cuda.triton", "host", 30, host.h_triton, "",
         "Triton and its ptxas for torch.compile on NVIDIA GPUs"),
    _row("device.spec_gpus", "spec", 10, spec.judge_spec_gpus, "",
         "the spec's GPUs are covered by torch's arch list (static)"),
    _row("device.count", "device", 90, spec.judge_device_count, "",
         "GPUs visible to torch"),
    _row("device.properties", "device", 30, spec.judge_device_properties, "",
         "GPU names, compute capability, memory"),
    _row("device.arch_coverage", "device", 30, spec.judge_arch_coverage, "",
         "every visible GPU is covered by torch's arch list"),
    _row("device.kernel", "torch", 90, facts.t_device_kernel, "",
         "a kernel runs on every GPU"),
    _row("mps.backend", "torch", 60, mps.t_mps_backend, "",
         "MPS: torch.backends.mps is_built() and is_available(), apart"),
    _row("mps.limits", "torch", 30, mps.t_mps_limits, "",
         "MPS: float64 (unsupported) and PYTORCH_ENABLE_MPS_FALLBACK, reported"),
    _row("mps.parity", "torch", 90, mps.t_mps_parity, "",
         "MPS: a float32 matmul and a training step match the CPU"),
    _row("numerics.matmul", "torch", 60, numerics.t_numerics_matmul, "",
         "matmul matches a float64 reference"),
    _row("numerics.conv2d", "torch", 60, numerics.t_numerics_conv2d, "",
         "conv2d forward/backward match a float64 reference"),
    _row("numerics.autocast", "torch", 60, numerics.t_numerics_autocast, "",
         "an autocast (bf16/fp16) step is accurate"),
    _row("train.smoke", "torch", 120, training.t_train_smoke, "",
         "a small CNN learns a synthetic task"),
    _row("train.dataloader", "torch", 90, training.t_train_dataloader, "",
         "DataLoader with 2 workers (shared memory, pinning)"),
    _row("train.checkpoint", "torch", 60, training.t_train_checkpoint, "",
         "checkpoint save/load round-trips exactly"),
    _row("compile.smoke", "torch", 300, compile_smoke.t_compile_smoke, "",
         "torch.compile forward+backward matches eager (CPU; GPU: Triton)"),
    _row("ext.load", "torch", 180, extensions.t_ext_load, "",
         "--with extensions import, load their native library, keep the spec's torch"),
    _row("ext.kernel", "torch", 120, extensions.t_ext_kernel, "",
         "--with extensions: a tiny kernel of each on the GPU matches torch"),
    _row("dist.allreduce", "torch", 120, dist.t_dist_allreduce, "",
         "2-process all-reduce (gloo; NCCL with >= 2 GPUs)"),
    _row("libs.origin", "torch", 30, facts.t_libs_origin, "",
         "torch loads the GPU libraries its wheel brings, not a system copy"),
    _row("shm.size", "host", 15, host.h_shm_size, "",
         "/dev/shm size and writability"),
    _row("image.no_driver_userspace", "host", 30, host.h_image_driver, "",
         "no NVIDIA driver userspace inside the image"),
    _row("wsl.environment", "host", 20, host.h_wsl2, "",
         "WSL2: libcuda from the Windows driver, no Linux driver"),
    _row("perf.matmul", "torch", 120, perf.t_perf_matmul, "",
         "matmul throughput vs the GPU's peak"),
    _row("perf.mem_bw", "torch", 60, perf.t_perf_mem_bw, "",
         "device memory bandwidth vs peak"),
    _row("perf.h2d", "torch", 60, perf.t_perf_h2d, "",
         "pinned host-to-device bandwidth vs expectation"),
    _row("memory.estimate", "torch", 180, memory_check.t_memory_estimate, "",
         "`envbuild fit`'s measured peak of a reference step vs max_memory_allocated()"),
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


