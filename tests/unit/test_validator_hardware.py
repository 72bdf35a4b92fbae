"""The validator against what real GPUs showed (tests/fixtures/hosts/: an H100 and an H200,
driver 580, torch 2.11.0+cu130 from PyPI). Each defect those recordings exposed has a test here,
and the recorded facts replay through the validator's pure judges to an all-pass judgement."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envbuild.core.request import Request
from envbuild.core.resolve import resolve
from envbuild.engine.validate import host_spec_from
from envbuild.matrix import load
from envbuild.validator.checks import CHECK_IDS
from tests.support import FIXTURES
from tests.support.validator import V, peaks_data

# Copies of shared/reference/hosts/*-torch2.11-cu130 (the files these tests read; README there).
HOSTS = FIXTURES / "hosts"
RECORDINGS = sorted(HOSTS.glob("*-torch2.11-cu130"))
# Today's validator on a real H200, run on a lent machine on 2026-11-28 (README there).
LATEST = HOSTS / "h200-driver580-torch2.11-cu130-2026-11-28"
needs_recordings = pytest.mark.skipif(len(RECORDINGS) < 2, reason="host recordings missing")
H100_ARCHS = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


def _recorded(host: Path, name: str) -> dict[str, dict[str, Any]]:
    report = json.loads((host / name).read_text())
    return {c["id"]: c for c in report["checks"]}


def recorded_facts(host: Path, name: str = "validate-host-nospec.json") -> dict[str, Any]:
    """The facts the probes gathered on that host, as the checks' evidence recorded them."""
    checks = _recorded(host, name)
    torch = checks["facts.torch"]["evidence"]
    count = checks["device.count"]["evidence"]
    devices = {"backend": count["backend"], "available": True, "count": count["count"],
               "devices": checks["device.properties"]["evidence"]["devices"],
               "arch_list": torch["arch_list"], "init_warnings": count["init_warnings"],
               "error": None, "env": count["env"], "driver": count["driver"],
               "dev_nodes": ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"],
               "platform": "Linux"}
    return {"torch": torch, "torchvision": checks["facts.torchvision"]["evidence"],
            "torchaudio": checks["facts.torchaudio"]["evidence"], "devices": devices}


SPEC_JUDGES = {
    "expect.torch_version": V.judge_torch_version,
    "expect.torchvision_version": V.judge_torchvision_version,
    "expect.torchaudio_version": V.judge_torchaudio_version,
    "facts.torchvision": V.judge_torchvision, "facts.torchaudio": V.judge_torchaudio,
    "expect.flavor": V.judge_flavor, "expect.cuda_version": V.judge_cuda_version,
    "expect.cudnn": V.judge_cudnn, "expect.nccl": V.judge_nccl,
    "expect.rocm_version": V.judge_rocm_version, "expect.archs": V.judge_archs,
    "device.spec_gpus": V.judge_spec_gpus,
}
DEVICE_JUDGES = {"device.count": V.judge_device_count,
                 "device.properties": V.judge_device_properties,
                 "device.arch_coverage": V.judge_arch_coverage}


def judge_all(host: Path, spec: dict[str, Any], report: str) -> dict[str, V.Outcome]:
    facts = recorded_facts(host, report)
    checks = _recorded(host, report)
    out: dict[str, V.Outcome] = {cid: j(spec, facts) for cid, j in SPEC_JUDGES.items()}
    out.update({cid: j(facts, True, spec.get("target")) for cid, j in DEVICE_JUDGES.items()})
    out["expect.python"] = V.judge_python(spec, checks["facts.python"]["evidence"]["version"])
    for cid in ("numerics.matmul", "numerics.conv2d", "numerics.autocast"):
        errors = checks[cid]["evidence"]["rel_errors"]
        out[cid] = V.tolerance_verdict({k: float(v) for k, v in errors.items()}, cid)
    out["train.smoke"] = V.loss_verdict(checks["train.smoke"]["evidence"]["losses"])
    shm = checks["shm.size"]["evidence"]
    out["shm.size"] = V.shm_verdict(shm["total_bytes"], shm["writable"])
    peaks = V.load_peaks(peaks_data())
    name = facts["devices"]["devices"][0]["name"]
    for cid in ("perf.matmul", "perf.mem_bw", "perf.h2d"):
        measured = checks[cid]["evidence"]["measured"]
        out[cid] = V.judge_perf(measured, name, "cuda", peaks, cid)
    return out


