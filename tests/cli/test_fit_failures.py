"""`envbuild fit`'s measured method when a measurement fails: every way a probe run can fail
(an error it answers, a run that dies or prints no answer, a timeout), for the asked step and for
the options, sharded or not, under --method auto and measured. The probe is replaced by a fake
that answers the formula's figures or fails as told, so no torch runs: what is tested is what
fit does with each outcome (a reviewer found a sharded step crash with an AssertionError, an
option's error escape as a traceback, and a timeout end the command where the formula could
stand in). Also --image's checks: a reference, a local image, an engine."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import fields
from typing import Any

import pytest

from envbuild.common.errors import EXIT_CANNOT_RUN, EXIT_USAGE, EnvironmentProblem
from envbuild.core import memory
from envbuild.core.memory import Job
from envbuild.core.memshape import parse_config
from tests.support import FIXTURES

CONFIG = FIXTURES / "fit" / "llama-125m-gqa.json"
SMALL_GPU = "GTX 1060"  # 6 GB: the asked step below does not fit, options do


def run_fit(*args: str) -> tuple[int, str, str]:
    from envbuild.cli import run

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = run(["fit", *args])
    return rc, out.getvalue(), err.getvalue()


def _answer(job: Job) -> dict[str, Any]:
    from envbuild import matrix

    coeffs = memory.coefficients(matrix.load().extra["memory"])
    e = memory.formula(parse_config(CONFIG.read_text(), "c"), job, coeffs)
    return {"params": e.params, "trainable": e.trainable, "peak_bytes": e.peak_bytes,
            "components": dict(e.components), "how": "fake", "torch": "2.13.0"}


def _failure(kind: str) -> Any:
    from envbuild.engine.fitprobe import ProbeRunError

    if kind == "timeout":
        raise ProbeRunError("measuring the step here failed: did not finish within 9 s", "h",
                            timed_out=True)
    if kind == "died":
        raise ProbeRunError("measuring the step here failed (exit 137): Killed", "h")
    if kind == "garbage":
        return ["not", "an", "answer"]
    return {"error": kind, "message": f"the probe says {kind}"}


KINDS = ["timeout", "died", "garbage", "failed", "config", "out-of-memory", "untraceable",
         "no-transformers", "no-bitsandbytes", "unsupported"]


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The probe, faked: `fail` (a KINDS entry) for the jobs `failing` picks, else the formula's
    figures as the probe's answer. Records each job asked."""
    from envbuild.engine import fitprobe

    state: dict[str, Any] = {"fail": None, "failing": lambda asked, job: False, "jobs": []}
    names = {f.name for f in fields(Job)}

    state["kernels"] = []

    def measure_here(job: dict[str, Any], timeout: float) -> Any:
        j = Job(**{k: v for k, v in job.items() if k in names})
        state["jobs"].append(j)
        state["kernels"].append(tuple(b["name"] for b in job["sdpa"]["backends"]))
        if state["fail"] and state["failing"](j):
            return _failure(state["fail"])
        return _answer(j)

    monkeypatch.setattr(fitprobe, "measure_here", measure_here)
    return state


