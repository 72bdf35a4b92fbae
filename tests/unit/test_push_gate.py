"""--push and a team file's push_requires: what a GPU image's validation must have shown (pure)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from envbuild.common.errors import UsageError
from envbuild.engine.validate import Validation
from envbuild.features.make import Checked, gate
from envbuild.features.teamfile import parse


def _checked(report: dict[str, Any], code: int = 0) -> Checked:
    return Checked(Validation(report, code, False, ""), False, datetime.now(UTC))


GPU_LESS = {"spec": {"target": "cuda"}, "checks": [],
            "gpu_less": {"facts": 24, "not_run": ["device.count"], "cpu_only": []}}
ON_GPU = {"spec": {"target": "cuda"}, "checks": [
    {"id": "device.properties", "status": "pass", "evidence": {"devices": [{"name": "H100"}]}}]}
CPU = {"spec": {"target": "cpu"}, "checks": []}


def test_push_requires_gpu_holds_back_a_gpu_less_validation() -> None:
    reg = "127.0.0.1:5000"
    assert "without a GPU" in gate(reg, _checked(GPU_LESS), False, requires_gpu=True)
    assert gate(reg, _checked(GPU_LESS), False, requires_gpu=False) == ""
    assert gate(reg, _checked(ON_GPU), False, requires_gpu=True) == ""
    assert gate(reg, _checked(CPU), False, requires_gpu=True) == ""  # a CPU image needs none
    assert gate(reg, _checked(GPU_LESS, 1), False, requires_gpu=True) == "validation failed"
    assert gate(reg, _checked(GPU_LESS), True, requires_gpu=True) == ""  # --push-unvalidated


def test_team_file_push_requires(tmp_path: Path) -> None:
    text = '[defaults]\npush_requires = "gpu"\n[image.h100]\ntarget = "cuda"\n' \
           '[image.ci]\ntarget = "cpu"\npush_requires = "validation"\n'
    tf = parse(text, tmp_path / "envbuild.toml")
    assert tf.image("h100").push_requires_gpu and not tf.image("ci").push_requires_gpu
    with pytest.raises(UsageError) as info:
        parse('[image.a]\npush_requires = "always"\n', tmp_path / "envbuild.toml")
    assert "push_requires" in info.value.message