def resolved_cu130_spec(gpu: str) -> dict[str, Any]:
    spec = resolve(Request(torch="2.11.0", cuda="13.0", gpus=(gpu,), python="3.12"), load())
    return spec.to_json()


@needs_recordings
@pytest.mark.parametrize("host", [*RECORDINGS, LATEST],
                         ids=lambda p: p.name)
@pytest.mark.parametrize("which", ["spec-cu130", "host-nospec", "recorded-nospec-spec"])
def test_recorded_gpu_hosts_replay_to_all_pass(host: Path, which: str) -> None:
    """H100/H200 facts through the pure judges: nothing fails or warns. The spec is the one
    envbuild resolves today (matrix fixed), the one `validate --host` builds from what the host
    has installed, and the variant='cuda' spec that day's `--host` actually sent."""
    if which == "spec-cu130":
        spec, report = resolved_cu130_spec("H100"), "validate-host-spec-cu130.json"
    elif which == "host-nospec":
        spec = host_spec_from({"torch": "2.11.0", "torchvision": "0.26.0",
                               "torchaudio": "2.11.0"},
                              ["nvidia-cudnn-cu13==9.19.0.56", "nvidia-nccl-cu13==2.28.9"],
                              "3.12", "Linux", "x86_64")
        report = "validate-host-nospec.json"
    else:
        report = "validate-host-nospec.json"
        spec = json.loads((host / report).read_text())["spec"]
    got = judge_all(host, spec, report)
    bad = {cid: (o.status, o.detail) for cid, o in got.items() if o.status in ("fail", "warn")}
    assert bad == {}
    if which == "spec-cu130":
        assert got["expect.archs"].status == "pass"
        assert got["expect.cudnn"].status == "pass" and got["expect.nccl"].status == "pass"
    assert got["expect.torch_version"].status == "pass"


@pytest.mark.parametrize("report", ["validate-host-nospec.json", "validate-host-spec-cu130.json"])
def test_latest_real_h200_run_passed_every_check(report: str) -> None:
    """The recording is today's table's: its checks are ids the validator still has, none failed,
    warned or could not run, and every check that needs the GPU ran on it and passed."""
    data = json.loads((LATEST / report).read_text())
    status = {c["id"]: c["status"] for c in data["checks"]}
    assert data["summary"]["status"] == "pass" and set(status) <= set(CHECK_IDS)
    assert [cid for cid, s in status.items() if s in ("fail", "warn", "not_run")] == []
    on_gpu = [cid for cid in status if cid.split(".")[0] in
              ("device", "numerics", "train", "compile", "dist", "perf")]
    skipped = [cid for cid in on_gpu if status[cid] != "pass"]
    with_spec = report == "validate-host-spec-cu130.json"
    assert skipped == ([] if with_spec else ["device.spec_gpus"])  # no spec, no GPU list
    compiled = {c["id"]: c for c in data["checks"]}["compile.smoke"]["evidence"]["runs"]
    assert [r["device"] for r in compiled][-1] == "cuda:0"


def test_latest_real_h200_ran_an_extension_and_compiled_on_the_gpu_alone() -> None:
    """The second H200 run (issue 23): --with bitsandbytes loaded its CUDA 13.0 library and ran
    a 4-bit round trip on the GPU; compile.smoke compiled on the GPU only."""
    data = json.loads((LATEST / "validate-host-spec-cu130-with-bitsandbytes.json").read_text())
    checks = {c["id"]: c for c in data["checks"]}
    assert data["summary"]["status"] == "pass" and set(checks) <= set(CHECK_IDS)
    assert checks["ext.load"]["status"] == checks["ext.kernel"]["status"] == "pass"
    assert "libbitsandbytes_cuda130.so loads" in checks["ext.load"]["detail"]
    assert checks["ext.kernel"]["evidence"]["device"] == "cuda:0"
    assert [r["device"] for r in checks["compile.smoke"]["evidence"]["runs"]] == ["cuda:0"]


def test_matrix_211_cu130_fact_is_hardware_verified() -> None:
    m = load()
    spec = resolved_cu130_spec("H100")
    assert spec["archs"] == H100_ARCHS
    row = next(v for v in m.variants if v.release == "2.11" and v.tag == "cu130")
    assert "S-HW-H100-2026-11-22" in row.source and row.verified
    assert "S-HW-H100-2026-11-22" in m.sources


