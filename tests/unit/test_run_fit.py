"""`envbuild run IMAGE --fit REPORT.json` (issue 28): the job `envbuild fit --json` reported,
judged against the recorded hosts' GPUs (nvidia-smi's memory) by fit's own rule, as a warning
before the start; its remediation is an `envbuild fit` command that itself answers "fits". A
REPORT that is not fit's report is one line and exit 2, whatever it holds."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.common.errors import UsageError
from envbuild.core import memory
from envbuild.core.memory import Job
from envbuild.features import fit, run
from envbuild.matrix import Matrix, load
from tests.support.run_fit import FULL, INFER, LLAMA_8B, host, preflight, report


@pytest.fixture(scope="module")
def m() -> Matrix:
    return load()


def findings(pre: run.Preflight, prefix: str = "fit.") -> dict[str, tuple[str, str, str]]:
    return {f.id: (str(f.severity), f.message, f.remediation) for f in pre.findings
            if f.id.startswith(prefix)}




def test_a_job_too_big_for_the_h100_warns_and_names_a_change_that_fits(
        m: Matrix, tmp_path: Path) -> None:
    claim = run.read_fit(report(tmp_path, FULL))
    pre = preflight(m, host("h100-sxm-recorded"), fit=claim)
    assert not pre.blocked  # a warning, never a refusal
    sev, message, fix = findings(pre)["fit.too_big"]
    coeffs = memory.coefficients(m.extra["memory"])
    need = memory.needed_bytes(claim.estimate, coeffs)
    assert sev == "warn"
    assert message.startswith(f"the job declared with --fit ({claim.report}) needs "
                              f"{need / 1e9:,.1f} GB per GPU; GPU 0 NVIDIA H100 80GB HBM3 has ")
    assert "GB usable" in message
    command = re.search(r"`(envbuild fit [^`]+)`", fix)
    assert command is not None, fix
    argv = shlex.split(command.group(1))
    assert argv[-2:] == ["--gpu", "H100"] and "--method" in argv and str(LLAMA_8B) in argv
    # the remediation resolves (tests/cli/test_run_fit.py runs the command itself): the changed
    # job it names fits by the same estimator
    option = fit.fit(fit.FitRequest(job=Job(**_job_of(argv)), config=LLAMA_8B,
                                    method="formula", gpus=("H100",)))
    assert option.ok


def _job_of(argv: list[str]) -> dict[str, Any]:
    """The Job fields of an `envbuild fit` command line (the words job_flags writes)."""
    kw: dict[str, Any] = {}
    words = iter(argv)
    names = {"--batch": "batch", "--seq": "seq", "--dtype": "dtype", "--optimizer": "optimizer",
             "--lora": "lora_rank", "--shards": "shards", "--accumulate": "accumulate"}
    for w in words:
        if w in names:
            value = next(words)
            kw[names[w]] = value if w in ("--dtype", "--optimizer") else int(value)
        elif w in ("--mixed", "--checkpointing"):
            kw[w[2:]] = True
        elif w == "--infer":
            kw["mode"] = "infer"
    return kw


def test_the_same_job_on_the_h200_fits(m: Matrix, tmp_path: Path) -> None:
    claim = run.read_fit(report(tmp_path, replace_job(FULL, lora_rank=16)))
    pre = preflight(m, host("h200-recorded"), fit=claim)
    sev, message, _ = findings(pre)["fit.fits"]
    assert sev == "ok" and "GPU 0 NVIDIA H200 has 14" in message and "margin" in message
    assert "fit.too_big" not in findings(pre)


def test_inference_fits_the_h100_not_four_16_gb_v100s_each_named_once(
        m: Matrix, tmp_path: Path) -> None:
    claim = run.read_fit(report(tmp_path, INFER))
    ok = preflight(m, host("h100-sxm-recorded"), fit=claim)
    assert findings(ok)["fit.fits"][0] == "ok"
    small = preflight(m, host("driver-too-old-470"), fit=claim)
    sev, message, fix = findings(small)["fit.too_big"]
    assert sev == "warn" and "GPU 0, 1, 2, 3 Tesla V100-SXM2-16GB has 1" in message
    assert "--infer" in fix and "envbuild fit" in fix


def test_a_gpu_without_flash_attention_is_judged_with_its_own_kernels(
        m: Matrix, tmp_path: Path) -> None:
    """The report was made for an H100 (flash attention); the V100s here have none, and the
    8B model's grouped K/V heads then take the math kernel: a formula report is re-counted with
    the V100's kernels (more than the report's figure), a measured one is pointed at `fit` on
    this host (a reviewer found every GPU judged at the flash figure)."""
    coeffs = memory.coefficients(m.extra["memory"])
    claim = run.read_fit(report(tmp_path, INFER))
    assert claim.kernels == ("flash", "efficient")
    from envbuild.doctor.view import build_view

    v100 = next(g for _, g, _ in fit.view_gpus(build_view(host("driver-too-old-470"), m), m))
    here = memory.for_gpu(coeffs, v100)
    assert memory.kernel_names(here) == ("efficient",)
    assert claim.shape is not None
    own = memory.needed_bytes(memory.formula(claim.shape, claim.job, here), here)
    assert own > memory.needed_bytes(claim.estimate, coeffs)
    _, message, _ = findings(preflight(m, host("driver-too-old-470"), fit=claim))["fit.too_big"]
    assert f"needs {own / 1e9:,.1f} GB per GPU with these GPUs' attention kernels" in message
    on_h100 = findings(preflight(m, host("h100-sxm-recorded"), fit=claim))
    assert "attention kernels" not in str(on_h100) and "fit.kernels" not in on_h100
    data = json.loads(report(tmp_path, INFER).read_text())
    data |= {"method": "measured", "config": None, "entry": "train.py:build"}
    path = tmp_path / "measured.json"
    path.write_text(json.dumps(data))
    got = findings(preflight(m, host("driver-too-old-470"), fit=run.read_fit(path)))
    assert got["fit.kernels"][0] == "warn" and "runs efficient" in got["fit.kernels"][1]
    assert got["fit.kernels"][2].startswith("measure it here: `envbuild fit --entry train.py:")
    del data["attention_kernels"]  # a report from before: made for a flash-capable GPU
    path.write_text(json.dumps(data))
    assert run.read_fit(path).kernels == ()
    assert "fit.kernels" in findings(preflight(m, host("driver-too-old-470"),
                                               fit=run.read_fit(path)))


def test_the_verdict_is_fits_own(m: Matrix, tmp_path: Path) -> None:
    """One rule: the finding says what core.memory.verdict says for the host's GPU, with the
    driver's memory (nvidia-smi) as fit itself takes it on that host."""
    from envbuild.doctor import record
    from envbuild.doctor.view import build_view

    coeffs = memory.coefficients(m.extra["memory"])
    facts = host("h100-sxm-recorded")
    gpus = fit.view_gpus(build_view(facts, m), m)
    assert [(i, g.name, g.memory_mib, k) for i, g, k in gpus] == [(0, "H100", 81559, True)]
    for job in (FULL, INFER, replace_job(FULL, shards=4), replace_job(INFER, batch=64)):
        claim = run.read_fit(report(tmp_path, job))
        verdict = memory.verdict(gpus[0][1], claim.estimate, coeffs)
        got = findings(preflight(m, facts, fit=claim))
        assert ("fit.fits" in got) == verdict.fits and ("fit.too_big" in got) != verdict.fits
    assert record  # the recorded hosts are doctor --save directories


