"""Tests for envbuild/validator/, the in-image validator (shipped as one zipapp).

The package's modules are imported for the pure functions; the program runs as the zipapp
images carry (stdlib + torch only, no envbuild). Decisions are tested as pure functions, GPU
paths through recorded facts in tests/fixtures/validator/, and the whole program by running
it on this host's CPU torch.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import pytest

from tests.support.validator import FIXTURES, PACKAGE_DIR, PEAKS_TOML, V, peaks_data

GPU_FIXTURES = sorted(FIXTURES.glob("*_*.json"))
REQUIRED_GPUS = ("H100 SXM", "H100 PCIe", "H200", "A100 SXM 80GB", "A100 PCIe 40GB", "L4", "T4",
                 "RTX 4090", "MI300X")


MODULES = sorted(PACKAGE_DIR.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PACKAGE_DIR).as_posix())
def test_validator_imports_only_stdlib_and_torch(path: Path) -> None:
    """Inside images only the stdlib, torch and the validator's own modules exist."""
    tree = ast.parse(path.read_text())
    allowed = set(sys.stdlib_module_names) | {"torch", "torchvision", "torchaudio"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # within the package
                continue
            names = [node.module or ""]
        else:
            continue
        for name in names:
            assert name.split(".")[0] in allowed or name.startswith("envbuild.validator"), name
    text = path.read_text()
    assert "import_module(\"envbuild" not in text


_RUNTIME_TYPES = {"int", "str", "float", "bool", "bytes", "dict", "list", "tuple", "set", "type",
                  "None", "Any"}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PACKAGE_DIR).as_posix())
def test_validator_is_python39_syntax(path: Path) -> None:
    """The validator runs on the image's Python, 3.9 and up: no 3.10+ syntax (match, X | Y
    evaluated at run time, zip(strict=), parenthesised context managers)."""
    text = path.read_text()
    tree = ast.parse(text, feature_version=(3, 9))
    if any(isinstance(n, ast.AnnAssign | ast.FunctionDef | ast.arg) for n in ast.walk(tree)):
        assert "from __future__ import annotations" in text  # annotations stay strings
    annotations: set[int] = set()
    for node in ast.walk(tree):
        for ann in ([node.annotation] if isinstance(node, ast.AnnAssign | ast.arg) and
                    node.annotation else []) + ([node.returns] if isinstance(
                        node, ast.FunctionDef) and node.returns else []):
            annotations.update(id(n) for n in ast.walk(ann))
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr) and \
                id(node) not in annotations:
            sides = [node.left, node.right]
            assert not any((isinstance(x, ast.Name) and x.id in _RUNTIME_TYPES) or
                           (isinstance(x, ast.Constant) and x.value is None) for x in sides), \
                f"{path.name}:{node.lineno}: X | Y type at run time"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id == "zip":
            assert not any(k.arg == "strict" for k in node.keywords), f"{path.name}: zip(strict=)"


# ---------------------------------------------------------------------------------------------
# Pure decisions


CU121 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]  # torch 2.5.1+cu121
CU130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]  # torch 2.9 cu130


@pytest.mark.parametrize(("arch_list", "cc", "covered", "via", "mode"), [
    (CU121, "8.9", True, "sm_86", "sass"),   # Ada runs Ampere GA10x cubins
    (CU121, "6.1", True, "sm_60", "sass"),
    (CU121, "9.0", True, "sm_90", "sass"),
    (CU121, "8.0", True, "sm_80", "sass"),
    (CU121, "12.0", False, None, None),      # Blackwell consumer: no cubin, no PTX
    (CU121, "3.7", False, None, None),       # Kepler K80: dropped
    (CU121, "10.0", False, None, None),
    (CU130, "12.1", True, "sm_120", "sass"),  # same major, minor >= 0
    (CU130, "7.0", False, None, None),       # Volta dropped in cu130
    (["compute_120"], "12.1", True, "compute_120", "ptx"),
    (["sm_80", "compute_90"], "10.0", True, "compute_90", "ptx"),
    (["sm_80", "compute_90"], "8.6", True, "sm_80", "sass"),
    (["sm_80", "compute_90"], "7.5", False, None, None),
    (["sm_90a"], "9.0", True, "sm_90a", "sass"),
    (["sm_90a"], "9.1", False, None, None),   # arch-specific cubins run on exactly 9.0
])
def test_arch_covers(arch_list: list[str], cc: str, covered: bool, via: str | None,
                     mode: str | None) -> None:
    got = V.arch_covers(arch_list, cc)
    assert (got["covered"], got["via"], got["mode"]) == (covered, via, mode)


