"""Helpers shared by the explain tests and others (moved out of test_explain.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.features.explain import (
    MAX_LOG_BYTES,
)
from tests.support import TESTS

FIXTURES = TESTS / "fixtures" / "explain"


# ---------------------------------------------------------------- big logs


def training_log(size: int, end: str, start: str = "") -> bytes:
    """A training log of about `size` bytes (progress bars, loss lines, warnings) ending in
    `end`, as users paste them."""
    rows = [
        "Epoch 3:  41%|####      | 4100/10000 [12:34<18:07,  5.43it/s, loss=0.412, v_num=7]\r",
        "[2026-11-22 21:58:01] INFO step 4100: loss=0.4117 lr=3.0e-04 grad_norm=1.093",
        "/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py:665: UserWarning: "
        "This DataLoader will create 16 worker processes in total.",
        "  warnings.warn(_create_warning_msg(",
    ]
    block = ("\n".join(rows) + "\n").encode()
    body = start.encode() + block * (max(0, size - len(start) - len(end)) // len(block) + 1)
    return body[:max(0, size - len(end.encode()))] + b"\n" + end.encode()


BIG = MAX_LOG_BYTES + (1 << 20)


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """> 8 MiB: versions at the start, the error at the end."""
    path = tmp_path_factory.mktemp("biglog") / "train.log"
    path.write_bytes(training_log(
        BIG, (FIXTURES / "nccl_duplicate_gpu__1.txt").read_text(),
        start="| NVIDIA-SMI 470.182.03   Driver Version: 470.182.03   CUDA Version: 11.4 |\n"))
    return path


LOGS = sorted(FIXTURES.glob("*.txt"))


def _sid(path: Path) -> str:
    return path.name.split("__")[0]


REQUIRED = {
    "driver_too_old", "no_kernel_image", "torch_cpu_only", "cudnn_version_mismatch",
    "nvjitlink_undefined_symbol", "wsl_libcuda_unversioned", "container_no_gpu_runtime",
    "nvidia_require_cuda", "driver_library_mismatch", "dataloader_shm_bus_error",
    "nccl_shm_segment", "nccl_watchdog_timeout", "rocm_no_binary", "torchvision_operator_missing",
    "cuda_out_of_memory", "stub_libcuda", "ptx_unsupported_toolchain", "cuda_unknown_error",
    "devices_busy", "cdi_unresolvable", "driver_libs_in_image", "nvml_unknown_error",
    "rocm_kfd_permission", "triton_no_c_compiler", "wsl_no_adapters",
    "mps_unavailable_old_macos", "nccl_ib_no_device", "rendezvous_address_in_use",
    "cuda_device_side_assert", "tensors_on_different_devices", "nvcc_unsupported_arch",
    "nccl_duplicate_gpu", "cuda_illegal_memory_access", "extension_no_kernel_image",
    "inductor_no_cxx_compiler", "python_headers_missing", *(
        # issue 20: the real messages explain did not know
        ISSUE20 := ("cuda_error_out_of_memory", "nccl_unhandled_cuda_error",
                    "extension_torch_abi_mismatch", "xformers_torch_mismatch")),
}
