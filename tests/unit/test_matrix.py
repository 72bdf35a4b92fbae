"""The matrix data: the shipped files check clean; a corrupted copy fails with file and row."""

from __future__ import annotations

import shutil
from pathlib import Path

from envbuild.matrix import check, load
from tests.support import ROOT


def test_shipped_matrix_is_clean() -> None:
    assert check(ROOT / "matrix") == []


def test_every_source_is_described() -> None:
    m = load()
    for sid, src in m.sources.items():
        assert src.get("title") and src.get("url") is not None, sid


def test_sorted_rows_are_enforced(tmp_path: Path) -> None:
    d = tmp_path / "matrix"
    shutil.copytree(ROOT / "matrix", d)
    text = (d / "rocm.toml").read_text()
    first = text.index("[[release]]")
    second = text.index("[[release]]", first + 1)
    third = text.index("[[release]]", second + 1)
    swapped = text[:first] + text[second:third] + text[first:second] + text[third:]
    (d / "rocm.toml").write_text(swapped)
    assert any("out of order" in str(p) for p in check(d))