def test_gfx_covers() -> None:
    gfx = ["gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100"]
    assert V.gfx_covers(gfx, "gfx942:sramecc+:xnack-")["covered"]
    assert not V.gfx_covers(gfx, "gfx1201")["covered"]
    assert V.split_arch_flags("sm_50 sm_60;sm_70") == ["sm_50", "sm_60", "sm_70"]


def test_spec_gpus_coverage_is_static() -> None:
    facts = {"torch": {"version": "2.5.1+cu121", "cuda": "12.1", "arch_list": CU121}}
    ok = V.judge_spec_gpus({"gpus": [{"name": "L4", "cc": "8.9"}]}, facts)
    assert ok.status == "pass" and "sm_86" in ok.detail
    bad = V.judge_spec_gpus({"gpus": [{"name": "RTX 5090", "cc": "12.0"}]}, facts)
    assert bad.status == "fail" and "RTX 5090" in bad.detail and bad.remediation
    ptx_torch = {"torch": {"version": "x", "cuda": "12.4", "arch_list": ["compute_90"]}}
    ptx = V.judge_spec_gpus({"gpus": [{"name": "B200", "cc": "10.0"}]}, ptx_torch)
    assert ptx.status == "warn"
    assert V.judge_spec_gpus({"gpus": []}, facts).status == "skip"
    cpu = V.judge_spec_gpus({"gpus": [{"cc": "9.0"}]}, {"torch": {"version": "2.5.1+cpu"}})
    assert cpu.status == "skip" and cpu.reason


def test_archs_judge() -> None:
    facts = {"torch": {"version": "2.5.1+cu121", "cuda": "12.1", "arch_list": CU121}}
    assert V.judge_archs({"archs": CU121, "variant": "cu121"}, facts).status == "pass"
    ptx = V.judge_archs({"archs": [*CU121, "compute_90"], "variant": "cu124",
                         "torch": "2.5.1"}, facts)
    assert ptx.status == "warn" and "compute_90" in ptx.detail and "2.5 tag cu124" in ptx.detail
    cubin = V.judge_archs({"archs": [*CU121, "sm_100"], "variant": "cu128"}, facts)
    assert cubin.status == "fail" and "sm_100" in cubin.detail
    assert V.judge_archs({"archs": []}, facts).status == "skip"
    assert V.judge_archs({"archs": CU121}, {"torch": {"version": "2.5.1"}}).status == "skip"


@pytest.mark.parametrize(("measured", "status"), [(700.0, "pass"), (200.0, "warn"), (50.0, "fail")])
def test_perf_verdict_h100_bf16(measured: float, status: str) -> None:
    peaks = V.load_peaks(peaks_data())
    got = V.judge_perf({"bf16_tflops": measured}, "NVIDIA H100 80GB HBM3", "cuda", peaks, "matmul")
    assert got.status == status
    assert got.evidence["gpu"] == "H100 SXM"
    if status != "pass":
        assert got.remediation
    meta = peaks["meta"]
    assert V.perf_verdict(measured, 989.4, meta["pass_ratio"], meta["warn_ratio"]) == status


