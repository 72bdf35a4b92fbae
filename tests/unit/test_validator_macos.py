"""macos.* and mps.*: a native macOS (Apple MPS) environment, judged on recorded facts.

No Mac runs these tests: the facts are what users posted in public threads
(tests/fixtures/validator/macos/, sources in its README), the MPS floor is the matrix's (as the
resolver puts it in the spec), and the probes run here on the CPU torch as far as they can."""

from __future__ import annotations

import json
from typing import Any

import pytest

from envbuild.engine.validate import host_spec_from
from envbuild.matrix import load
from envbuild.validator.rules import major_minor, version_parts
from tests.support.validator import FIXTURES, V

MACOS = FIXTURES / "macos"


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((MACOS / name).read_text())
    return data


def floor(torch: str) -> str:
    """The MPS floor of a torch release, from the matrix: torch.toml's row, else mps.toml's
    [[macos_floor]] range (torch older than the matrix's releases)."""
    m = load()
    rel = m.torch_release(major_minor(torch) or "")
    if rel is not None and rel.mps_min_macos:
        return rel.mps_min_macos
    have = version_parts(torch)[:2]
    for row in m.extra["mps"]["macos_floor"]:
        low = version_parts(row["torch_min"])
        high = version_parts(row["torch_max"]) if row["torch_max"] else [999]
        if low <= have <= high:
            return str(row["macos"])
    raise AssertionError(f"no MPS floor for torch {torch} in the matrix")


def mps_spec(torch: str) -> dict[str, Any]:
    return {"target": "mps", "torch": torch.split(".dev")[0], "min_macos": floor(torch)}


# --- the floor comes from the data -----------------------------------------------------------

def test_floors_come_from_the_matrix() -> None:
    assert floor("2.4.1") == "12.3" and floor("2.5.1") == "13.0" and floor("2.10.0") == "14.0"
    assert floor("1.13.0.dev20220525") == "12.3"


def test_the_rendered_mps_spec_carries_the_floor() -> None:
    golden = json.loads((FIXTURES.parent.parent / "golden" / "mps" / "spec.json").read_text())
    assert golden["min_macos"] == floor(golden["torch"])


def test_host_spec_on_an_arm64_mac_carries_the_floor() -> None:
    floors = {r.version: r.mps_min_macos for r in load().torch if r.mps_min_macos}
    spec = host_spec_from({"torch": "2.9.1"}, [], "3.12", "Darwin", "arm64", floors)
    assert spec["target"] == "mps" and spec["min_macos"] == floor("2.9.1")
    rosetta = host_spec_from({"torch": "2.2.2"}, [], "3.11", "Darwin", "x86_64", floors)
    assert rosetta["target"] == "cpu" and rosetta["min_macos"] is None
    linux = host_spec_from({"torch": "2.9.1+cpu"}, [], "3.12", "Linux", "x86_64", floors)
    assert linux["min_macos"] is None


# --- macos.native ----------------------------------------------------------------------------

def test_native_arm64_passes() -> None:
    facts = fixture("m1pro-native-12.3.1.json")["platform"]
    out = V.judge_macos_native(mps_spec("2.4.1"), facts)
    assert out.status == "pass" and "macOS-12.3.1-arm64-arm-64bit" in out.detail


@pytest.mark.parametrize("name", ["m2pro-rosetta-15.3.json", "rosetta-translated.json"])
def test_rosetta_python_fails(name: str) -> None:
    facts = fixture(name)["platform"]
    out = V.judge_macos_native(mps_spec("2.9.1"), facts)
    assert out.status == "fail" and "Rosetta" in out.detail
    assert "macOS-10.16-x86_64-i386-64bit" in out.detail and "arch -arm64" in out.remediation
    if facts["proc_translated"] == "1":
        assert "sysctl.proc_translated = 1" in out.detail


def test_rosetta_on_a_host_run_for_cpu_warns() -> None:
    """`validate --host` with an x86_64 Python on a Mac resolves target cpu: said, not failed."""
    facts = fixture("m2pro-rosetta-15.3.json")["platform"]
    out = V.judge_macos_native({"target": "cpu"}, facts)
    assert out.status == "warn" and "Rosetta" in out.detail


def test_a_linux_container_fails_for_mps_and_skips_otherwise() -> None:
    facts = fixture("linuxkit-container.json")["platform"]
    out = V.judge_macos_native(mps_spec("2.9.1"), facts)
    assert out.status == "fail" and "linuxkit" in out.detail and "setup-macos.sh" in out.remediation
    assert V.judge_macos_native({"target": "cpu"}, facts).status == "skip"


