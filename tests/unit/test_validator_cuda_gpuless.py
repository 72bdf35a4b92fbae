"""The GPU-less CUDA image checks, judged on recorded facts (the real image: test_cuda_image.py):
one CUDA major, libtorch_cuda.so's libraries, NVIDIA_REQUIRE_CUDA, Triton's ptxas, and the
report's 'not run' for every GPU check on a host without a GPU."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from envbuild.core.torch_index import wheelhouse_kind
from envbuild.engine.validate import describe_gpu_verdict, gpu_verdict
from envbuild.validator.judges import (
    CPU_FALLBACK_CHECKS,
    GPU_ONLY_CHECKS,
    gpu_less,
    judge_cuda_libs,
    judge_cuda_packages,
    judge_require_cuda,
    judge_triton,
    parse_ldd,
)
from envbuild.validator.rules import cuda_major_of_dist, parse_require_cuda

SPEC13 = {"target": "cuda", "torch": "2.13.0", "variant": "cu130", "torch_cuda": "13.0",
          "cuda_image": None, "require_cuda": "13.0", "min_driver": "580.65.06"}

# What `pip install torch==2.13.0` put in the real image (environment.md, measured 2026-11-24):
# component wheels without a suffix under nvidia/cu13/, cuDNN/NCCL/cuSPARSELt/NVSHMEM suffixed.
REAL_CU13 = [
    ("nvidia-cublas", "13.1.1.3", ["nvidia/cu13/lib/libcublas.so.13"]),
    ("nvidia-cufft", "12.0.0.61", ["nvidia/cu13/lib/libcufft.so.12"]),
    ("nvidia-cusparse", "12.6.3.3", ["nvidia/cu13/lib/libcusparse.so.12"]),
    ("nvidia-curand", "10.4.0.35", ["nvidia/cu13/lib/libcurand.so.10"]),
    ("nvidia-cuda-runtime", "13.0.96", ["nvidia/cu13/lib/libcudart.so.13"]),
    ("nvidia-nvjitlink", "13.5.37", ["nvidia/cu13/lib/libnvJitLink.so.13"]),
    ("nvidia-cudnn-cu13", "9.20.0.48", ["nvidia/cudnn/lib/libcudnn.so.9"]),
    ("nvidia-nccl-cu13", "2.29.7", ["nvidia/nccl/lib/libnccl.so.2"]),
    ("nvidia-cusparselt-cu13", "0.8.1", ["nvidia/cusparselt/lib/libcusparseLt.so.0"]),
    ("cuda-toolkit", "13.0.3.0", []),
    ("cuda-bindings", "13.5.0", []),
]


def _rows(dists: list[tuple[str, str, list[str]]]) -> list[dict[str, Any]]:
    out = []
    for name, version, files in dists:
        major, how = cuda_major_of_dist(name, version, files)
        out.append({"name": name, "version": version, "major": major, "how": how})
    return out


def test_real_cu13_layout_is_one_major() -> None:
    """A version-major or name-suffix rule would flag cuFFT 12.0 in a CUDA 13 image."""
    o = judge_cuda_packages(SPEC13, _rows(REAL_CU13))
    assert o.status == "pass", o.detail
    assert "all CUDA 13" in o.detail


@given(component=st.from_regex(r"[a-z][a-z0-9]{1,12}", fullmatch=True),
       major=st.integers(min_value=10, max_value=14),
       version=st.from_regex(r"[0-9]{1,2}\.[0-9]{1,2}\.[0-9]{1,3}", fullmatch=True),
       spelling=st.sampled_from(["-", "_", "."]))
def test_any_other_major_fails_naming_the_package(component: str, major: int, version: str,
                                                  spelling: str) -> None:
    name = f"nvidia{spelling}{component}{spelling}cu{major}"
    o = judge_cuda_packages(SPEC13, _rows([*REAL_CU13, (name, version, [])]))
    if major == 13:
        assert o.status == "pass"
    else:
        assert o.status == "fail"
        assert name in o.remediation and name in o.detail and f"CUDA {major}" in o.detail


@given(major=st.integers(min_value=11, max_value=14))
def test_unsuffixed_wheels_are_told_by_their_install_path(major: int) -> None:
    got, how = cuda_major_of_dist("nvidia-cufft", "12.0.0.61",
                                  [f"nvidia/cu{major}/lib/libcufft.so.12"])
    assert got == major and f"nvidia/cu{major}/" in how


def test_no_major_is_not_a_failure() -> None:
    rows = _rows([*REAL_CU13, ("nvidia-ml-py", "13.580.82", [])])
    o = judge_cuda_packages(SPEC13, rows)
    assert o.status == "pass" and "nvidia-ml-py" in o.detail


def test_no_nvidia_packages_fails_for_cuda_and_skips_for_cpu() -> None:
    assert judge_cuda_packages(SPEC13, []).status == "fail"
    assert judge_cuda_packages({"target": "cpu"}, []).status == "skip"


LDD = """\
\tlinux-vdso.so.1 (0x00007ffd)
\tlibc10_cuda.so => /opt/venv/lib/python3.11/site-packages/torch/lib/libc10_cuda.so (0x1)
\tlibcudart.so.13 => /opt/venv/lib/python3.11/site-packages/nvidia/cu13/lib/libcudart.so.13 (0x2)
\tlibcudnn.so.9 => /opt/venv/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9 (0x3)
\tlibnccl.so.2 => /opt/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2 (0x4)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x5)
\t/lib64/ld-linux-x86-64.so.2 (0x6)
"""
DIRS = ["/opt/venv/lib/python3.11/site-packages/nvidia/",
        "/opt/venv/lib/python3.11/site-packages/torch/lib/"]


def test_ldd_inside_the_wheel_passes() -> None:
    rows = parse_ldd(LDD)
    assert len(rows) == 5
    o = judge_cuda_libs(SPEC13, rows, "libtorch_cuda.so", DIRS)
    assert o.status == "pass" and "3 CUDA ones" in o.detail


def test_ldd_not_found_fails_naming_it() -> None:
    text = LDD + "\tlibcublasLt.so.12 => not found\n"
    o = judge_cuda_libs(SPEC13, parse_ldd(text), "libtorch_cuda.so", DIRS)
    assert o.status == "fail" and "libcublasLt.so.12" in o.remediation


def test_ldd_system_copy_fails() -> None:
    text = LDD.replace("/opt/venv/lib/python3.11/site-packages/nvidia/cu13/lib/libcudart.so.13",
                       "/usr/local/cuda/lib64/libcudart.so.13")
    o = judge_cuda_libs(SPEC13, parse_ldd(text), "libtorch_cuda.so", DIRS)
    assert o.status == "fail" and "/usr/local/cuda/lib64/libcudart.so.13" in o.remediation


ENV_OK = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
BRANDS = ("cuda>=13.0 brand=unknown,driver>=535,driver<536 brand=tesla,driver>=570,"
          "driver<571")


def test_require_cuda_plain_and_nvidia_bases() -> None:
    assert judge_require_cuda(SPEC13, {**ENV_OK, "NVIDIA_REQUIRE_CUDA": "cuda>=13.0"}).status \
        == "pass"
    nvidia = {**SPEC13, "require_cuda": None, "cuda_image": "13.0.2"}
    assert judge_require_cuda(nvidia, {**ENV_OK, "NVIDIA_REQUIRE_CUDA": BRANDS}).status == "pass"
    assert parse_require_cuda(BRANDS) == "13.0"


def test_require_cuda_disagreeing_or_missing_fails() -> None:
    o = judge_require_cuda(SPEC13, {**ENV_OK, "NVIDIA_REQUIRE_CUDA": "cuda>=13.2"})
    assert o.status == "fail" and "13.2" in o.detail
    assert judge_require_cuda(SPEC13, ENV_OK).status == "fail"
    assert judge_require_cuda(SPEC13, {"NVIDIA_REQUIRE_CUDA": "cuda>=13.0"}).status == "fail"


def test_triton_facts() -> None:
    ok = {"version": "3.7.1", "dir": "/x/triton", "ptxas": "/x/triton/backends/nvidia/bin/ptxas",
          "ptxas_version": "Cuda compilation tools, release 13.0, V13.0.88", "error": None}
    assert judge_triton(SPEC13, ok).status == "pass"
    assert judge_triton(SPEC13, {**ok, "version": None}).status == "fail"
    assert judge_triton(SPEC13, {**ok, "ptxas": None}).status == "fail"
    assert judge_triton(SPEC13, {**ok, "ptxas_version": None, "error": "exec format"}).status \
        == "fail"
    assert judge_triton({"target": "cpu"}, ok).status == "skip"


def _check(cid: str, status: str) -> dict[str, Any]:
    return {"id": cid, "status": status, "reason": "no GPU visible" if status == "skip" else "",
            "detail": ""}


def test_gpu_checks_are_not_run_never_passed() -> None:
    checks = [_check("expect.cuda_version", "pass"), _check("cuda.packages", "pass")]
    checks += [_check(c, "skip") for c in GPU_ONLY_CHECKS if c != "perf.matmul"]
    checks += [_check("perf.matmul", "pass")]  # measured the CPU
    checks += [_check(c, "pass") for c in CPU_FALLBACK_CHECKS]
    block = gpu_less(checks, "cuda", gpu_visible=False)
    assert block is not None
    assert sorted(block["not_run"]) == sorted(GPU_ONLY_CHECKS)
    assert all(c["status"] == "not_run" for c in checks if c["id"] in GPU_ONLY_CHECKS)
    assert block["facts"] == 2 + len(CPU_FALLBACK_CHECKS)
    assert block["cpu_only"] == list(CPU_FALLBACK_CHECKS)
    report = {"spec": {"target": "cuda"}, "gpu_less": block, "checks": checks}
    v = gpu_verdict(report)
    assert v is not None
    line = describe_gpu_verdict(v)
    assert line.startswith(f"checked without GPU: {block['facts']} facts, "
                           f"{len(GPU_ONLY_CHECKS)} GPU checks not run")


def test_gpu_visible_or_cpu_target_changes_nothing() -> None:
    checks = [_check("device.count", "pass")]
    assert gpu_less(checks, "cuda", gpu_visible=True) is None
    assert gpu_less([_check("device.count", "skip")], "cpu", gpu_visible=False) is None
    report = {"spec": {"target": "cuda"}, "checks": [
        {"id": "device.properties", "status": "pass",
         "evidence": {"devices": [{"name": "NVIDIA H100 80GB HBM3"}]}}]}
    v = gpu_verdict(report)
    assert v is not None and describe_gpu_verdict(v) == "validated on GPU NVIDIA H100 80GB HBM3"
    assert gpu_verdict({"spec": {"target": "cpu"}, "checks": []}) is None


def test_wheelhouse_kind_from_the_torch_file_name() -> None:
    pypi = "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    local = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert wheelhouse_kind([pypi, "triton-3.7.1-cp311-cp311-manylinux_2_27_x86_64.whl"]) == "pypi"
    assert wheelhouse_kind([local]) == "pytorch"
    assert wheelhouse_kind([pypi, local]) is None
    assert wheelhouse_kind(["torchvision-0.28.0-cp311-cp311-linux_x86_64.whl"]) is None


def _attached(message: str) -> dict[str, Any]:
    return {"devices": {"backend": "cuda", "count": 0, "devices": [], "dev_nodes":
                        ["/dev/nvidiactl", "/dev/nvidia0"], "init_warnings": [message],
                        "env": {}}}


def test_forward_compat_errors_803_804_are_named() -> None:
    from envbuild.validator.judges import no_gpu_outcome

    o = no_gpu_outcome(_attached("CUDA initialization: Unexpected error from cudaGetDeviceCount()"
                                 ". Error 804: forward compatibility was attempted on non "
                                 "supported HW"), False, "cuda")
    assert o.status == "fail" and "error 804" in o.remediation
    o = no_gpu_outcome(_attached("Error 803: system has unsupported display driver / cuda "
                                 "driver combination"), False, "cuda")
    assert o.status == "fail" and "error 803" in o.remediation and "--forward-compat" in \
        o.remediation
    o = no_gpu_outcome(_attached("CUDA driver initialization failed"), False, "cuda")
    assert "error 80" not in o.remediation