def test_perf_without_verdict() -> None:
    peaks = V.load_peaks(peaks_data())
    cpu = V.judge_perf({"fp32_gflops": 120.0}, "x86_64", "cpu", peaks, "matmul")
    assert cpu.status == "pass" and cpu.evidence["note"] == "no verdict on CPU"
    unknown = V.judge_perf({"bf16_tflops": 1.0}, "NVIDIA GeForce GTX 1080", "cuda", peaks, "matmul")
    assert unknown.status == "pass" and "not in the peaks table" in unknown.evidence["note"]
    no_peaks = V.judge_perf({"bf16_tflops": 1.0}, "NVIDIA H100 PCIe", "cuda", None, "matmul")
    assert no_peaks.status == "pass" and "no verdict" in no_peaks.detail
    t4 = V.judge_perf({"fp16_tflops": 30.0, "bf16_tflops": 5.0}, "Tesla T4", "cuda", peaks, "mm")
    assert t4.evidence["verdicts"]["bf16_tflops"]["peak"] is None  # T4 has no bf16 peak


@pytest.mark.parametrize(("name", "row"), [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H200", "H200"), ("NVIDIA H200 NVL", "H200 NVL"), ("NVIDIA L4", "L4"),
    ("NVIDIA L40S", None), ("Tesla T4", "T4"), ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"), ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ("AMD Instinct MI300X", "MI300X"), ("AMD Instinct MI300X VF", "MI300X"),
])
def test_match_gpu(name: str, row: str | None) -> None:
    got = V.match_gpu(name, peaks_data())
    assert (got["name"] if got else None) == row


def test_peaks_toml_is_complete_and_sourced() -> None:
    data = peaks_data()
    V.load_peaks(data)  # the JSON the image gets is this, converted
    names = {g["name"] for g in data["gpu"]}
    assert set(REQUIRED_GPUS) <= names
    header_ids = set(re.findall(r"^# (S-[A-Z0-9-]+):", PEAKS_TOML.read_text(), re.M))
    for g in data["gpu"]:
        assert isinstance(g["verified"], bool)
        assert g["source"] and set(g["source"]) <= header_ids, g["name"]
        assert g.get("fp32_tflops") and g.get("mem_bw_gbs") and g.get("h2d_gbs"), g["name"]
        assert g.get("bf16_dense_tflops") or g.get("fp16_dense_tflops"), g["name"]
    h100 = next(g for g in data["gpu"] if g["name"] == "H100 SXM")
    assert h100["bf16_dense_tflops"] < 1000 and h100["tf32_dense_tflops"] < 500  # dense, not sparse


def test_load_peaks_rejects_bad_data() -> None:
    good = peaks_data()
    for bad in ({}, {"meta": {"pass_ratio": 0.6, "warn_ratio": 0.9}, "gpu": []},
                {"meta": good["meta"], "gpu": [{"name": "X", "match": []}]},
                {"meta": good["meta"], "gpu": [{"name": "X", "match": ["X"], "mem_bw_gbs": -1}]}):
        with pytest.raises(ValueError):
            V.load_peaks(bad)


@pytest.mark.parametrize(("expected", "actual", "variant", "status"), [
    ("2.5.1", "2.5.1+cu121", "cu121", "pass"),
    ("2.5.1", "2.5.1", "cu124", "pass"),         # PyPI wheels carry no local tag
    ("2.5.1", "2.5.1+cpu", "cu121", "fail"),     # CPU build in a CUDA image
    ("2.5.1", "2.5.0+cu121", "cu121", "fail"),
    ("2.5.1", "2.5.1+rocm6.2", "rocm6.2", "pass"),
    ("2.5.1", "2.5.1+cpu.cxx11.abi", "cpu", "pass"),
    (None, "2.5.1", "cu121", "skip"),
    ("0.20.1", None, "cu121", "fail"),
])
def test_version_verdict(expected: str | None, actual: str | None, variant: str,
                         status: str) -> None:
    assert V.version_verdict("torch", expected, actual, variant).status == status