@needs_recordings
def test_recorded_arch_list_is_what_the_matrix_says() -> None:
    for host in RECORDINGS:
        probe = json.loads((host / "doctor-facts" / "torch-probe.json").read_text())
        assert probe["arch_flags"].split() == resolved_cu130_spec("H100")["archs"]


# ---------------------------------------------------------------------------------------------
# expect.archs: SASS and PTX judged apart


TORCH_211 = {"torch": {"version": "2.11.0+cu130", "cuda": "13.0", "arch_list": H100_ARCHS}}


@pytest.mark.parametrize(("archs", "gpus", "status"), [
    ([*H100_ARCHS, "compute_120"], [{"name": "H100", "cc": "9.0"}], "warn"),   # the H100 day
    ([*H100_ARCHS, "compute_120"], [], "warn"),
    ([*H100_ARCHS, "compute_90"], [{"name": "H100", "cc": "9.0"}], "warn"),
    ([*H100_ARCHS, "sm_89"], [{"name": "L4", "cc": "8.9"}], "warn"),  # sm_86 still runs L4
    ([*H100_ARCHS, "sm_89"], [{"name": "H100", "cc": "9.0"}], "warn"),  # not the spec GPU's
    ([*H100_ARCHS, "sm_89"], [], "fail"),
    ([*H100_ARCHS, "sm_90a"], [{"name": "H100", "cc": "9.0"}], "warn"),  # sm_90 still runs
    (["sm_80", "sm_90", "sm_100", "sm_110"], [{"name": "Thor", "cc": "11.0"}], "fail"),
    (H100_ARCHS, [{"name": "H100", "cc": "9.0"}], "pass"),
])
def test_archs_judge_fails_missing_cubins_and_warns_missing_ptx(
        archs: list[str], gpus: list[dict[str, str]], status: str) -> None:
    spec = {"archs": archs, "gpus": gpus, "variant": "cu130", "torch": "2.11.0"}
    out = V.judge_archs(spec, TORCH_211)
    assert out.status == status, out.detail
    if status == "warn":
        assert "matrix/torch.toml [[variant]] release 2.11 tag cu130" in out.detail
    if status != "pass":
        assert out.remediation


# ---------------------------------------------------------------------------------------------
# train.checkpoint: compare on one device


class FakeTensor:
    """A tensor on a named device; torch.equal across devices raises, as on a real GPU."""

    def __init__(self, values: tuple[float, ...], device: str) -> None:
        self.values, self.device = values, device
        self.shape, self.dtype = (len(values),), "float32"

    def detach(self) -> FakeTensor:
        return self

    def cpu(self) -> FakeTensor:
        return FakeTensor(self.values, "cpu")


class FakeTorch:
    @staticmethod
    def is_tensor(x: object) -> bool:
        return isinstance(x, FakeTensor)

    @staticmethod
    def equal(a: FakeTensor, b: FakeTensor) -> bool:
        if a.device != b.device:
            raise RuntimeError("Expected all tensors to be on the same device, but got other is "
                               f"on {b.device}, different from other tensors on {a.device}")
        return a.values == b.values


def _state(device: str, step_device: str, bump: float = 0.0) -> dict[str, Any]:
    return {"model": {"0.weight": FakeTensor((1.0, 2.0 + bump), device)},
            "optim": {"state": {0: {"step": FakeTensor((2.0,), step_device),
                                    "exp_avg": FakeTensor((0.1,), device)}},
                      "param_groups": [{"lr": 1e-3, "params": [0]}]}}


@pytest.mark.parametrize("loaded_on", ["cpu", "cuda:0"])
@pytest.mark.parametrize("step_on", ["cpu", "cuda:0"])
def test_checkpoint_compares_across_devices(loaded_on: str, step_on: str) -> None:
    """What the H100 hit: AdamW's step counter lives on the CPU, the rest on cuda:0, and a
    map_location load moves all of it."""
    live = _state("cuda:0", "cpu")
    assert V.state_mismatches(FakeTorch, live, _state(loaded_on, step_on)) == []
    assert V.state_mismatches(FakeTorch, live, _state(loaded_on, step_on, bump=1.0)) == [
        "model.0.weight"]


