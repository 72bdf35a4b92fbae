"""One voice: every command envbuild prints as a suggestion resolves when run.

Refusals carry alternatives (with their changes as data), doctor recommends a command, explain's
fixes quote commands, hints and the README show commands. Each is generated over the matrix
(GPUs x drivers x torch x CUDA) and run back through the CLI's own `resolve`.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from envbuild.core.request import Request
from envbuild.core.resolve import resolve
from envbuild.matrix import Matrix
from tests.support import one_voice as shared
from tests.support.one_voice import (
    DOCTOR,
    _readme_commands,
)

m = shared.m  # a fixture, shared with the other kind's test_one_voice.py


def test_h100_on_535_agrees_with_resolve(m: Matrix, tmp_path: Path) -> None:
    """The reported case: doctor said torch 2.5 where resolve gives the newest torch."""
    import shutil

    from envbuild.doctor import evaluate, record

    d = tmp_path / "h535"
    shutil.copytree(DOCTOR / "h100-healthy", d)
    for p in d.rglob("*"):
        if p.is_file():
            with contextlib.suppress(UnicodeDecodeError):
                p.write_text(p.read_text().replace("580.95.05", "535.104.05"))
    _, rec = evaluate.diagnose(record.load(d), m)
    spec = resolve(Request(driver="535.104.05", gpus=("sm_90",)), m)
    assert rec.command == "envbuild make --target cuda --driver 535.104.05 --gpu sm_90"
    assert f"torch {spec.torch} ({spec.variant})" in rec.reason


def test_readme_has_commands_to_check() -> None:
    assert len(_readme_commands()) >= 10