def test_version_helpers() -> None:
    assert V.cudnn_version_str(90100) == "9.1.0"
    assert V.cudnn_version_str(8902) == "8.9.2"
    assert V.cudnn_version_str(91002) == "9.10.2"
    assert V.nccl_version_str((2, 21, 5)) == "2.21.5"
    assert V.nccl_version_str(2708) == "2.7.8"
    assert V.nccl_version_str(22105) == "2.21.5"
    assert V.version_prefix_matches("9.1.0.70", "9.1.0")
    assert not V.version_prefix_matches("9.1.0.70", "9.0.0")
    assert V.major_minor("6.2.41133-dd7f95766") == "6.2"
    assert V.major_minor("12.1") == "12.1"
    assert V.torch_pin_from_requires(["numpy", "torch (==2.5.1)"]) == "2.5.1"
    assert V.torch_pin_from_requires(["torch==2.4.1", "torchaudio==2.4.1"]) == "2.4.1"
    assert V.torch_pin_from_requires(["torchaudio==2.4.1", "pillow"]) is None
    assert V.torch_pin_from_requires(["torch>=2.0"]) is None
    assert V.pin_matches("2.5.1", "2.5.1+cu121") and not V.pin_matches("2.4.1", "2.5.1+cu121")


def test_flavor_judge() -> None:
    cpu_torch = {"torch": {"version": "2.5.1+cpu", "cuda": None, "hip": None}}
    cuda_torch = {"torch": {"version": "2.5.1+cu121", "cuda": "12.1", "hip": None}}
    rocm_torch = {"torch": {"version": "2.5.1+rocm6.2", "cuda": None, "hip": "6.2.41133"}}
    assert V.judge_flavor({"target": "cuda"}, cpu_torch).detail == "CPU torch in a CUDA image"
    assert V.judge_flavor({"target": "cuda"}, rocm_torch).detail == "ROCm torch in a CUDA image"
    assert V.judge_flavor({"target": "cuda"}, cuda_torch).status == "pass"
    assert V.judge_flavor({"target": "rocm"}, cuda_torch).status == "fail"
    assert V.judge_flavor({"target": "cpu"}, cuda_torch).status == "fail"
    assert V.judge_flavor({"target": "cpu"}, cpu_torch).status == "pass"
    assert V.judge_flavor({"target": "mps"}, {"torch": {"mps_built": True}}).status == "pass"


def test_numerics_and_training_verdicts() -> None:
    assert V.tolerance_verdict({"fp32": 2e-7}, "mm").status == "pass"
    assert V.tolerance_verdict({"fp32": 1e-3}, "mm").status == "fail"
    assert V.tolerance_verdict({"tf32": 1e-3, "bf16": 1e-2}, "mm").status == "pass"
    assert V.tolerance_verdict({"fp32": float("nan")}, "mm").status == "fail"
    falling = [1.4] * 5 + [1.0] * 30 + [0.5] * 5
    assert V.loss_verdict(falling).status == "pass"
    assert V.loss_verdict([1.4] * 5 + [1.0] * 30 + [0.8] * 5).status == "fail"
    assert V.loss_verdict([1.4] * 39 + [float("inf")]).status == "fail"
    assert V.loss_verdict([1.0, 0.1]).status == "fail"


def test_shm_verdict() -> None:
    assert V.shm_verdict(64 << 20, True).status == "warn"
    assert "--shm-size=8g" in V.shm_verdict(64 << 20, True).remediation
    assert "--ipc=host" in V.shm_verdict(64 << 20, True).remediation
    assert V.shm_verdict(8 << 30, True).status == "pass"
    assert V.shm_verdict(8 << 30, False, "EROFS").status == "fail"
    assert V.shm_verdict(None, False).status == "skip"


def test_gpu_attached_but_unusable_fails_for_gpu_targets() -> None:
    facts = {"devices": {"backend": "none", "available": False, "count": 0, "platform": "Linux",
                         "dev_nodes": ["/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidiactl"],
                         "init_warnings": ["CUDA initialization: The NVIDIA driver on your system "
                                           "is too old (found version 11040)."]}}
    out = V.judge_device_count(facts, False, "cuda")
    assert out.status == "fail" and "too old" in out.detail and "driver" in out.remediation
    assert V.judge_device_count(facts, False, "cpu").status == "skip"
    no_nodes = {"devices": {**facts["devices"], "dev_nodes": ["/dev/dri"]}}
    assert V.judge_device_count(no_nodes, False, "cuda").status == "skip"
    assert V.judge_device_count(no_nodes, True, "cuda").status == "fail"