def test_checkpoint_mismatches_name_the_path() -> None:
    a = _state("cpu", "cpu")
    b = _state("cpu", "cpu")
    b["optim"]["param_groups"][0]["lr"] = 2e-3
    del b["optim"]["state"][0]["exp_avg"]
    assert V.state_mismatches(FakeTorch, a, b) == ["optim.param_groups[0].lr",
                                                   "optim.state.0.exp_avg"]
    assert V.state_mismatches(FakeTorch, {"x": [1, 2]}, {"x": [1]}) == ["x"]
    assert V.state_mismatches(FakeTorch, {"x": FakeTensor((1.0,), "cpu")}, {"x": 1.0}) == ["x"]


def test_checkpoint_check_round_trips_optimizer_state_for_real() -> None:
    pytest.importorskip("torch")
    ctx = V.TorchContext({}, None, V.Options())
    ctx.import_torch()
    out = V.t_train_checkpoint(ctx)
    assert out.status == "pass", out.detail
    assert out.evidence["map_locations"] == ["cpu"] and "AdamW" in out.evidence["optimizer"]


# ---------------------------------------------------------------------------------------------
# validate --host without --spec


@pytest.mark.parametrize(("installed", "requires", "target", "variant"), [
    ("2.11.0", ["nvidia-cudnn-cu13==9.19.0.56"], "cuda", "cuda"),     # PyPI: no local tag
    ("2.11.0+cu130", [], "cuda", "cu130"),
    ("2.9.1+cu126", [], "cuda", "cu126"),
    ("2.9.1+rocm6.4", [], "rocm", "rocm6.4"),
    ("2.13.0+cpu", [], "cpu", "cpu"),
    ("2.13.0", [], "cpu", "cpu"),
])
@pytest.mark.parametrize("runtime_tag", ["", "+cu118", "+cu126", "+cu130", "+rocm6.4", "+cpu"])
def test_host_spec_expects_what_is_installed(installed: str, requires: list[str], target: str,
                                             variant: str, runtime_tag: str) -> None:
    spec = host_spec_from({"torch": installed}, requires, "3.12", "Linux", "x86_64")
    assert (spec["target"], spec["variant"], spec["origin"]) == (target, variant, "host")
    runtime = installed.split("+")[0] + runtime_tag
    out = V.judge_torch_version(spec, {"torch": {"version": runtime}})
    family = {"cuda": "+cu", "rocm": "+rocm", "cpu": "+cpu"}[target]
    fits = (not runtime_tag or runtime_tag.startswith(family)) if variant == target \
        else runtime_tag in ("", "+" + variant)
    assert (out.status == "pass") == fits, (spec, runtime, out.detail)


@pytest.mark.parametrize(("tag", "variant", "ok"), [
    ("cu130", "cuda", True), ("cu118", "cuda", True), ("cu130", "cu130", True),
    ("cu130", "cu128", False), ("rocm6.4", "cuda", False), ("cpu", "cuda", False),
    ("rocm6.4", "rocm", True), ("rocm7.1.1", "rocm", True), ("cu130", "rocm", False),
    ("cpu", "cpu", True), ("cpu.cxx11.abi", "cpu", True), ("cu130", "cpu", False),
    ("cudax", "cuda", False), ("rocm", "rocm", True),
])
def test_local_tag_family_match(tag: str, variant: str, ok: bool) -> None:
    assert V.local_tag_matches_variant(tag, variant) is ok


# ---------------------------------------------------------------------------------------------
# *_VISIBLE_DEVICES hiding the GPUs


def _no_gpu_facts(env: dict[str, str | None], nodes: list[str]) -> dict[str, Any]:
    return {"devices": {"backend": "none", "available": False, "count": 0, "devices": [],
                        "init_warnings": [], "error": None, "env": env, "dev_nodes": nodes,
                        "platform": "Linux"}}


NV_NODES = ["/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"]
AMD_NODES = ["/dev/dri", "/dev/kfd"]