ASKED = ["--batch", "4", "--seq", "2048"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shards", [1, 2])
@pytest.mark.parametrize("method", ["auto", "measured"])
def test_the_asked_step_failing(probe: dict[str, Any], kind: str, shards: int,
                                method: str) -> None:
    """auto: the formula stands in, saying why; measured: exit 3, one line with a hint."""
    probe["fail"], probe["failing"] = kind, lambda j: True
    rc, out, err = run_fit("--config", str(CONFIG), *ASKED, "--shards", str(shards),
                           "--gpu", "H100", "--method", method, "--json")
    assert "Traceback" not in err
    data = json.loads(out)
    if method == "auto":
        assert rc == 0, data
        assert data["method"] == "formula"
        assert any(n.startswith("not measured (") for n in data["notes"]), data["notes"]
    else:
        assert rc == EXIT_CANNOT_RUN, data
        assert data["error"]["message"].startswith("the step could not be measured")
        assert data["error"]["hint"]


@pytest.mark.parametrize("kind", KINDS)
def test_an_option_failing_is_passed_over(probe: dict[str, Any], kind: str) -> None:
    """The asked step is measured; a change whose measurement fails is not offered, and the
    report comes out (exit 1: it does not fit); a timeout says options were left out."""
    asked = Job(batch=4, seq=2048, dtype="bf16")
    probe["fail"], probe["failing"] = kind, lambda j: j != asked
    rc, out, err = run_fit("--config", str(CONFIG), *ASKED, "--gpu", SMALL_GPU, "--json")
    assert "Traceback" not in err
    data = json.loads(out)
    assert rc == 1, data
    assert data["method"] == "measured"
    (gpu,) = data["gpus"]
    assert all(o["job"]["shards"] > 1 for o in gpu["options"])  # only sharding: scaled, unmeasured
    timed_out = any("--timeout" in n for n in data["notes"])
    assert timed_out == (kind == "timeout"), data["notes"]


def test_options_are_measured_when_the_probe_answers(probe: dict[str, Any]) -> None:
    rc, out, _ = run_fit("--config", str(CONFIG), *ASKED, "--gpu", SMALL_GPU, "--json")
    data = json.loads(out)
    assert rc == 1 and data["method"] == "measured"
    assert any(o["job"]["shards"] == 1 for o in data["gpus"][0]["options"])
    assert len(probe["jobs"]) > 1


@pytest.mark.parametrize("ref", ["-rm", "a b", "UPPER/case", "x" * 300, "a:b:c", "\x1b[31m"])
def test_an_image_that_is_no_reference_is_refused_before_the_engine(
        monkeypatch: pytest.MonkeyPatch, ref: str) -> None:
    from envbuild.engine import docker

    monkeypatch.setattr(docker, "local_image", lambda r: pytest.fail("asked the engine"))
    rc, _, err = run_fit("--config", str(CONFIG), "--gpu", "H100", "--image", ref)
    assert rc == EXIT_USAGE and err.count("\n") == 2 and "\x1b" not in err, err


def test_an_image_the_engine_does_not_have_is_never_pulled(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    from envbuild.engine import docker

    monkeypatch.setattr(docker, "local_image", lambda r: None)
    monkeypatch.setattr(docker, "run_container", lambda *a, **k: pytest.fail("ran it"))
    rc, _, err = run_fit("--config", str(CONFIG), "--gpu", "H100", "--image", "nope/img:tag")
    assert rc == EXIT_USAGE and "no such image in the local Docker engine" in err, err
    assert "fit never pulls" in err


def test_no_engine_is_exit_3(monkeypatch: pytest.MonkeyPatch) -> None:
    from envbuild.engine import docker

    def gone(ref: str) -> None:
        raise EnvironmentProblem("cannot reach the Docker engine", "start it")

    monkeypatch.setattr(docker, "local_image", gone)
    rc, _, err = run_fit("--config", str(CONFIG), "--gpu", "H100", "--image", "img:tag")
    assert rc == EXIT_CANNOT_RUN and "Docker engine" in err, err


ENTRY = f"{FIXTURES / 'fit' / 'mlp_entry.py'}:tiny"


STEPS = [[], ["--dtype", "bf16"], ["--dtype", "fp16"], ["--dtype", "fp32"], ["--mixed"]]


@pytest.mark.parametrize(("model", "step"), [
    *((model, step) for model in ("config", "entry") for step in STEPS),
    ("entry", ["--infer", "--dtype", "fp32"]),
    # an entry's inputs fix the batch; a config's fp32 prefill of one sequence fits them both
    ("config", ["--infer", "--dtype", "fp32", "--batch", "8"]),
])
def test_every_printed_option_command_asks_the_options_job(
        probe: dict[str, Any], model: str, step: list[str]) -> None:
    """Pasting an option's command checks that option's job, whatever the model's defaults (a
    reviewer found an entry's bf16 options printed without `--dtype bf16`, which an entry reads
    as fp32)."""
    import shlex

    given = ["--config", str(CONFIG)] if model == "config" else ["--entry", ENTRY]
    rc, out, _ = run_fit(*given, *step, "--gpu", SMALL_GPU, "--gpu", "Jetson Nano", "--json")
    data = json.loads(out)
    options = [o for g in data["gpus"] for o in g["options"]]
    assert rc == 1 and options, data["gpus"]
    for option in options:
        argv = shlex.split(option["command"])
        assert argv[:2] == ["envbuild", "fit"]
        rc, again, err = run_fit(*argv[2:], "--json")
        assert json.loads(again)["job"] == option["job"], (option["command"], err)


@pytest.mark.parametrize("method", ["auto", "measured"])
def test_a_gpu_without_flash_attention_is_measured_with_its_own_kernels(
        probe: dict[str, Any], method: str) -> None:
    """An H100 and a V100: two measurements of the asked step, the V100's emulating CUDA
    without flash attention; when only that one fails, auto answers it by the formula, saying
    so, and measured exits 3 naming it."""
    rc, out, _ = run_fit("--config", str(CONFIG), "--gpu", "H100", "--gpu", "V100",
                         "--method", method, "--json")
    data = json.loads(out)
    assert rc == 0 and data["method"] == "measured", data
    assert set(probe["kernels"]) == {("flash", "efficient"), ("efficient",)}
    assert data["attention_kernels"] == ["flash", "efficient"]  # the first GPU's
    probe["kernels"].clear()
    probe["fail"], probe["failing"] = "failed", lambda j: probe["kernels"][-1] == ("efficient",)
    rc, out, _ = run_fit("--config", str(CONFIG), "--gpu", "H100", "--gpu", "V100",
                           "--method", method, "--json")
    data = json.loads(out)
    if method == "auto":
        assert rc == 0 and data["method"] == "measured", data
        assert any(n.startswith("not measured for GPUs without flash attention (")
                   for n in data["notes"]), data["notes"]
    else:
        assert rc == EXIT_CANNOT_RUN, data
        assert "for GPUs without flash attention" in data["error"]["message"]


def test_every_kernel_sets_asked_step_is_measured_before_any_option(
        probe: dict[str, Any]) -> None:
    """--timeout is shared: the V100's asked step was measured only after the first GPU's
    option probes, and could be left a second (a reviewer's finding)."""
    asked = Job(batch=4, seq=2048, dtype="bf16")
    rc, out, _ = run_fit("--config", str(CONFIG), *ASKED, "--gpu", SMALL_GPU, "--gpu", "V100",
                         "--gpu", "H100", "--json")
    assert rc == 1, out
    firsts = [i for i, j in enumerate(probe["jobs"]) if j == asked]
    assert len(firsts) == 2 and firsts == [0, 1], (firsts, probe["jobs"][:4])
    assert len(probe["jobs"]) > 2  # the options came after


def test_a_probe_that_fails_is_not_run_again_for_each_kernel_set(probe: dict[str, Any]) -> None:
    """No transformers (or torch) for the first GPU's kernels means none for the next: the
    formula answers every kind after one failed run, with one note."""
    probe["fail"], probe["failing"] = "no-transformers", lambda j: True
    rc, out, _ = run_fit("--config", str(CONFIG), "--gpu", "H100", "--gpu", "V100", "--json")
    data = json.loads(out)
    assert rc == 0 and data["method"] == "formula", data
    assert len(probe["jobs"]) == 1, probe["jobs"]
    assert sum(n.startswith("not measured") for n in data["notes"]) == 1, data["notes"]
