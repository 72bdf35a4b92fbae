"""Pure parts of a warm make: the default tag, the validation cache, the doctor's default."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envbuild.engine import validation_cache as vc
from tests.support import FIXTURES

FACTS = FIXTURES / "doctor"

PASS = {"checks": [{"id": "facts.torch", "status": "pass"}],
        "summary": {"pass": 1, "fail": 0, "warn": 0, "skip": 0}}
FAIL = {"checks": [{"id": "facts.torch", "status": "fail"}],
        "summary": {"pass": 0, "fail": 1, "warn": 0, "skip": 0}}


FP_FILES = {
    "nvidia/version": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu\nGCC\n",
    "gpus/0000:18:00.0/information": "Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t "
                                     "GPU-7c3b9a\nBus Location: \t 0000:18:00.0\n",
}
RUNTIME = {"engine": "docker 28.2.2", "runtimes": "nvidia,runc", "default_runtime": "runc",
           "cdi": ""}


def _key(files: dict[str, str] = FP_FILES, kernel: str = "6.8.0", runtime: dict[str, str] = RUNTIME,
         image: str = "sha256:aa", validator: str = "0.1.0+x", gpu: str = "False") -> str:
    host = vc.host_fingerprint(files, kernel, runtime)
    return vc.cache_key(image, validator, host, {"require_gpu": gpu})


def test_fingerprint_names_driver_gpus_runtime_kernel() -> None:
    fp = vc.host_fingerprint(FP_FILES, "6.8.0", RUNTIME)
    assert "580.159.04" in fp["nvidia_driver"]
    assert "NVIDIA H100 80GB HBM3" in fp["gpus"] and "GPU-7c3b9a" in fp["gpus"]
    assert fp["kernel"] == "6.8.0" and fp["runtime.runtimes"] == "nvidia,runc"


CHANGES = {
    "image": {"image": "sha256:bb"}, "validator": {"validator": "0.1.0+y"},
    "kernel": {"kernel": "6.8.1"}, "require_gpu": {"gpu": "True"},
    "driver": {"files": {**FP_FILES, "nvidia/version": FP_FILES["nvidia/version"].replace(
        "580.159.04", "580.65.06")}},
    "gpu uuid": {"files": {**FP_FILES, "gpus/0000:18:00.0/information":
                           FP_FILES["gpus/0000:18:00.0/information"].replace("7c3b9a", "11")}},
    "gpu name": {"files": {**FP_FILES, "gpus/0000:18:00.0/information":
                           FP_FILES["gpus/0000:18:00.0/information"].replace("H100", "H200")}},
    "gpu added": {"files": {**FP_FILES, "gpus/0000:2a:00.0/information":
                            FP_FILES["gpus/0000:18:00.0/information"]}},
    "gpu gone": {"files": {"nvidia/version": FP_FILES["nvidia/version"]}},
    "amd gpu": {"files": {**FP_FILES, "nodes/1/properties": "gfx_target_version 90400\n"
                                                            "unique_id 42\n"}},
    "runtime": {"runtime": {**RUNTIME, "runtimes": "runc"}},
    "engine": {"runtime": {**RUNTIME, "engine": "docker 28.3.0"}},
    "cdi": {"runtime": {**RUNTIME, "cdi": "/etc/cdi/nvidia.yaml"}},
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_any_change_of_image_validator_or_host_misses(change: str) -> None:
    assert _key(**CHANGES[change]) != _key()  # type: ignore[arg-type]


def test_same_inputs_same_key() -> None:
    assert _key() == _key(files=dict(reversed(list(FP_FILES.items()))))


def test_a_passing_report_is_reused(tmp_path: Path) -> None:
    when = datetime(2026, 11, 22, 21, 58, tzinfo=UTC)
    assert vc.store("k1", PASS, 0, "a note", False, {"image": "x"}, tmp_path, now=when)
    hit = vc.load("k1", tmp_path)
    assert hit is not None and hit.report == PASS and hit.created == when
    assert hit.note == "a note"
    assert vc.load("k2", tmp_path) is None


@pytest.mark.parametrize(("report", "code"), [(FAIL, 1), (PASS, 1), (FAIL, 0), ({}, 0),
                                              ({"summary": {"fail": 0}}, 0)])
def test_a_failing_report_is_never_stored(tmp_path: Path, report: dict[str, object],
                                          code: int) -> None:
    assert not vc.store("k1", report, code, "", False, {}, tmp_path)
    assert vc.load("k1", tmp_path) is None and not list(tmp_path.iterdir())


@given(st.one_of(st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
                 st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                              lambda c: st.lists(c, max_size=3)
                              | st.dictionaries(st.text(max_size=8), c, max_size=3),
                              max_leaves=10).map(json.dumps)))
def test_a_corrupt_or_foreign_cache_file_is_a_miss(text: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "k1.json").write_text(text, errors="surrogateescape")
        assert vc.load("k1", Path(tmp)) is None


def test_a_tampered_failing_entry_is_a_miss(tmp_path: Path) -> None:
    assert vc.store("k1", PASS, 0, "", False, {}, tmp_path)
    data = json.loads((tmp_path / "k1.json").read_text())
    data["report"] = FAIL
    (tmp_path / "k1.json").write_text(json.dumps(data))
    assert vc.load("k1", tmp_path) is None
    data["report"] = PASS
    data["key"] = "other"  # copied under another key
    (tmp_path / "k1.json").write_text(json.dumps(data))
    assert vc.load("k1", tmp_path) is None


def test_an_unwritable_cache_is_no_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert not vc.store("k1", PASS, 0, "", False, {}, blocker / "sub")


def test_validator_version_follows_the_validator_source() -> None:
    v = vc.validator_version()
    from envbuild import __version__

    assert v.startswith(__version__ + "+") and v == vc.validator_version()


def _recorded(name: str):  # type: ignore[no-untyped-def]
    from envbuild.doctor import record

    return record.load(FACTS / name)


@pytest.mark.parametrize(("host", "target"), [
    ("h100-healthy", "cuda"), ("pascal-gtx1080", "cuda"), ("wsl2-healthy", "cuda"),
    ("mi300x", "rocm"), ("cpu-host-docker", "cpu"), ("no-docker", "cpu")])
def test_make_without_target_takes_the_doctors_choice(host: str, target: str,
                                                      matrix) -> None:  # type: ignore[no-untyped-def]
    from envbuild.core.request import Request
    from envbuild.core.resolve import resolve
    from envbuild.doctor.model import Request as Ask
    from envbuild.doctor.recommend import recommend
    from envbuild.doctor.view import build_view
    from envbuild.features.make import apply_recommendation, wants_recommendation

    req = Request(python="3.11")
    assert wants_recommendation(req)
    rec = recommend(build_view(_recorded(host), matrix), matrix, Ask())
    chosen = apply_recommendation(req, rec)
    assert chosen.target == target == rec.target and chosen.python == "3.11"
    assert chosen.gpus == rec.gpus
    spec = resolve(chosen, matrix)  # what make then builds: the doctor's command, resolved
    assert spec.target == target
    if target == "cuda":
        assert chosen.gpus and (chosen.driver or host.startswith("wsl"))


@pytest.mark.parametrize("given_opts", [{"target": "cpu"}, {"cuda": "12.8"}, {"rocm": "6.2"},
                                        {"driver": "535.104.05"}, {"gpus": ("H100",)}])
def test_hardware_options_keep_the_users_choice(given_opts: dict[str, object]) -> None:
    from envbuild.core.request import Request
    from envbuild.features.make import wants_recommendation

    assert not wants_recommendation(Request(**given_opts))  # type: ignore[arg-type]


def test_cpu_only_host_gets_cpu() -> None:
    from envbuild.core.request import Request
    from envbuild.doctor.model import Recommendation
    from envbuild.features.make import apply_recommendation

    r = apply_recommendation(Request(torch="2.13.0"), Recommendation("cpu", reason="no GPU"))
    assert (r.target, r.cuda, r.driver, r.gpus, r.torch) == ("cpu", None, None, (), "2.13.0")

