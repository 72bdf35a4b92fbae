"""envbuild/engine/fitprobe.py's measure_here: the memory probe run with this interpreter, each
run a fresh process. The fake step's peak against the real step's, by torch's tracker and by the
fresh process's memory growth (ru_maxrss), within 10% (issue 28's "done when"); what the model
prints never reaches the answer; a probe that dies or hangs is one EnvbuildError."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from envbuild.common.errors import EXIT_CANNOT_RUN, EnvbuildError, UsageError
from envbuild.engine import fitprobe
from envbuild.validator import memprobe
from tests.support import FIXTURES

torch = pytest.importorskip("torch")

ENTRY = FIXTURES / "fit" / "mlp_entry.py"
GB = 1 << 30


def job(fn: str = "tiny", **kw: Any) -> dict[str, Any]:
    return {"format": 1, "model": {"entry": f"{ENTRY}:{fn}"}, "mode": "train", "dtype": "fp32",
            "optimizer": "adamw", "device": "cpu", **kw}


def test_fake_and_real_agree_within_10_percent() -> None:
    """An fp32 AdamW step of about 1.1 GB: the fake peak, the real one by MemTracker on real
    tensors, and the real process's RSS growth."""
    fake = fitprobe.measure_here(job("wide"), timeout=300)
    real = fitprobe.measure_here(job("wide", real=True), timeout=300)
    assert "error" not in fake and "error" not in real, (fake, real)
    assert real["peak_bytes"] > GB and real["rss_growth"] > GB
    for truth in (real["peak_bytes"], real["rss_growth"]):
        assert abs(fake["peak_bytes"] / truth - 1) < 0.10, (fake["peak_bytes"], truth)
    print(json.dumps({"fake": fake["peak_bytes"], "real_tracker": real["peak_bytes"],
                      "real_rss_growth": real["rss_growth"]}))


def test_the_models_prints_do_not_reach_the_answer(tmp_path: Path) -> None:
    entry = tmp_path / "chatty.py"
    entry.write_text("import sys, torch\n"
                     "print('{\"peak_bytes\": 1}')\n"
                     "def build():\n"
                     "    print('\\n::envbuild-memprobe-output-5d0c2b::\\n{\"peak_bytes\": 2}')\n"
                     "    print('x' * 3_000_000, file=sys.stderr)\n"
                     "    return torch.nn.Linear(8, 8), (torch.randn(4, 8),)\n")
    r = fitprobe.measure_here({**job(), "model": {"entry": f"{entry}:build"}}, timeout=120)
    assert r["params"] == 72 and r["peak_bytes"] > 2, r


def test_a_relative_entry_path_is_made_absolute(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ENTRY.parent)
    r = fitprobe.measure_here({**job(), "model": {"entry": f"{ENTRY.name}:tiny"}}, timeout=120)
    assert r["params"] == 198_912, r


def test_an_error_answer_comes_back_as_data(tmp_path: Path) -> None:
    entry = tmp_path / "broken.py"
    entry.write_text("def build(:\n")
    r = fitprobe.measure_here({**job(), "model": {"entry": f"{entry}:build"}}, timeout=120)
    assert r["error"] == "entry" and "SyntaxError" in r["message"]


def test_a_probe_that_dies_or_hangs_is_one_error(tmp_path: Path) -> None:
    entry = tmp_path / "dies.py"
    entry.write_text("import os\ndef build():\n    os._exit(7)\n")
    with pytest.raises(EnvbuildError) as died:
        fitprobe.measure_here({**job(), "model": {"entry": f"{entry}:build"}}, timeout=120)
    assert "exit 7" in died.value.message and died.value.hint
    entry.write_text("import time\ndef build():\n    time.sleep(60)\n")
    with pytest.raises(EnvbuildError) as hung:
        fitprobe.measure_here({**job(), "model": {"entry": f"{entry}:build"}}, timeout=3)
    assert "did not finish within 3 s" in hung.value.message


def test_an_entry_that_is_no_file_or_names_no_function_is_a_usage_error(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.py"
    os.mkfifo(fifo)
    for spec, says in ((str(ENTRY), "FILE.py:FUNCTION"), (f"{ENTRY}:1x", "FILE.py:FUNCTION"),
                       (f"{tmp_path}/none.py:fn", "no such file"),
                       (f"{fifo}:fn", "a FIFO (named pipe), not a regular file"),
                       (f"{tmp_path}:fn", "a directory"), ("/a\x00b.py:fn", "not a file name")):
        with pytest.raises(UsageError) as here:
            fitprobe.measure_here({**job(), "model": {"entry": spec}}, timeout=60)
        assert says in here.value.message, (spec, here.value.message)
        path = Path(spec.rpartition(":")[0] or spec)
        with pytest.raises(UsageError) as inside:
            fitprobe.in_container({**job(), "model": {"entry": spec}}, path)
        assert says in inside.value.message, (spec, inside.value.message)


def test_the_container_job_points_at_the_mount() -> None:
    inside, mounts = fitprobe.in_container(job(), ENTRY)
    assert inside["model"] == {"entry": f"{fitprobe.ENTRY_DIR}/mlp_entry.py:tiny"}
    assert mounts == {fitprobe.ENTRY_DIR: ENTRY.parent.resolve()}
    assert fitprobe.in_container({"model": {"config": {}}}, None) == ({"model": {"config": {}}},
                                                                       {})
    argv = fitprobe.probe_argv(sys.executable, inside)
    assert argv[1:3] == ["-I", "-c"] and json.loads(argv[4]) == inside


def test_the_source_and_the_job_each_fit_one_argument() -> None:
    """Linux takes at most 128 KiB in one argv string: the probe's source is one, the job
    another."""
    assert len(fitprobe.probe_source().encode()) < memprobe.MAX_ARG // 2
    big = {**job(), "model": {"config": {"model_type": "llama", "id2label": "x" * 140_000}}}
    with pytest.raises(UsageError, match="at most 127 KiB"):
        fitprobe.probe_argv(sys.executable, big)


@pytest.mark.parametrize("run", [
    {"exit_code": 0, "output": "no answer\n", "timed_out": False},
    {"exit_code": 137, "output": "Killed\n", "timed_out": False},
    {"exit_code": -1, "output": "", "timed_out": True},
    {"exit_code": 0, "output": "x" * 100, "timed_out": False, "truncated": True},
])
def test_a_probe_that_gives_no_answer_is_exit_3(run: dict[str, Any],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/reference/exit-codes.md: 3 for a `fit` step that could not be measured (the probe
    failed or timed out); 1 means "does not fit a GPU", so a probe that died (a model calling
    os._exit, the OOM killer, a hang in the image) was read as a verdict."""
    from envbuild.engine import docker

    monkeypatch.setattr(docker, "run_container", lambda *a, **k: docker.RunResult(**run))
    with pytest.raises(EnvbuildError) as exc:
        fitprobe.measure_in_image("img:tag", job(), None, timeout=5)
    assert exc.value.exit_code == EXIT_CANNOT_RUN, exc.value.message


def test_a_model_that_ends_the_probe_is_exit_3(tmp_path: Path) -> None:
    entry = tmp_path / "gone.py"
    entry.write_text("import os\n\ndef build():\n    os._exit(0)\n")
    with pytest.raises(EnvbuildError) as exc:
        fitprobe.measure_here({**job(), "model": {"entry": f"{entry}:build"}}, timeout=60)
    assert exc.value.exit_code == EXIT_CANNOT_RUN, exc.value.message
