"""Tests for envbuild/validator/, the in-image validator (shipped as one zipapp).

The package's modules are imported for the pure functions; the program runs as the zipapp
images carry (stdlib + torch only, no envbuild). Decisions are tested as pure functions, GPU
paths through recorded facts in tests/fixtures/validator/, and the whole program by running
it on this host's CPU torch.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.validator import (
    ROOT,
    VALIDATOR_PATH,
    V,
    by_id,
    host_spec,
    peaks_data,
    run_validator,
)

REQUIRED_IDS = ("facts.torch", "expect.torch_version", "device.count", "numerics.matmul",
                "train.smoke", "dist.allreduce", "shm.size", "image.no_driver_userspace",
                "perf.matmul")
CHECK_KEYS = {"id", "title", "status", "reason", "duration_s", "evidence", "remediation"}


def assert_schema(report: dict[str, Any]) -> None:
    assert report["schema_version"] == 1
    assert isinstance(report["envbuild_validator"], str) and report["envbuild_validator"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", report["started"])
    assert isinstance(report["duration_s"], (int, float)) and report["duration_s"] >= 0
    assert {"hostname", "platform", "python"} <= set(report["host"])
    ids = [c["id"] for c in report["checks"]]
    assert len(ids) == len(set(ids))
    for c in report["checks"]:
        assert set(c) >= CHECK_KEYS, c["id"]
        assert re.fullmatch(r"[a-z]+(\.[a-z0-9_]+)+", c["id"])
        assert c["status"] in ("pass", "warn", "fail", "skip")
        assert isinstance(c["evidence"], dict)
        assert isinstance(c["duration_s"], (int, float)) and c["duration_s"] >= 0
        if c["status"] == "skip":
            assert c["reason"].strip(), f"{c['id']} skipped without a reason"
        if c["status"] in ("warn", "fail"):
            assert c["remediation"].strip(), f"{c['id']} {c['status']} without remediation"
    summary = report["summary"]
    for status in ("pass", "warn", "fail", "skip"):
        assert summary[status] == sum(1 for c in report["checks"] if c["status"] == status)
    assert summary["status"] == ("fail" if summary["fail"] else "pass")


# ---------------------------------------------------------------------------------------------
# The whole program on this host's CPU torch


@pytest.fixture(scope="module")
def host_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, dict[str, Any], str]]:
    tmp = tmp_path_factory.mktemp("host")
    peaks_json = tmp / "peaks.json"
    peaks_json.write_text(json.dumps(peaks_data()))
    t0 = time.monotonic()
    rc, report, stdout, stderr = run_validator(tmp, host_spec(), "--peaks", str(peaks_json),
                                               "--json")
    wall = time.monotonic() - t0
    assert report is not None, stderr
    print(f"host CPU run: {wall:.1f}s wall, {report['duration_s']}s in report")
    yield rc, report, stdout


def test_host_run_has_no_failures(host_run: tuple[int, dict[str, Any], str]) -> None:
    rc, report, _ = host_run
    failures = {c["id"]: c["detail"] for c in report["checks"] if c["status"] == "fail"}
    assert failures == {}
    assert rc == 0
    assert report["summary"]["status"] == "pass"
    assert set(REQUIRED_IDS) <= set(by_id(report))


def test_host_run_really_ran_torch(host_run: tuple[int, dict[str, Any], str]) -> None:
    checks = by_id(host_run[1])
    for cid in ("facts.torch", "expect.torch_version", "expect.flavor", "numerics.matmul",
                "numerics.conv2d", "numerics.autocast", "train.smoke", "train.dataloader",
                "train.checkpoint", "dist.allreduce", "perf.matmul"):
        assert checks[cid]["status"] == "pass", (cid, checks[cid]["detail"])
    smoke = checks["train.smoke"]["evidence"]
    assert smoke["steps"] >= 30 and smoke["final_avg"] <= 0.5 * smoke["initial_avg"]
    assert checks["dist.allreduce"]["evidence"]["backend"] == "gloo"
    assert checks["perf.matmul"]["evidence"]["note"] == "no verdict on CPU"
    assert checks["perf.matmul"]["evidence"]["measured"]["fp32_gflops"] > 0


def test_host_run_device_checks_skip_with_reason(host_run: tuple[int, dict[str, Any], str]) -> None:
    checks = by_id(host_run[1])
    for cid in ("device.count", "device.properties", "device.arch_coverage", "device.kernel",
                "perf.mem_bw", "perf.h2d"):
        assert checks[cid]["status"] == "skip"
        assert checks[cid]["reason"] == "no GPU visible (torch.cuda.is_available() is False)"
    assert checks["image.no_driver_userspace"]["status"] == "skip"
    memory = checks["memory.estimate"]  # says what it could not check
    assert memory["status"] == "skip"
    assert memory["reason"] == ("no GPU visible (torch.cuda.is_available() is False): fit's "
                                "figure for a reference training step was not compared with "
                                "torch.cuda.max_memory_allocated()")


def test_report_schema(host_run: tuple[int, dict[str, Any], str]) -> None:
    _, report, stdout = host_run
    assert_schema(report)
    assert json.loads(stdout) == report  # --json prints the same report that --out wrote
    assert [c["id"] for c in report["checks"]] == list(V.CHECK_IDS)


def test_table_has_one_line_per_check(host_run: tuple[int, dict[str, Any], str]) -> None:
    report = host_run[1]
    lines = V.format_table(report).splitlines()
    assert len(lines) == 1 + len(report["checks"])
    for line, check in zip(lines[1:], report["checks"], strict=True):
        assert line.startswith(check["status"].upper()) and check["id"] in line


def test_cuda_spec_on_cpu_torch_fails_flavor(tmp_path: Path) -> None:
    spec = host_spec(target="cuda", variant="cu121", torch_cuda="12.1", cudnn="9.1.0.70")
    rc, report, stdout, _ = run_validator(tmp_path, spec, "--only", "facts.torch,expect")
    assert report is not None
    checks = by_id(report)
    assert rc == 1
    assert checks["expect.flavor"]["status"] == "fail"
    assert checks["expect.flavor"]["detail"] == "CPU torch in a CUDA image"
    assert checks["expect.cuda_version"]["status"] == "fail"
    assert checks["facts.torch"]["status"] == "pass"
    assert "FAIL  expect.flavor" in stdout


def test_wrong_torch_version_fails(tmp_path: Path) -> None:
    rc, report, _, _ = run_validator(tmp_path, host_spec(torch="2.5.1"),
                                     "--only", "expect.torch_version,expect.flavor")
    assert report is not None and rc == 1
    checks = by_id(report)
    assert checks["expect.torch_version"]["status"] == "fail"
    assert "2.5.1" in checks["expect.torch_version"]["remediation"]
    assert checks["expect.flavor"]["status"] == "pass"


def test_require_gpu_turns_device_skips_into_failures(tmp_path: Path) -> None:
    rc, report, _, _ = run_validator(tmp_path, host_spec(), "--require-gpu",
                                     "--only", "device,perf.mem_bw")
    assert report is not None and rc == 1
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    assert statuses == {"device.spec_gpus": "skip", "device.count": "fail",
                        "device.properties": "fail", "device.arch_coverage": "fail",
                        "device.kernel": "fail", "perf.mem_bw": "fail"}
    assert "--gpus all" in by_id(report)["device.count"]["remediation"]


def _pythons_without_torch() -> list[list[str]]:
    candidates = [[sys.executable, "-S"]]  # no site-packages: torch is not importable
    base = Path(sys.base_prefix)
    for p in sorted(base.parent.glob("3.9*/bin/python3.9")):  # pyenv layout, if present
        candidates.append([str(p)])
        break
    return candidates


@pytest.mark.parametrize("python", _pythons_without_torch(),
                         ids=lambda p: Path(p[0]).name + "".join(p[1:]))
def test_missing_torch_still_writes_report(tmp_path: Path, python: list[str]) -> None:
    probe = subprocess.run([*python, "-c", "import torch"], capture_output=True, check=False)
    if probe.returncode == 0:
        pytest.skip("this interpreter has torch")
    spec = {"target": "cuda", "torch": "2.5.1", "variant": "cu121", "python": "3.11"}
    rc, report, stdout, stderr = run_validator(tmp_path, spec, "--skip", "perf,dist,train",
                                               python=python)
    assert report is not None, stderr
    assert rc == 1
    assert "Traceback" not in stdout + stderr
    assert_schema(report)
    checks = by_id(report)
    assert checks["facts.torch"]["status"] == "fail"
    assert "No module named 'torch'" in checks["facts.torch"]["evidence"]["error"]
    assert checks["numerics.matmul"]["status"] == "fail"
    assert checks["facts.python"]["status"] == "pass"


def test_hung_and_crashing_checks_fail_alone(tmp_path: Path) -> None:
    """A hang is killed at its deadline (60 s x 0.25 here; the worker would sleep an hour), a crash
    ends only its worker, and the checks after them pass in a fresh worker. The scale leaves the
    healthy checks 15 s each: at 0.05 (3 s) a loaded 2-core machine failed numerics.autocast."""
    pytest.importorskip("torch")
    rc, report, _, _ = run_validator(
        tmp_path, host_spec(), "--only", "numerics,train.checkpoint", "--timeout-scale", "0.25",
        env={V.FAULT_ENV: "hang:numerics.matmul,crash:numerics.conv2d"})
    assert report is not None and rc == 1
    checks = by_id(report)
    assert checks["numerics.matmul"]["status"] == "fail"
    assert checks["numerics.matmul"]["detail"].startswith("timed out after 15s")
    assert checks["numerics.conv2d"]["status"] == "fail"
    assert checks["numerics.conv2d"]["evidence"]["signal"] == "SIGSEGV"
    assert checks["numerics.autocast"]["status"] == "pass"
    assert checks["train.checkpoint"]["status"] == "pass"


def test_validator_does_not_import_envbuild(tmp_path: Path) -> None:
    """Run a copy outside the repo with a poisoned `envbuild` package first on the path."""
    pytest.importorskip("torch")
    copy = tmp_path / "opt" / "validator.pyz"
    copy.parent.mkdir(parents=True)
    shutil.copy(VALIDATOR_PATH, copy)
    poison = tmp_path / "poison" / "envbuild"
    poison.mkdir(parents=True)
    marker = tmp_path / "imported-envbuild"
    (poison / "__init__.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nraise ImportError('validator imported envbuild')\n")
    env = {"PYTHONPATH": str(poison.parent)}
    rc, report, _, stderr = run_validator(
        tmp_path / "run", host_spec(), "--only", "facts,expect,train.dataloader,dist.allreduce",
        script=copy, env=env)
    assert report is not None, stderr
    assert not marker.exists()
    assert rc == 0, [c for c in report["checks"] if c["status"] == "fail"]
    assert by_id(report)["dist.allreduce"]["status"] == "pass"


def test_runs_as_module_from_repo(tmp_path: Path) -> None:
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps({"target": "cpu", "python": "3.11"}))
    proc = subprocess.run([sys.executable, "-m", "envbuild.validator", "--spec", str(spec_path),
                           "--only", "facts.python,shm.size", "--json"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert [c["id"] for c in json.loads(proc.stdout)["checks"]] == ["facts.python", "shm.size"]


def test_without_spec_nothing_is_compared(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "peaks.json").write_text("{}")  # a matrix without a peaks table
    rc, report, _, stderr = run_validator(tmp_path, None, "--only", "facts,expect,perf.matmul",
                                          "--peaks", str(tmp_path / "peaks.json"))
    assert report is not None, stderr
    assert rc == 0 and report["spec"] == {}
    checks = by_id(report)
    assert checks["facts.torch"]["status"] == "pass"
    assert all(c["status"] == "skip" for cid, c in checks.items() if cid.startswith("expect."))
    assert checks["expect.flavor"]["reason"] == "no spec target given: nothing to compare"


@pytest.mark.parametrize("case", ["missing_spec", "bad_json", "bad_target", "unknown_check",
                                  "bad_peaks", "bad_option", "bad_timeout_scale"])
def test_cannot_run_exits_3(tmp_path: Path, case: str) -> None:
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps({"target": "cpu"}))
    argv = [sys.executable, str(VALIDATOR_PATH), "--spec", str(spec_path)]
    if case == "missing_spec":
        argv[-1] = str(tmp_path / "nope.json")
    elif case == "bad_json":
        spec_path.write_text("{not json")
    elif case == "bad_target":
        spec_path.write_text(json.dumps({"target": "tpu"}))
    elif case == "unknown_check":
        argv += ["--only", "numerics.bogus"]
    elif case == "bad_peaks":
        (tmp_path / "peaks.json").write_text(json.dumps({"meta": {"pass_ratio": 2}, "gpu": []}))
        argv += ["--peaks", str(tmp_path / "peaks.json")]
    elif case == "bad_option":
        argv.append("--bogus")
    else:
        argv += ["--timeout-scale", "0"]
    proc = subprocess.run([*argv, "--out", str(tmp_path / "r.json")], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 3, proc.stderr
    assert not (tmp_path / "r.json").exists()
    assert "Traceback" not in proc.stderr
