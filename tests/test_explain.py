"""`envbuild explain`: the signature catalogue against real-world logs, versions flowing from the
text through the matrix into the fix, the catalogue's integrity, and the CLI contract."""

from __future__ import annotations

import json
import re
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from envbuild.explain import (
    DERIVED,
    check_catalogue,
    default_path,
    explain,
    load_catalogue,
    parse_catalogue,
)
from envbuild.matrix import Matrix, load
from tests.conftest import run_cli

FIXTURES = Path(__file__).parent / "fixtures" / "explain"
SMALL = Path(__file__).parent / "fixtures" / "doctor" / "matrix"
LOGS = sorted(FIXTURES.glob("*.txt"))
REQUIRED = {
    "driver_too_old", "no_kernel_image", "torch_cpu_only", "cudnn_version_mismatch",
    "nvjitlink_undefined_symbol", "wsl_libcuda_unversioned", "container_no_gpu_runtime",
    "nvidia_require_cuda", "driver_library_mismatch", "dataloader_shm_bus_error",
    "nccl_shm_segment", "nccl_watchdog_timeout", "rocm_no_binary", "torchvision_operator_missing",
    "cuda_out_of_memory", "stub_libcuda", "ptx_unsupported_toolchain", "cuda_unknown_error",
    "devices_busy", "cdi_unresolvable", "driver_libs_in_image", "nvml_unknown_error",
    "rocm_kfd_permission", "triton_no_c_compiler", "wsl_no_adapters",
    "mps_unavailable_old_macos", "nccl_ib_no_device", "rendezvous_address_in_use",
}


@pytest.fixture(scope="module")
def small() -> Matrix:
    return load(SMALL)


def _sid(path: Path) -> str:
    return path.name.split("__")[0]


@pytest.mark.parametrize("log", LOGS, ids=[p.stem for p in LOGS])
def test_real_world_log_names_its_signature_first(log: Path, small: Matrix) -> None:
    matches = explain(log.read_text(), small)
    if _sid(log) == "no_match":
        assert matches == []
        return
    assert matches, f"{log.name}: nothing matched"
    assert matches[0].id == _sid(log), [(m.id, m.confidence) for m in matches]
    assert matches[0].fix and "{" not in matches[0].fix
    assert matches[0].line  # the log line that matched is shown to the user


def test_every_signature_has_two_real_world_variants() -> None:
    counts = Counter(_sid(p) for p in LOGS)
    ids = [s.id for s in load_catalogue().signatures]
    assert len(ids) >= 30
    assert set(ids) >= REQUIRED
    thin = {i: counts[i] for i in ids if counts[i] < 2}
    assert thin == {}


def test_catalogue_integrity(matrix: Matrix) -> None:
    cat = load_catalogue()
    assert len({s.id for s in cat.signatures}) == len(cat.signatures)
    assert check_catalogue(cat, set(matrix.sources)) == []
    for s in cat.signatures:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", s.id)
        for src in s.source:
            entry = cat.sources.get(src) or matrix.sources.get(src)
            assert entry and entry.get("url"), src


def test_catalogue_checks_catch_mistakes() -> None:
    doc = tomllib.loads(default_path().read_text())
    doc["signature"].append(dict(doc["signature"][0]))  # duplicate id
    doc["signature"][1] = {**doc["signature"][1], "source": ["nowhere"],
                           "fix": ["needs {no_such_field}"]}
    problems = check_catalogue(parse_catalogue(doc), set())
    assert any("duplicate id" in p for p in problems)
    assert any("'nowhere' is not defined" in p for p in problems)
    assert any("no_such_field" in p for p in problems)
    assert any("last fix template" in p for p in problems)
    assert "cuda_floor" in DERIVED


def test_bad_regex_is_reported() -> None:
    from envbuild.errors import MatrixError

    with pytest.raises(MatrixError, match="bad regex"):
        parse_catalogue({"signature": [{"id": "x", "title": "t", "patterns": ["("],
                                        "cause": "c", "fix": "f", "source": ["s"]}]})


# ---------------------------------------------------------------- versions into the fix


def _fix(text: str, m: Matrix, sid: str) -> str:
    return next(x.fix for x in explain(text, m) if x.id == sid)


def test_driver_numbers_flow_into_the_fix(small: Matrix) -> None:
    fix = _fix((FIXTURES / "driver_too_old__1.txt").read_text(), small, "driver_too_old")
    assert fix == ("driver 470.182.03 supports CUDA <= 11.4, and this CUDA 12 wheel needs >= "
                   "525.60.13: install a driver >= 525, or use a CUDA 11.8 wheel (torch <= 2.7, "
                   "cu118), which runs on 470 through minor-version compatibility")


def test_driver_numbers_come_from_the_real_matrix(matrix: Matrix) -> None:
    fix = _fix((FIXTURES / "driver_too_old__1.txt").read_text(), matrix, "driver_too_old")
    floor = matrix.compat_floor(12)
    assert floor is not None and f">= {floor.min_driver_linux}" in fix
    newest_cu118 = max((v.release for v in matrix.variants if v.tag == "cu118"),
                       key=lambda r: tuple(int(x) for x in r.split(".")))
    assert f"torch <= {newest_cu118}, cu118" in fix