# --- macos.version ---------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "torch", "status"), [
    ("m1pro-native-12.3.1.json", "2.4.1", "pass"),       # 12.3.1 >= 12.3
    ("m1pro-native-12.3.1.json", "2.5.1", "fail"),       # 12.3.1 < 13.0
    ("m1-12.7.6-torch2.5.1.json", "2.5.1", "fail"),      # the thread's own case
    ("m1-12.2.1-nightly-built-unavailable.json", "1.13.0.dev20220525", "fail"),
    ("m2max-26.3.1-built-unavailable.json", "2.10.0", "pass"),
    ("macos-26.0-built-unavailable.json", "2.9.1", "pass"),
    ("m2pro-rosetta-15.3.json", "2.9.1", "pass"),        # sw_vers says 15.3, not 10.16
])
def test_macos_version_against_the_floor(name: str, torch: str, status: str) -> None:
    facts = fixture(name)["platform"]
    spec = mps_spec(torch)
    out = V.judge_macos_version(spec, facts)
    assert out.status == status, out.detail
    assert spec["min_macos"] in out.detail
    if status == "fail":
        assert "older than" in out.detail and "--torch" in out.remediation


def test_only_the_compat_version_is_not_a_version() -> None:
    facts = {**fixture("m2pro-rosetta-15.3.json")["platform"], "sw_vers": None}
    out = V.judge_macos_version(mps_spec("2.9.1"), facts)
    assert out.status == "warn" and "10.16" in out.detail


def test_no_floor_in_the_spec_skips() -> None:
    facts = fixture("m1pro-native-12.3.1.json")["platform"]
    out = V.judge_macos_version({"target": "mps", "torch": "2.9.1"}, facts)
    assert out.status == "skip" and "min_macos" in out.reason


@pytest.mark.parametrize(("have", "need", "older"), [
    ("12.7.6", "13.0", True), ("13.0", "13.0", False), ("26.3.1", "14.0", False),
    ("12.2.1", "12.3", True), ("14", "14.0", False), ("10.16", "12.3", True)])
def test_older_than(have: str, need: str, older: bool) -> None:
    assert V.older_than(have, need) is older


# --- mps.backend -----------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "cause"), [
    ("m2max-26.3.1-built-unavailable.json", "meets the floor (14.0)"),
    ("macos-26.0-built-unavailable.json", "meets the floor (14.0)"),
    ("m1-12.7.6-torch2.5.1.json", "macOS 12.7.6 is older than 13.0"),
    ("m1-12.2.1-nightly-built-unavailable.json", "macOS 12.2.1 is older than 12.3"),
])
def test_built_but_unavailable_fails_with_its_cause(name: str, cause: str) -> None:
    data = fixture(name)
    out = V.judge_mps_backend(mps_spec(data["torch"]), data)
    assert out.status == "fail" and "built but unavailable" in out.detail, out.detail
    assert cause in out.detail
    assert out.evidence["built"] is True and out.evidence["available"] is False
    if data["mps"]["error"]:  # torch's own words are kept, even when they name a wrong floor
        assert data["mps"]["error"] in out.detail


def test_rosetta_is_the_cause_before_the_version() -> None:
    data = {"platform": fixture("rosetta-translated.json")["platform"],
            "mps": {"built": True, "available": False}}  # hand-written: not recorded in #146236
    out = V.judge_mps_backend(mps_spec("2.9.1"), data)
    assert out.status == "fail" and "Rosetta" in out.detail


def test_a_linux_container_has_no_mps() -> None:
    data = fixture("linuxkit-container.json")
    out = V.judge_mps_backend(mps_spec("2.9.1"), data)
    assert out.status == "fail" and "Linux container" in out.detail
    assert V.judge_mps_backend({"target": "cpu"}, data).status == "skip"


def test_not_built_fails_apart_from_unavailable() -> None:
    data = {"platform": fixture("m1pro-native-12.3.1.json")["platform"],
            "mps": {"built": False, "available": False}}  # hand-written
    out = V.judge_mps_backend(mps_spec("2.4.1"), data)
    assert out.status == "fail" and "not built with MPS" in out.detail


def test_built_and_available_passes() -> None:
    data = fixture("float64-on-mps.json")
    out = V.judge_mps_backend(mps_spec("2.5.1"), data)
    assert out.status == "pass"
    assert out.evidence["built"] is True and out.evidence["available"] is True


# --- mps.limits ------------------------------------------------------------------------------

@pytest.mark.parametrize(("fallback", "words"), [
    (None, "is not set"), ("1", "run on the CPU"), ("0", "only '1'")])
def test_float64_and_fallback_are_reported(fallback: str | None, words: str) -> None:
    data = fixture("float64-on-mps.json")
    data["mps"]["fallback_env"] = fallback  # hand-written: the threads do not say
    out = V.judge_mps_limits(mps_spec("2.5.1"), data)
    assert out.status == "pass"
    assert "float64 is unsupported on MPS" in out.detail and words in out.detail
    assert "Cannot convert a MPS Tensor to float64" in out.detail
    assert out.evidence["PYTORCH_ENABLE_MPS_FALLBACK"] == fallback