def test_low_precision_choice() -> None:
    assert V.low_precision("cuda", "9.0") == "bf16"
    assert V.low_precision("cuda", "7.5") == "fp16"
    assert V.low_precision("rocm", "9.4") == "bf16"
    assert V.low_precision("mps", None) == "fp16"
    assert V.low_precision("cpu", None) == "bf16"


# ---------------------------------------------------------------------------------------------
# GPU paths through recorded facts


JUDGES = {
    "facts.torchvision": lambda s, f: V.judge_torchvision(s, f),
    "facts.torchaudio": lambda s, f: V.judge_torchaudio(s, f),
    "expect.torch_version": V.judge_torch_version,
    "expect.torchvision_version": V.judge_torchvision_version,
    "expect.torchaudio_version": V.judge_torchaudio_version,
    "expect.flavor": V.judge_flavor,
    "expect.cuda_version": V.judge_cuda_version,
    "expect.cudnn": V.judge_cudnn,
    "expect.nccl": V.judge_nccl,
    "expect.rocm_version": V.judge_rocm_version,
    "expect.archs": V.judge_archs,
    "device.spec_gpus": V.judge_spec_gpus,
    "device.count": lambda s, f: V.judge_device_count(f, True),
    "device.properties": lambda s, f: V.judge_device_properties(f, True),
    "device.arch_coverage": lambda s, f: V.judge_arch_coverage(f, True),
}
PERF_GROUPS = {"perf.matmul": ("bf16_tflops", "fp16_tflops", "tf32_tflops", "fp32_tflops"),
               "perf.mem_bw": ("mem_bw_gbs",), "perf.h2d": ("h2d_gbs",)}


@pytest.mark.parametrize("fixture", GPU_FIXTURES, ids=lambda p: p.stem)
def test_recorded_gpu_facts(fixture: Path) -> None:
    data = json.loads(fixture.read_text())
    spec, facts, expect = data["spec"], data["facts"], data["expect"]
    peaks = V.load_peaks(peaks_data())
    got: dict[str, str] = {}
    for cid, judge in JUDGES.items():
        outcome = judge(spec, facts)
        check = V.make_check(cid, cid, outcome, 0.0)
        assert check["status"] != "skip" or check["reason"]
        assert check["status"] not in ("warn", "fail") or check["remediation"]
        got[cid] = check["status"]
    device = facts["devices"]["devices"][0]["name"]
    for cid, keys in PERF_GROUPS.items():
        metrics = {k: v for k, v in (facts.get("perf") or {}).items() if k in keys}
        if metrics:
            got[cid] = V.judge_perf(metrics, device, facts["devices"]["backend"], peaks,
                                    cid).status
    assert {k: got.get(k) for k in expect} == expect


def test_fixture_shape_matches_live_probe() -> None:
    """The recorded facts have the keys the live probes produce, so fixtures stay honest."""
    torch = pytest.importorskip("torch")
    live = {"torch": V.probe_torch(torch), "torchaudio": V.probe_companion(torch, "torchaudio"),
            "devices": V.probe_devices(torch)}
    for fixture in GPU_FIXTURES:
        facts = json.loads(fixture.read_text())["facts"]
        for key, probe in live.items():
            assert set(probe) <= set(facts[key]), (fixture.name, key, set(probe) - set(facts[key]))


def test_blackwell_on_cu121_reports_the_missing_arch() -> None:
    data = json.loads((FIXTURES / "rtx5090_cu121.json").read_text())
    out = V.judge_arch_coverage(data["facts"], False)
    assert out.status == "fail" and "RTX 5090" in out.detail and "12.0" in out.detail
    assert "sm_90" in out.remediation


