"""The suite's own layout: tests sorted by kind, helpers in tests/support (never in a test module),
and the run order set by tests/conftest.py, not by file names."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import TESTS

KINDS = ("unit", "cli", "integration")
TEST_FILES = sorted(TESTS.rglob("test_*.py"))
TEST_MODULE = re.compile(r"(^|\.)(test_\w+|conftest)$")


def _imported_modules(path: Path) -> list[str]:
    """Every module a file imports, spelled out (`from tests import test_x` -> tests.test_x)."""
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            out.append(base)
            out += [f"{base}.{a.name}" for a in node.names]
    return out


def test_the_test_files_are_found() -> None:
    assert len(TEST_FILES) > 50


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: str(p.relative_to(TESTS)))
def test_no_test_module_imports_another(path: Path) -> None:
    """Shared helpers live in tests/support and shared fixtures in a conftest.py: importing a test
    module (or a conftest) runs its collection-time code twice and ties the files together."""
    bad = [m for m in _imported_modules(path) if TEST_MODULE.search(m.lstrip("."))]
    assert bad == [], f"{path.relative_to(TESTS)} imports {bad}: move the helper to tests/support"


def test_every_test_file_sits_in_its_kind() -> None:
    flat = [p.relative_to(TESTS) for p in TEST_FILES if p.parent.name not in KINDS]
    assert flat == [], "test files go in tests/unit, tests/cli or tests/integration"
    for kind in KINDS:
        assert (TESTS / kind / "conftest.py").is_file(), kind


@pytest.mark.parametrize("kind", ["unit", "cli"])
def test_docker_tests_are_integration_tests(kind: str) -> None:
    def docker_marked(path: Path) -> bool:
        return any(isinstance(n, ast.Attribute) and n.attr == "docker"
                   and isinstance(n.value, ast.Attribute) and n.value.attr == "mark"
                   for n in ast.walk(ast.parse(path.read_text())))

    marked = [p.name for p in sorted((TESTS / kind).glob("test_*.py")) if docker_marked(p)]
    assert marked == [], f"docker-marked tests in tests/{kind}: they belong in tests/integration"


@dataclass
class _Item:
    name: str
    marks: set[str] = field(default_factory=set)
    module: str = "test_x.py"

    @property
    def path(self) -> Path:
        return Path("/tests/integration") / self.module

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.marks else None


def test_slow_tests_run_after_the_others_and_the_leak_check_last(
        pytestconfig: pytest.Config) -> None:
    top = TESTS / "conftest.py"
    [conftest] = [p for p in pytestconfig.pluginmanager.get_plugins()
                  if getattr(p, "__file__", None) == str(top)]
    items = [_Item("leaks", {"docker", "leak_check"}), _Item("build", {"docker", "slow"}),
             _Item("pure"), _Item("engine", {"docker"}), _Item("image", {"slow"}),
             _Item("multi", {"slow"}, "test_team_multiarch.py"), _Item("cli"),
             _Item("cuda", {"slow"}, "test_cuda_image.py")]
    conftest.pytest_collection_modifyitems(None, None, items)
    assert [i.name for i in items] == ["pure", "engine", "cli", "cuda", "multi", "build", "image",
                                       "leaks"]  # the CUDA image modules first of the slow ones
