"""libs.origin: torch loads the GPU libraries its wheel brings (issue 14), on recorded maps."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.validator import checks
from envbuild.validator.judges import (
    lib_stem,
    library_origin_verdict,
    parse_maps,
    wheel_lib_dirs,
)
from tests.support import FIXTURES

FIX = FIXTURES / "libs"
CU_TORCH = "/opt/torch/.venv/lib/python3.12/site-packages/torch"
CU_NV = "/opt/torch/.venv/lib/python3.12/site-packages/nvidia"
ROCM_TORCH = "/opt/venv/lib/python3.10/site-packages/torch"
CU_COPIES = {"libcublasLt": f"{CU_NV}/cu13/lib/libcublasLt.so.13",
             "libnvJitLink": f"{CU_NV}/cu13/lib/libnvJitLink.so.13",
             "libcudnn": f"{CU_NV}/cudnn/lib/libcudnn.so.9"}
SHADOW = "/usr/local/cuda-13.0/targets/x86_64-linux/lib"


def _maps(name: str) -> str:
    return (FIX / name).read_text()


@pytest.mark.parametrize(("kind", "fixture", "torch_dir"), [
    ("cuda", "maps-h100-cu130-healthy.txt", CU_TORCH),
    ("rocm", "maps-mi300x-rocm6.2-healthy.txt", ROCM_TORCH),
])
def test_healthy_environments_pass(kind: str, fixture: str, torch_dir: str) -> None:
    out = library_origin_verdict(kind, _maps(fixture), torch_dir, {}, "")
    assert out.status == "pass", out.detail
    assert all(not p.startswith(("/usr/local/cuda", "/opt/rocm")) for p in out.evidence["loaded"])


def test_shadowed_cuda_warns_naming_both_paths() -> None:
    out = library_origin_verdict("cuda", _maps("maps-h100-cu130-shadowed.txt"), CU_TORCH,
                                 CU_COPIES, f"{SHADOW}:/usr/local/nvidia/lib64")
    assert out.status == "warn"
    for stem in ("libcublasLt.so.13", "libnvJitLink.so.13"):
        assert f"{SHADOW}/{stem} instead of {CU_NV}/cu13/lib/{stem}" in out.detail
    assert "/usr/lib/x86_64-linux-gnu/libcudnn.so.9.14.0 instead of " \
           f"{CU_NV}/cudnn/lib/libcudnn.so.9" in out.detail
    assert f"remove {SHADOW} from LD_LIBRARY_PATH" in out.remediation
    assert "__nvJitLink" in out.remediation
    system = {f["loaded"]: f["system"] for f in out.evidence["foreign"]}
    assert system[f"{SHADOW}/libnvJitLink.so.13"] is True
    assert system["/usr/lib/x86_64-linux-gnu/libcudnn.so.9.14.0"] is False


def test_shadowed_rocm_warns() -> None:
    copy = f"{ROCM_TORCH}/lib/libamdhip64.so"
    out = library_origin_verdict("rocm", _maps("maps-mi300x-rocm6.2-shadowed.txt"), ROCM_TORCH,
                                 {"libamdhip64": copy}, "/opt/rocm-6.2.0/lib")
    assert out.status == "warn"
    assert f"/opt/rocm-6.2.0/lib/libamdhip64.so.6.2.60200 instead of {copy}" in out.detail
    assert "remove /opt/rocm-6.2.0/lib from LD_LIBRARY_PATH" in out.remediation


def test_cpu_builds_and_unloaded_libraries_skip() -> None:
    assert library_origin_verdict("cpu", "", CU_TORCH, {}, "").status == "skip"
    assert library_origin_verdict(None, "", CU_TORCH, {}, "").status == "skip"
    libc_only = "7f00-7f01 r-xp 0 103:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    out = library_origin_verdict("cuda", libc_only, CU_TORCH, {}, "")
    assert out.status == "skip" and out.reason


def test_no_wheel_copy_still_names_where_it_should_be() -> None:
    out = library_origin_verdict("cuda", _maps("maps-h100-cu130-shadowed.txt"), CU_TORCH, {}, "")
    assert out.status == "warn" and f"none found under {CU_NV}/" in out.detail
    assert "ldconfig" in out.remediation  # nothing on LD_LIBRARY_PATH explains it


@pytest.mark.parametrize(("name", "stem"), [
    ("libcublasLt.so.13", "libcublasLt"), ("libcublas.so.12.4.5.8", "libcublas"),
    ("libcudnn_graph.so.9", "libcudnn_graph"), ("libamdhip64.so", "libamdhip64"),
    ("libnvJitLink.so.13", "libnvJitLink"), ("libc.so.6", None), ("libtorch_cuda.so", None),
    ("libcublas.so.13.bak", None), ("libcudnn.so.9 (deleted)", None), ("notlibcublas.so", None),
])
def test_lib_stem(name: str, stem: str | None) -> None:
    assert lib_stem(f"/x/{name}") == stem


@given(st.text(max_size=2000))
@settings(max_examples=300, deadline=None)
def test_any_maps_text_is_judged_without_crashing(text: str) -> None:
    for kind in ("cuda", "rocm"):
        out = library_origin_verdict(kind, text, CU_TORCH, {}, text[:50])
        assert out.status in ("pass", "warn", "skip")
        assert all(p.startswith("/") for p in parse_maps(text))


def test_wheel_dirs() -> None:
    assert wheel_lib_dirs("cuda", CU_TORCH + "/") == [f"{CU_NV}/", f"{CU_TORCH}/lib/"]
    assert wheel_lib_dirs("rocm", ROCM_TORCH) == [f"{ROCM_TORCH}/lib/"]


def test_the_check_is_registered_after_the_gpu_checks() -> None:
    ids = list(checks.CHECK_IDS)
    assert "libs.origin" in ids
    assert ids.index("libs.origin") > ids.index("numerics.conv2d")