@pytest.mark.parametrize(("var", "value", "nodes"), [
    ("CUDA_VISIBLE_DEVICES", "", NV_NODES),
    ("CUDA_VISIBLE_DEVICES", " ", NV_NODES),
    ("CUDA_VISIBLE_DEVICES", "-1", NV_NODES),
    ("CUDA_VISIBLE_DEVICES", "2", NV_NODES),
    ("CUDA_VISIBLE_DEVICES", "7,0", NV_NODES),
    ("CUDA_VISIBLE_DEVICES", "GPU-00000000-0000-0000-0000-000000000000", NV_NODES),
    ("CUDA_VISIBLE_DEVICES", "MIG-4b6b7d6e-1234-5678-9abc-def012345678", NV_NODES),
    ("CUDA_VISIBLE_DEVICES", "none", NV_NODES),
    ("NVIDIA_VISIBLE_DEVICES", "void", NV_NODES),
    ("NVIDIA_VISIBLE_DEVICES", "none", NV_NODES),
    ("NVIDIA_VISIBLE_DEVICES", "", NV_NODES),
    ("HIP_VISIBLE_DEVICES", "", AMD_NODES),
    ("HIP_VISIBLE_DEVICES", "-1", AMD_NODES),
    ("ROCR_VISIBLE_DEVICES", "", AMD_NODES),
    ("ROCR_VISIBLE_DEVICES", "GPU-deadbeef", AMD_NODES),
])
def test_visible_devices_variable_is_named_not_the_driver(var: str, value: str,
                                                          nodes: list[str]) -> None:
    env = {v: None for v in V.VISIBILITY_VARS}
    env[var] = value
    facts = _no_gpu_facts(env, nodes)
    target = "rocm" if "/dev/kfd" in nodes else "cuda"
    for judge in DEVICE_JUDGES.values():
        loose, strict = judge(facts, False, target), judge(facts, True, target)
        for out in (loose, strict):
            assert var in out.detail and "driver" not in out.detail.lower(), out.detail
        assert loose.status == "warn" and var in loose.remediation
        assert strict.status == "fail"
    assert V.judge_device_count(facts, False, None).status == "skip"


@pytest.mark.parametrize(("var", "value", "nodes"), [
    ("CUDA_VISIBLE_DEVICES", "0", NV_NODES), ("CUDA_VISIBLE_DEVICES", "1,0", NV_NODES),
    ("CUDA_VISIBLE_DEVICES", "", []),            # no GPU attached at all: nothing hidden
    ("NVIDIA_VISIBLE_DEVICES", "all", NV_NODES), ("NVIDIA_VISIBLE_DEVICES", "0", NV_NODES),
    ("HIP_VISIBLE_DEVICES", "0", AMD_NODES), ("HIP_VISIBLE_DEVICES", "", NV_NODES),
])
def test_visible_devices_that_hide_nothing(var: str, value: str, nodes: list[str]) -> None:
    env = {v: None for v in V.VISIBILITY_VARS}
    env[var] = value
    assert V.hidden_by_env(env, nodes) == []


@needs_recordings
def test_recorded_empty_cuda_visible_devices_run() -> None:
    """The H100 run with CUDA_VISIBLE_DEVICES= blamed the driver; now the variable is named."""
    text = (RECORDINGS[0] / "validate-cuda-visible-devices-empty.txt").read_text()
    assert "CUDA_VISIBLE_DEVICES" in text and "older than" in text  # what that day said
    env = {v: None for v in V.VISIBILITY_VARS}
    env.update(CUDA_VISIBLE_DEVICES="", NVIDIA_VISIBLE_DEVICES="0")
    out = V.judge_device_count(_no_gpu_facts(env, ["/dev/nvidia0", "/dev/nvidiactl"]), False,
                               "cuda")
    assert out.status == "warn" and "CUDA_VISIBLE_DEVICES='' is set but empty" in out.detail
    assert "older" not in out.remediation


# ---------------------------------------------------------------------------------------------
# perf: measured like the hardware is best shown


def test_measure_warms_up_repeats_and_records_the_method() -> None:
    torch = pytest.importorskip("torch")
    calls = []
    sec, method = V.measure(torch, "cpu", lambda: calls.append(1), warmup_s=0.0, repeats=5,
                            repeat_s=0.0)
    assert sec > 0 and method["repeats"] == 5 and method["statistic"] == "median of repeats"
    assert method["warmup_calls"] >= 3
    assert len(calls) == method["warmup_calls"] + 5 * method["calls_per_repeat"]
    assert method["spread"][0] <= 1.0 <= method["spread"][1]


def test_perf_sizes_fill_the_gpu() -> None:
    assert V.PERF_MATMUL_N >= 8192 and V.PERF_COPY_BYTES >= 1 << 30


def test_cpu_perf_records_its_method() -> None:
    pytest.importorskip("torch")
    ctx = V.TorchContext({}, None, V.Options())
    ctx.import_torch()
    out = V.t_perf_matmul(ctx)
    assert out.status == "pass" and out.evidence["method"]["repeats"] >= 5