# ---------------------------------------------------------------------------------------------
# Driver userspace in the image


def _make_tree(root: Path, files: dict[str, str | None], links: dict[str, str]) -> None:
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content or "x")
    for rel, target in links.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.symlink_to(target)


def _mounts(root: Path) -> set[str]:
    text = (FIXTURES / "mountinfo_nvidia_runtime.txt").read_text()
    return {str(root) + p for p in V.parse_mountinfo(text) if p != "/"}


def test_parse_mountinfo_decodes_escapes() -> None:
    points = V.parse_mountinfo((FIXTURES / "mountinfo_nvidia_runtime.txt").read_text())
    assert "/usr/bin/nvidia-smi" in points and "/mnt/my data" in points


def test_runtime_mounted_driver_files_are_ignored(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    lib = "usr/lib/x86_64-linux-gnu"
    _make_tree(root, {f"{lib}/libcuda.so.550.90.07": None, f"{lib}/libnvidia-ml.so.550.90.07": None,
                      "usr/bin/nvidia-smi": None,
                      "usr/local/cuda-12.2/compat/libcuda.so.535.104.05": None,
                      "usr/local/cuda-12.2/lib64/stubs/libcuda.so": None},
               {f"{lib}/libcuda.so.1": "libcuda.so.550.90.07",
                f"{lib}/libnvidia-ml.so.1": "libnvidia-ml.so.550.90.07"})
    scan = V.scan_driver_userspace(str(root), _mounts(root))
    assert scan["in_image"] == []
    assert len(scan["runtime_mounted"]) == 5
    assert len(scan["allowed"]) == 2
    assert V.driver_userspace_verdict(scan, "").status == "pass"


def test_driver_files_shipped_in_the_image_fail(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    lib = "usr/lib/x86_64-linux-gnu"
    _make_tree(root, {f"{lib}/libnvidia-ml.so.535.104.05": None, "usr/bin/nvidia-smi": None},
               {f"{lib}/libnvidia-ml.so.1": "libnvidia-ml.so.535.104.05",
                f"{lib}/libcuda.so.1": "libcuda.so.535.104.05"})
    scan = V.scan_driver_userspace(str(root), set())
    out = V.driver_userspace_verdict(scan, "")
    assert out.status == "fail" and out.remediation
    assert sorted(Path(p).name for p in scan["in_image"]) == [
        "libnvidia-ml.so.1", "libnvidia-ml.so.535.104.05", "nvidia-smi"]
    assert [Path(p).name for p in scan["dangling"]] == ["libcuda.so.1"]


def test_stubs_on_library_path_and_dangling_links_warn(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    _make_tree(root, {}, {"usr/lib64/libcuda.so.1": "libcuda.so.470.1"})
    scan = V.scan_driver_userspace(str(root), set())
    assert V.driver_userspace_verdict(scan, "").status == "warn"
    clean = V.scan_driver_userspace(str(tmp_path / "empty"), set())
    stubs = V.driver_userspace_verdict(clean, "/usr/local/cuda/lib64/stubs:/usr/lib")
    assert stubs.status == "warn" and "stub" in stubs.remediation


def test_select_checks_groups_and_unknown_ids() -> None:
    assert [c.id for c in V.select_checks(["numerics"], [])] == [
        "numerics.matmul", "numerics.conv2d", "numerics.autocast"]
    chosen = [c.id for c in V.select_checks([], ["perf", "dist.allreduce"])]
    assert "dist.allreduce" not in chosen and not any(c.startswith("perf.") for c in chosen)
    with pytest.raises(ValueError):
        V.select_checks(["nope"], [])


def test_atomic_write_leaves_no_temp_files(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "report.json"
    V.write_json_atomic(str(out), {"a": float("nan"), "b": (1, 2)})
    assert json.loads(out.read_text()) == {"a": "nan", "b": [1, 2]}
    assert [p.name for p in out.parent.iterdir()] == ["report.json"]
