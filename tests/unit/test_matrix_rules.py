"""Mutation tests: copy the real matrix, corrupt one fact, `matrix check` must name the row."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.matrix import check, load
from envbuild.matrix.rules import semantic_check
from tests.support.matrix_rules import MUTATIONS, _mutated


@pytest.mark.parametrize(("file", "pattern", "repl", "expected"),
                         [m[1:] for m in MUTATIONS], ids=[m[0] for m in MUTATIONS])
def test_mutation_is_caught(tmp_path: Path, file: str, pattern: str, repl: str,
                            expected: str) -> None:
    d = _mutated(tmp_path, file, pattern, repl)
    problems = [str(p) for p in check(d)]
    assert any(expected in p for p in problems), "\n".join(problems) or "no problem reported"


def test_enough_mutations() -> None:
    assert len({m[0] for m in MUTATIONS}) >= 15


def test_shipped_matrix_passes_semantic_rules() -> None:
    assert semantic_check(load()) == []
