"""Every error is one `error:` line plus a `hint:` and a documented exit code (README, Exit
codes): proved twice. Statically, every construction of an envbuild error in envbuild/ passes a
non-empty hint (the hint is also a required argument, so mypy refuses a call without one). At the
CLI, a generated table of malformed values for every validated option of every command, and
click's own usage errors, each come out as one `error:` line, a `hint:` line and exit 2."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import ROOT

PACKAGE = ROOT / "envbuild"
BASE = "EnvbuildError"
DEFAULT_HINT = {"MatrixError"}  # its default hint: run `envbuild matrix check`


# ---------------------------------------------------------------- static: every construction


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def error_classes(trees: dict[str, ast.Module]) -> set[str]:
    """EnvbuildError and every class that derives from it, in any module."""
    found = {BASE}
    grew = True
    while grew:
        grew = False
        for tree in trees.values():
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name not in found and \
                        any(_name(b) in found for b in node.bases):
                    found.add(node.name)
                    grew = True
    return found


def _hint_arg(call: ast.Call) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == "hint":
            return kw.value
    return call.args[1] if len(call.args) > 1 else None


def _empty(node: ast.expr | None) -> bool:
    if node is None:
        return True
    if isinstance(node, ast.Constant):
        return not node.value
    return isinstance(node, ast.JoinedStr) and not node.values


def missing_hints(trees: dict[str, ast.Module]) -> tuple[int, list[str]]:
    """(how many error constructions there are, those without a non-empty hint)."""
    classes = error_classes(trees)
    count, bad = 0, []
    for path, tree in sorted(trees.items()):
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or _name(node.func) not in classes:
                continue
            count += 1
            if _name(node.func) in DEFAULT_HINT and _hint_arg(node) is None:
                continue
            if any(isinstance(a, ast.Starred) for a in node.args) or \
                    any(kw.arg is None for kw in node.keywords):
                continue  # forwarded arguments: the hint comes from a checked construction
            if _empty(_hint_arg(node)):
                bad.append(f"{path}:{node.lineno}: {ast.unparse(node)[:120]}")
    return count, bad


def _trees(root: Path) -> dict[str, ast.Module]:
    return {str(p.relative_to(ROOT)): ast.parse(p.read_text(), str(p))
            for p in sorted(root.rglob("*.py"))}


def test_every_error_envbuild_raises_has_a_hint() -> None:
    count, bad = missing_hints(_trees(PACKAGE))
    assert count > 250  # the scan sees them all (a scan that finds none proves nothing)
    assert bad == []


@pytest.mark.parametrize(("source", "flagged"), [
    ("raise UsageError('no hint')", True),
    ("raise UsageError('empty', '')", True),
    ("raise ConflictError('empty f', f'')", True),
    ("raise Mine('sub-subclass without a hint')", True),
    ("raise errors.EnvironmentProblem('attribute call')", True),
    ("raise UsageError('kw', hint='')", True),
    ("raise UsageError('ok', 'do this')", False),
    ("raise UsageError('ok', hint=f'do {x}')", False),
    ("raise MatrixError('default hint')", False),
    ("raise MatrixError('empty hint', '')", True),
])
def test_the_scan_catches_a_missing_hint(tmp_path: Path, source: str, flagged: bool) -> None:
    code = ("class Sub(EnvbuildError): pass\nclass Mine(Sub): pass\n"
            f"def f(x):\n    {source}\n")
    errors = PACKAGE / "common" / "errors.py"  # the real class family, and a test module
    count, bad = missing_hints({"errors.py": ast.parse(errors.read_text()),
                                "m.py": ast.parse(code)})
    assert count == 1 and bool(bad) == flagged


# ---------------------------------------------------------------- the CLI: generated bad values


@dataclass(frozen=True)
class Bad:
    cmd: tuple[str, ...]
    option: str
    value: str