def test_a_measured_report_points_at_the_fit_command(m: Matrix, tmp_path: Path) -> None:
    data = json.loads(report(tmp_path, FULL).read_text())
    data |= {"method": "measured", "config": None, "entry": "train.py:build", "image": "my:img"}
    path = tmp_path / "measured.json"
    path.write_text(json.dumps(data))
    claim = run.read_fit(path)
    assert claim.shape is None
    fix = findings(preflight(m, host("h100-sxm-recorded"),
                         fit=claim))["fit.too_big"][2]
    assert fix == ("`envbuild fit --entry train.py:build --image my:img --mixed --gpu H100` "
                   "lists the cheapest changes that fit")


def test_more_shards_than_gpus_here_and_no_gpu_at_all(m: Matrix, tmp_path: Path) -> None:
    claim = run.read_fit(report(tmp_path, replace_job(FULL, shards=8)))
    got = findings(preflight(m, host("h100-sxm-recorded"),
                         fit=claim))
    assert got["fit.shards"][0] == "warn" and "sharded over 8 GPUs; this host has 1" in \
        got["fit.shards"][1] and "--shards" not in got["fit.shards"][2]  # 1: no --shards
    none = findings(preflight(m, host("cpu-host-docker"),
                          fit=claim))
    assert none["fit.unjudged"][0] == "warn" and "--gpu NAME" in none["fit.unjudged"][2]
    off = findings(preflight(m, host("h100-sxm-recorded"),
                         fit=claim, no_gpu=True))
    assert off["fit.unjudged"][0] == "info" and "starts without GPUs" in off["fit.unjudged"][1]


