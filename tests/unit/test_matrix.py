"""The matrix data: the shipped files check clean; a corrupted copy fails with file and row."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

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


def test_the_package_imports_point_one_way() -> None:
    """No module of envbuild.matrix imports the package (its __init__ only re-exports), and
    the imports between its modules, deferred ones included, form no cycle."""
    import ast
    import graphlib

    package = ROOT / "envbuild" / "matrix"
    graph: dict[str, set[str]] = {}
    for path in package.glob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
        if path.stem != "__init__":
            assert "envbuild.matrix" not in names, f"{path.name} imports the package"
        graph[path.stem] = {n.rsplit(".", 1)[1] for n in names
                            if n.startswith("envbuild.matrix.")} & {p.stem for p in
                                                                    package.glob("*.py")}
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError on a cycle


def test_check_stays_the_function_after_a_cold_load(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A load that misses the cache imports the checking modules: the package's `check` and
    `load` are still the functions, not submodules of those names."""
    import envbuild.matrix

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    shutil.copytree(ROOT / "matrix", tmp_path / "matrix")
    load(tmp_path / "matrix")
    assert callable(envbuild.matrix.check) and callable(envbuild.matrix.load)
    assert envbuild.matrix.check(tmp_path / "matrix") == []


def test_key_lookups_give_the_first_row_with_that_key_per_matrix_instance() -> None:
    """The one lookup rule (model._ByKey): the first row whose key equals the value, or None;
    the index belongs to its Matrix, so a replaced matrix looks up its own rows."""
    import dataclasses

    from hypothesis import given
    from hypothesis import strategies as st

    m = load()
    for name, table, key in (("cuda_release", "cuda", "version"),
                             ("cuda_history_row", "cuda_history", "version"),
                             ("compat_floor", "cuda_compat", "major"),
                             ("torch_release", "torch", "version"),
                             ("os_info", "oses", "id"), ("rocm_release", "rocm", "version"),
                             ("arch", "archs", "cc")):
        rows = getattr(m, table)
        for row in rows:
            want = next(r for r in rows if getattr(r, key) == getattr(row, key))
            assert getattr(m, name)(getattr(row, key)) is want, (name, row)
    first = m.cuda[0]
    twice = dataclasses.replace(m, cuda=(first, dataclasses.replace(first, latest="other")))
    assert twice.cuda_release(first.version) is first
    assert dataclasses.replace(m, cuda=()).cuda_release(first.version) is None
    assert m.cuda_release(first.version) is first  # the original keeps its own index

    @given(st.text(max_size=12))
    def unknown(value: str) -> None:
        if value not in {r.version for r in m.cuda}:
            assert m.cuda_release(value) is None

    unknown()
