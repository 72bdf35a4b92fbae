"""The matrix data: the shipped files check clean; a corrupted copy fails with file and row."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from envbuild.common.errors import MatrixError
from envbuild.matrix import Matrix, check, load
from tests.support import ROOT, run_cli


def _corrupt(tmp_path: Path) -> Path:
    d = tmp_path / "matrix"
    shutil.copytree(ROOT / "matrix", d)
    torch = (d / "torch.toml").read_text()
    # a variant pointing at a CUDA release that does not exist
    torch = torch.replace('tag = "cu121"\nkind = "cuda"\nversion = "12.1"',
                          'tag = "cu127"\nkind = "cuda"\nversion = "12.7"', 1)
    (d / "torch.toml").write_text(torch)
    cuda = (d / "cuda.toml").read_text()
    # a source id nobody defined, and a key the schema does not know
    cuda = re.sub(r'source = \["S-NV-RN-13.2.2"', 'source = ["S-NOWHERE"', cuda, count=1)
    cuda = cuda.replace('[[release]]\n', '[[release]]\nbogus = 1\n', 1)
    (d / "cuda.toml").write_text(cuda)
    gpus = (d / "gpus.toml").read_text()
    (d / "gpus.toml").write_text(gpus + '\n[[gpu]]\nname = "H100"\nvendor = "nvidia"\ncc = "9.9"'
                                 '\nsource = ["S-NV-CUDA-GPUS"]\n')
    return d


def test_corrupted_copy_reports_all_problems(tmp_path: Path) -> None:
    d = _corrupt(tmp_path)
    problems = [str(p) for p in check(d)]
    text = "\n".join(problems)
    assert "torch.toml: [[variant]] (release=" in text
    assert "CUDA '12.7' is not a [[release]]" in text
    assert "source 'S-NOWHERE' is not defined in sources.toml" in text
    assert "unknown key 'bogus'" in text
    assert "name 'H100' also used by" in text and "compute capability '9.9'" in text
    with pytest.raises(MatrixError):
        load(d)
    r = run_cli("matrix", "check", "--dir", str(d), "--json")
    assert r.returncode == 1
    data = json.loads(r.stdout)
    assert data["ok"] is False and len(data["problems"]) >= 5
    assert all(p["file"].endswith(".toml") and p["row"] for p in data["problems"])


@pytest.mark.parametrize("table", ["cuda", "torch", "gpus", "rocm", "os"])
def test_show_tables(table: str) -> None:
    r = run_cli("matrix", "show", table)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) > 5
    j = run_cli("matrix", "show", table, "--json")
    rows = json.loads(j.stdout)
    assert rows and isinstance(rows[0], dict)


@pytest.mark.parametrize("table", ["cuda", "torch", "gpus", "rocm", "os"])
def test_show_json_is_data_without_display_marks(table: str, matrix: Matrix) -> None:
    """--json carries data only: `verified` a boolean, variant tags as the matrix has them (the
    unverified ones listed apart); the `*` of the text view marks exactly those facts."""
    from envbuild.matrix.views import MARK

    rows = json.loads(run_cli("matrix", "show", table, "--json").stdout)
    text = run_cli("matrix", "show", table).stdout.splitlines()

    def strings(value: object) -> list[str]:
        if isinstance(value, str):
            return [value]
        if isinstance(value, list):
            return [s for v in value for s in strings(v)]
        if isinstance(value, dict):
            return [s for v in value.values() for s in strings(v)]
        return []

    assert [s for s in strings(rows) if MARK in s] == []
    assert all(isinstance(r["verified"], bool) for r in rows)
    assert sum(not r["verified"] for r in rows) == sum(
        ln.rstrip().endswith(MARK) for ln in text[2:-1])
    if table == "torch":
        tags = {v.tag for v in matrix.variants}
        unverified = {(v.release, v.tag) for v in matrix.variants if not v.verified}
        assert unverified  # the matrix has some: the check below is not vacuous
        for r in rows:
            assert set(r["variants"]) <= tags
            assert {(r["torch"], t) for t in r["unverified_variants"]} == \
                {u for u in unverified if u[0] == r["torch"]}
            line = next(ln for ln in text if ln.startswith(r["torch"] + " "))
            for t in r["variants"]:
                marked = f"{t}{MARK}" in line.split()[5].split(",")
                assert marked == (t in r["unverified_variants"]), (t, line)


def test_unverified_facts_stay_visible() -> None:
    r = run_cli("matrix", "show", "gpus")
    assert "*" in r.stdout and "not verified" in r.stdout