def test_limits_skip_without_mps() -> None:
    data = fixture("m2max-26.3.1-built-unavailable.json")
    out = V.judge_mps_limits(mps_spec(data["torch"]), data)
    assert out.status == "skip" and "mps.backend" in out.reason


# --- mps.parity ------------------------------------------------------------------------------

def _available() -> dict[str, Any]:
    return fixture("float64-on-mps.json")


def test_parity_of_the_recorded_cpu_run_passes() -> None:
    """The comparison's numbers as mps_parity gave them here (device 'cpu'), judged as if on
    MPS: the judge's pass path, not MPS."""
    recorded = fixture("linux-cpu-recorded-here.json")["parity"]
    out = V.judge_mps_parity(mps_spec("2.9.1"), {**_available(), "parity": recorded})
    assert out.status == "pass" and "matmul 0.00e+00" in out.detail


@pytest.mark.parametrize(("parity", "words"), [  # hand-written: no thread records these
    ({"matmul_rel_err": 3e-3, "train_rel_err": 1e-6}, "matmul 3.00e-03"),
    ({"matmul_rel_err": 1e-6, "train_rel_err": float("nan")}, "train nan"),
    ({"matmul_rel_err": None, "train_rel_err": None}, "matmul None"),
    ({"error": "NotImplementedError: The operator 'aten::index_copy.out' is not currently "
               "implemented for the MPS device."}, "not currently implemented"),
])
def test_parity_failures(parity: dict[str, Any], words: str) -> None:
    out = V.judge_mps_parity(mps_spec("2.9.1"), {**_available(), "parity": parity})
    assert out.status == "fail" and words in out.detail, out.detail


def test_parity_skips_without_mps() -> None:
    data = fixture("linuxkit-container.json")
    assert V.judge_mps_parity({"target": "cpu"}, data).status == "skip"
    out = V.judge_mps_parity(mps_spec("2.9.1"), fixture("m2max-26.3.1-built-unavailable.json"))
    assert out.status == "skip"


# --- the probes, as far as they run here (CPU torch, Linux) ----------------------------------

def test_mps_parity_probe_on_the_cpu() -> None:
    torch = pytest.importorskip("torch")
    got = V.mps_parity(torch, "cpu")
    assert got["error"] is None and got["matmul_rel_err"] == 0.0 and got["train_rel_err"] == 0.0
    assert got["losses_device"] == got["losses_cpu"] and len(got["losses_cpu"]) == 3
    assert got["losses_cpu"][-1] < got["losses_cpu"][0]
    assert V.judge_mps_parity(mps_spec("2.9.1"), {**_available(), "parity": got}).status == "pass"


def test_mps_parity_probe_records_a_device_error() -> None:
    torch = pytest.importorskip("torch")
    got = V.mps_parity(torch, "meta")  # a device whose tensors cannot come back: an error
    assert got["error"] and V.judge_mps_parity(
        mps_spec("2.9.1"), {**_available(), "parity": got}).status == "fail"


def test_probes_on_this_linux_host() -> None:
    """probe_mps runs here; macos_facts starts processes (platform.platform() runs uname -p),
    so its output is the one recorded here (tests/cli runs it live in the validator)."""
    torch = pytest.importorskip("torch")
    plat = fixture("linux-cpu-recorded-here.json")["platform"]
    mps = V.probe_mps(torch, "14.0")
    assert plat["system"] == "Linux" and plat["proc_translated"] is None
    assert mps["built"] is False and mps["available"] is False and mps["error"] is None
    assert mps["float64_supported"] is None
    spec = {"target": "cpu"}
    for judge in (V.judge_mps_backend, V.judge_mps_limits, V.judge_mps_parity):
        assert judge(spec, {"platform": plat, "mps": mps}).status == "skip"
    assert V.judge_macos_native(spec, plat).status == "skip"
    assert V.judge_macos_version(spec, plat).status == "skip"


def test_probe_mps_reads_the_fallback_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("PYTORCH_ENABLE_MPS_FALLBACK", "1")
    assert V.probe_mps(torch)["fallback_env"] == "1"


def test_the_checks_are_in_the_table() -> None:
    ids = list(V.CHECK_IDS)
    for cid in ("macos.native", "macos.version", "mps.backend", "mps.limits", "mps.parity"):
        assert cid in ids
    assert ids.index("mps.backend") < ids.index("numerics.matmul")


def test_the_rosetta_macos_is_the_matrix_one() -> None:
    """The validator runs without the matrix: its COMPAT_MACOS is mps.toml [rosetta]
    seen_macos (pytorch/pytorch#146236), which doctor reads."""
    from envbuild.matrix import load
    from envbuild.validator.judges import macos

    assert load().extra["mps"]["rosetta"]["seen_macos"] == macos.COMPAT_MACOS

