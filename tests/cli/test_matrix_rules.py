"""Mutation tests: copy the real matrix, corrupt one fact, `matrix check` must name the row."""

from __future__ import annotations

import json
from pathlib import Path

from envbuild.matrix import load
from envbuild.matrix.rules import unverified
from tests.support import run_cli
from tests.support.matrix_rules import MUTATIONS, _mutated


def test_unverified_rows_are_listed() -> None:
    rows = unverified(load())
    assert rows and all(f.endswith(".toml") and r.startswith("[[") for f, r, _ in rows)
    r = run_cli("matrix", "check", "--unverified", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["unverified_count"] == len(rows) == len(data["unverified"])
    text = run_cli("matrix", "check")
    assert text.returncode == 0 and f"{len(rows)} unverified" in text.stdout
    listing = run_cli("matrix", "check", "--unverified")
    assert sum(1 for line in listing.stdout.splitlines() if "[[" in line) == len(rows)


def test_cli_check_names_the_row_of_a_mutation(tmp_path: Path) -> None:
    _id, file, pattern, repl, expected = MUTATIONS[0]
    d = _mutated(tmp_path, file, pattern, repl)
    r = run_cli("matrix", "check", "--dir", str(d))
    assert r.returncode == 1 and expected in r.stdout and "Traceback" not in r.stderr
