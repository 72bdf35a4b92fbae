"""memory.estimate (issue 28): fit's measured figure of a reference step against the step's real
peak. The judge is pure (every verdict tested here); the check itself judges on a GPU only, so on
this CPU host it skips saying what was not checked, and the machinery it runs (the reference step
through memprobe, fake then real) is shown on the CPU, where the real figure is MemTracker's."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envbuild.validator import memory_check
from envbuild.validator.checks import CHECK_IDS, CHECKS
from envbuild.validator.context import Options, TorchContext
from envbuild.validator.judges import (
    EMULATION_NOT_RUN,
    GPU_ONLY_CHECKS,
    MEMORY_TOLERANCE,
    judge_memory_estimate,
    make_check,
    memory_probe_refused,
)

GIB = 1 << 30
SMALL = {"vocab": 256, "width": 64, "layers": 2, "heads": 4, "batch": 2, "seq": 32}


def test_the_check_is_a_gpu_only_torch_row() -> None:
    row = {c.id: c for c in CHECKS}["memory.estimate"]
    assert row.torch is memory_check.t_memory_estimate and row.host is None
    assert "memory.estimate" in GPU_ONLY_CHECKS and "memory.estimate" in EMULATION_NOT_RUN
    assert CHECK_IDS[-1] == "memory.estimate"
    assert MEMORY_TOLERANCE == 0.10  # the "within 10%"


def test_within_the_tolerance_passes_with_the_numbers() -> None:
    out = judge_memory_estimate(int(1.37 * GIB), int(1.40 * GIB), evidence={"torch": "2.11.0"})
    assert out.status == "pass"
    assert out.evidence["ratio"] == pytest.approx(1.37 / 1.40, abs=1e-4)
    assert out.evidence["estimate_bytes"] == int(1.37 * GIB)
    assert out.evidence["real_bytes"] == int(1.40 * GIB)
    assert out.evidence["torch"] == "2.11.0" and out.evidence["tolerance"] == 0.10
    assert "1.37 GiB" in out.detail and "1.40 GiB" in out.detail and "within 10%" in out.detail


def test_an_underestimate_warns_that_jobs_may_run_out_of_memory() -> None:
    out = judge_memory_estimate(80, 100)
    assert out.status == "warn" and out.evidence["ratio"] == 0.8
    assert "underestimates" in out.remediation and "1.25x" in out.remediation
    assert "out of memory" in out.remediation


def test_an_overestimate_warns_the_other_way() -> None:
    out = judge_memory_estimate(120, 100)
    assert out.status == "warn" and "overestimates" in out.remediation and "20%" in out.remediation


@pytest.mark.parametrize(("estimate", "real"), [(0, 100), (100, 0), (-5, 100), (0, 0)])
def test_no_peak_is_no_pass(estimate: int, real: int) -> None:
    out = judge_memory_estimate(estimate, real)
    assert out.status == "warn" and out.evidence["ratio"] is None and out.remediation


@given(st.integers(1, 1 << 44), st.integers(1, 1 << 44))
def test_the_verdict_is_the_ratio_against_the_tolerance(estimate: int, real: int) -> None:
    out = judge_memory_estimate(estimate, real)
    row = make_check("memory.estimate", "t", out, 0.0)
    assert (row["status"] == "pass") == (abs(estimate / real - 1) <= MEMORY_TOLERANCE)
    assert row["status"] in ("pass", "warn") and row["evidence"]["ratio"] is not None
    assert row["status"] == "pass" or row["remediation"] != "see evidence"


@pytest.mark.parametrize(("stage", "code", "status", "says"), [
    ("fake", "no-memtracker", "skip", "cannot run on this torch"),
    ("fake", "no-torch", "skip", "cannot run on this torch"),
    ("fake", "untraceable", "warn", "cannot trace the reference step"),
    ("real", "out-of-memory", "skip", "free the GPU"),
    ("real", "failed", "warn", "failed on the GPU"),
])
def test_a_probe_that_cannot_run_says_which_part(stage: str, code: str, status: str,
                                                 says: str) -> None:
    out = memory_probe_refused(stage, code, "what torch said")
    assert out.status == status and says in out.detail + out.reason
    assert out.evidence == {"stage": stage, "code": code, "message": "what torch said"}
    if status == "skip":
        assert "max_memory_allocated" in out.reason or "free the GPU" in out.reason


# -- on this host's CPU torch -------------------------------------------------------------------


def test_without_a_gpu_it_skips_saying_what_was_not_checked() -> None:
    pytest.importorskip("torch")
    ctx = TorchContext({}, None, Options())
    ctx.import_torch()
    out = memory_check.t_memory_estimate(ctx)
    assert out.status == "skip"
    assert out.reason.startswith("no GPU visible")
    assert "max_memory_allocated()" in out.reason and "reference training step" in out.reason


def test_require_gpu_turns_the_skip_into_a_failure() -> None:
    pytest.importorskip("torch")
    ctx = TorchContext({}, None, Options(require_gpu=True))
    ctx.import_torch()
    assert memory_check.t_memory_estimate(ctx).status == "fail"


def test_the_reference_step_fake_and_real_agree_on_the_cpu() -> None:
    """The machinery the GPU check runs, shown on the CPU: the same entry through memprobe under
    fake tensors and on real ones (MemTracker's real figure here), judged by the same judge."""
    torch = pytest.importorskip("torch")
    path, dtype = list(sys.path), torch.get_default_dtype()
    with memory_check._entry_file(memory_check.reference_source(SMALL)) as entry:
        fake = memory_check.run_step(entry, real=False, device="cpu")
        real = memory_check.run_step(entry, real=True, device="cpu")
    assert sys.path == path and "envbuild_fit_entry" not in sys.modules
    assert torch.get_default_dtype() == dtype
    assert fake["how"].startswith("fake CPU 2 training steps")
    assert real["how"].startswith("real CPU 2 training steps")
    assert fake["params"] == real["params"] == (
        2 * 256 * 64 + 2 * 64 + 2 * (12 * 64 * 64 + 4 * 64))  # embed, head, norms, blocks
    states = 2 * 2 * fake["params"]  # bf16 AdamW: 2 states, and a 4-byte step per tensor
    assert states < fake["components"]["optimizer"] <= states + 4 * 20
    out = judge_memory_estimate(fake["peak_bytes"], real["peak_bytes"])
    assert out.status == "pass", out.detail


def test_the_gpu_reference_step_is_about_a_gibibyte_and_a_half() -> None:
    """The reference size the check runs on a GPU, measured here under fake tensors (seconds)."""
    pytest.importorskip("torch")
    with memory_check._entry_file(memory_check.reference_source()) as entry:
        fake = memory_check.run_step(entry, real=False, device="cpu")
    assert fake["params"] == 67_127_296
    assert 1.0 * GIB < fake["peak_bytes"] < 2.0 * GIB
