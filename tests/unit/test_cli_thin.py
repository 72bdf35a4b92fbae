"""The command modules stay thin: each parses its options, calls one use case of the package and
prints. Checked on the source (AST), so a use case cannot creep back into envbuild/cli."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import ROOT

PACKAGE = ROOT / "envbuild"
CLI = PACKAGE / "cli"
COMMAND_MODULES = sorted(CLI.glob("*_cmd.py"))
# What only a use case touches: the engine (Docker, builds, registries), processes, the writer of
# output trees. A command module reaches them through features/, doctor/, cluster/, core/, render/.
FORBIDDEN = ("envbuild.engine", "envbuild.common.proc", "envbuild.common.outputs")
FORBIDDEN_NAMES = {"write_tree"}  # the one tree writer: a use case calls it, never a command
FILE_CALLS = {"write_text", "write_bytes", "mkdir", "rmtree", "rename", "unlink", "mkdtemp",
              "copyfile", "copytree"}
# The longest function of a command module has about 30 statements (render: its options, one
# call, the summary); the use cases that used to live here had 80 and more.
MAX_STATEMENTS = 35


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _runtime_imports(tree: ast.Module) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every import that runs: `if TYPE_CHECKING:` blocks left out
    (annotations only, nothing of the engine is loaded or called through them)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module, [a.name for a in node.names]))
    return found


def _forbidden(module: str, names: list[str]) -> str | None:
    for f in FORBIDDEN:
        if module == f or module.startswith(f + "."):
            return module
        parent, leaf = f.rsplit(".", 1)
        if module == parent and leaf in names:  # from envbuild import engine
            return f
    hit = FORBIDDEN_NAMES.intersection(names)
    return f"{module}.{hit.pop()}" if hit else None


def _file_calls(tree: ast.Module) -> list[tuple[int, str]]:
    return [(n.lineno, n.func.attr) for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr in FILE_CALLS]


def _statements(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    return sum(isinstance(n, ast.stmt) for n in ast.walk(fn)) - 1  # the def itself left out


def test_there_are_command_modules() -> None:
    assert len(COMMAND_MODULES) >= 8, COMMAND_MODULES


@pytest.mark.parametrize("path", COMMAND_MODULES, ids=lambda p: p.name)
def test_command_modules_import_no_engine_process_or_writer(path: Path) -> None:
    bad = [f"{path.name}:{line}: {hit}" for line, module, names in _runtime_imports(_tree(path))
           if (hit := _forbidden(module, names))]
    assert not bad, "a command module calls a use case instead: " + "; ".join(bad)


@pytest.mark.parametrize("path", COMMAND_MODULES, ids=lambda p: p.name)
def test_command_modules_write_no_files(path: Path) -> None:
    bad = [f"{path.name}:{line}: .{attr}()" for line, attr in _file_calls(_tree(path))]
    assert not bad, "files are written by a use case of the package: " + "; ".join(bad)


@pytest.mark.parametrize("path", COMMAND_MODULES, ids=lambda p: p.name)
def test_command_functions_stay_small(path: Path) -> None:
    big = [f"{path.name}:{n.lineno} {n.name}: {_statements(n)} statements"
           for n in ast.walk(_tree(path))
           if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
           and _statements(n) > MAX_STATEMENTS]
    assert not big, f"over {MAX_STATEMENTS} statements (move the use case into the package): " \
        + "; ".join(big)


def test_only_the_cli_knows_typer_and_click() -> None:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if CLI in path.parents:
            continue
        for line, module, _ in _runtime_imports(_tree(path)):
            if module.split(".")[0] in ("typer", "click"):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {module}")
    assert not bad, bad


def test_the_checks_catch_a_use_case_in_a_command(tmp_path: Path) -> None:
    source = ("from envbuild.engine import docker\nfrom envbuild import engine\n"
              "from envbuild.render.context import write_tree\n"
              "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
              "    from envbuild.engine.validate import Validation\n"
              "def f(p):\n    p.write_text('x')\n"
              + "".join(f"    x{i} = {i}\n" for i in range(40)))
    tree = ast.parse(source)
    hits = [h for _, m, names in _runtime_imports(tree) if (h := _forbidden(m, names))]
    assert hits == ["envbuild.engine", "envbuild.engine", "envbuild.render.context.write_tree"]
    assert [attr for _, attr in _file_calls(tree)] == ["write_text"]
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))
    assert _statements(fn) > MAX_STATEMENTS