def replace_job(job: Job, **kw: Any) -> Job:
    from dataclasses import replace

    return replace(job, **kw)


# -- REPORT.json that is not fit's report ---------------------------------------------------------


def _refused(path: Path) -> str:
    with pytest.raises(UsageError) as err:
        run.read_fit(path)
    text = err.value.message
    assert "\n" not in text and text.startswith("--fit ") and len(text) < 300
    assert "envbuild fit" in err.value.hint
    return text


def test_files_that_are_no_report(tmp_path: Path) -> None:
    assert "no such file" in _refused(tmp_path / "missing.json")
    assert "directory" in _refused(tmp_path)
    assert "character device" in _refused(Path("/dev/zero")) or "not a regular" in \
        _refused(Path("/dev/zero"))
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as f:
        f.truncate(64 << 20)  # sparse
    assert "MiB" in _refused(huge) or "bytes" in _refused(huge)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert "levels" in _refused(deep)
    for bad, says in (("{", "not JSON"), ("[]", "not a JSON object"), ("\xff", "UTF-8")):
        (tmp_path / "b.json").write_bytes(bad.encode("latin-1"))
        assert says in _refused(tmp_path / "b.json")


GOOD = {"model": "config.json", "config": None, "entry": None, "image": None,
        "method": "formula", "how": "h", "params": 10, "trainable": 10, "peak_bytes": 1 << 30,
        "components": {"parameters": 1 << 30}, "job": {"mode": "train", "batch": 1}}


@pytest.mark.parametrize(("change", "says"), [
    ({"peak_bytes": -1}, "peak_bytes"), ({"peak_bytes": 0}, "peak_bytes is 0"),
    ({"peak_bytes": "1e9"}, "peak_bytes"), ({"peak_bytes": True}, "peak_bytes"),
    ({"peak_bytes": 1 << 70}, "peak_bytes"), ({"params": 1.5}, "params"),
    ({"method": "guess"}, "method"), ({"job": []}, "job"), ({"job": {"mode": "fly"}}, "mode"),
    ({"job": {"batch": -3}}, "batch"), ({"job": {"batch": "8"}}, "job.batch"),
    ({"job": {"mixed": 1}}, "job.mixed"), ({"job": {"shards": 0}}, "shards"),
    ({"job": {"extra": 1}}, "job"), ({"components": {"parameters": -1}}, "components"),
    ({"components": {"weights": 1}}, "components"), ({"model": ["x"]}, "model"),
    ({"config": 3}, "config"),
])
def test_wrong_types_and_negative_numbers(tmp_path: Path, change: dict[str, Any],
                                          says: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(GOOD | change))
    assert says in _refused(path)


def test_the_good_report_reads(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(GOOD))
    claim = run.read_fit(path)
    assert claim.estimate.peak_bytes == 1 << 30 and claim.job == Job(mode="train", batch=1)


JSON = st.recursive(st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70)
                    | st.floats(allow_nan=False) | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
KEYS = st.sampled_from([*GOOD, "job.mode", "job.batch", "job.seq", "job.dtype", "job.mixed",
                        "job.optimizer", "job.shards", "job.lora_rank", "components.other"])


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(KEYS, JSON, min_size=1, max_size=4))
def test_any_field_of_any_value_is_a_claim_or_one_line(tmp_path: Path,
                                                       changes: dict[str, Any]) -> None:
    doc = json.loads(json.dumps(GOOD))
    for key, value in changes.items():
        table, _, sub = key.partition(".")
        if sub:
            if isinstance(doc.get(table), dict):
                doc[table][sub] = value
        else:
            doc[table] = value
    path = tmp_path / "gen.json"
    path.write_text(json.dumps(doc))
    try:
        claim = run.read_fit(path)
    except UsageError as exc:
        assert "\n" not in exc.message and exc.message.startswith("--fit ")
        return
    assert 0 < claim.estimate.peak_bytes < memory.MAX_BYTES
    memory.check_job(claim.job, memory.coefficients(load().extra["memory"]))