def test_driver_api_number_is_decoded(small: Matrix) -> None:
    text = "The NVIDIA driver on your system is too old (found version 12020).\n+cu130"
    fix = _fix(text, small, "driver_too_old")
    assert fix.startswith("this driver supports CUDA <= 12.2, and this CUDA 13 build needs a "
                          "driver >= 580.65.06")


def test_require_cuda_flows(small: Matrix) -> None:
    fix = _fix((FIXTURES / "nvidia_require_cuda__1.txt").read_text(), small, "nvidia_require_cuda")
    assert "CUDA 12.8, i.e. a host driver >= 570.26" in fix
    assert "driver 550.144.03 supports CUDA <= 12.4" in fix
    assert "--cuda 12.4" in fix


def test_arch_flows(small: Matrix) -> None:
    fix = _fix((FIXTURES / "no_kernel_image__2.txt").read_text(), small, "no_kernel_image")
    assert "compute capability 6.1" in fix and "cu126 (torch 2.14)" in fix
    fix = _fix((FIXTURES / "no_kernel_image__1.txt").read_text(), small, "no_kernel_image")
    assert "12.0" in fix and "cu130" in fix
    fix = _fix("GeForce GTX 780 with CUDA capability sm_35 is not compatible with the current "
               "PyTorch installation.", small, "no_kernel_image")
    assert "no torch wheel envbuild knows has kernels for compute capability 3.5" in fix


def test_library_versions_flow(small: Matrix) -> None:
    fix = _fix((FIXTURES / "cudnn_version_mismatch__2.txt").read_text(), small,
               "cudnn_version_mismatch")
    assert "built with cuDNN 8.5.0 but loaded cuDNN 8.4.1" in fix
    fix = _fix((FIXTURES / "nvjitlink_undefined_symbol__2.txt").read_text(), small,
               "nvjitlink_undefined_symbol")
    assert "nvJitLink >= 12.4" in fix


def test_macos_and_rocm_flow(small: Matrix) -> None:
    fix = _fix((FIXTURES / "mps_unavailable_old_macos__2.txt").read_text(), small,
               "mps_unavailable_old_macos")
    assert "on macOS 13.7.4 the newest torch with MPS is 2.7" in fix
    fix = _fix((FIXTURES / "rocm_no_binary__3.txt").read_text(), small, "rocm_no_binary")
    assert fix == "gfx942 is in the rocm7.2 wheels (torch 2.14): `envbuild make --target rocm " \
        "--rocm 7.2`"


def test_fix_without_versions_is_generic(small: Matrix) -> None:
    fix = _fix("CUDA driver version is insufficient for CUDA runtime version", small,
               "driver_too_old")
    assert "{" not in fix and "envbuild doctor" in fix


def test_matches_are_sorted_by_confidence(small: Matrix) -> None:
    matches = explain((FIXTURES / "nccl_shm_segment__1.txt").read_text(), small)
    assert [m.id for m in matches][:2] == ["nccl_shm_segment", "nccl_unhandled_system_error"]
    assert [m.confidence for m in matches] == sorted((m.confidence for m in matches),
                                                     reverse=True)


def test_no_match(small: Matrix) -> None:
    assert explain("Epoch 3/10: loss=0.41\nSaved checkpoint", small) == []


# ---------------------------------------------------------------- CLI


def test_cli_json_shape() -> None:
    r = run_cli("explain", "--json", "--file", str(FIXTURES / "nccl_shm_segment__1.txt"))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert list(doc) == ["matches"] and len(doc["matches"]) >= 2
    for m in doc["matches"]:
        assert list(m) == ["id", "title", "cause", "fix", "confidence"]
        assert isinstance(m["confidence"], float) and 0 < m["confidence"] <= 1
    confidences = [m["confidence"] for m in doc["matches"]]
    assert confidences == sorted(confidences, reverse=True)


def test_cli_text_argument() -> None:
    r = run_cli("explain", "RuntimeError: operator torchvision::nms does not exist")
    assert r.returncode == 0
    assert r.stdout.startswith("1. torchvision_operator_missing: ")
    assert "   fix:     install torch, torchvision and torchaudio together" in r.stdout


def test_cli_stdin() -> None:
    r = run_cli("explain", input_text=(FIXTURES / "cuda_out_of_memory__2.txt").read_text())
    assert r.returncode == 0 and "cuda_out_of_memory" in r.stdout
    assert "2.87 GiB on a 14.76 GiB GPU" in r.stdout


def test_cli_no_match_exits_1() -> None:
    r = run_cli("explain", "everything is fine")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("no known failure signature matched; ")
    r = run_cli("explain", "--json", "everything is fine")
    assert r.returncode == 1 and json.loads(r.stdout) == {"matches": []}


def test_cli_empty_input_is_a_usage_error(tmp_path: Path) -> None:
    r = run_cli("explain", "   ")
    assert r.returncode == 2 and r.stderr.startswith("error: the error text is empty")
    r = run_cli("explain", input_text="")
    assert r.returncode == 2
    r = run_cli("explain", "--file", str(tmp_path / "missing.log"))
    assert r.returncode == 2 and "cannot read" in r.stderr
