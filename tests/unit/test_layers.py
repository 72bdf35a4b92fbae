"""The package's shape, read from the code (AST, nothing imported): imports only point down the
layers, no two modules import each other (directly or round a circle), and the single doors hold:
only common/proc runs processes, only engine/docker knows Docker, only cli knows typer/click, the
validator and the cluster worker stand alone. docs/development/architecture.md draws the same
picture."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import ROOT

PKG = ROOT / "envbuild"

# Low -> high. A module may import its own package and any package below it. `envbuild` itself
# (the package face: __version__) is below all; the entry points (__main__, and _start, which
# the script names: it must run before the cli package is imported) are above all.
ENTRIES = ("envbuild.__main__", "envbuild._start")
LAYERS = ("validator", "common", "matrix", "core", "render", "engine", "doctor", "features",
          "cluster", "cli")
RANK = {name: i for i, name in enumerate(LAYERS)}

# Programs of their own, shipped into images and pods: they import nothing of envbuild but
# themselves (the validator: stdlib + torch, checked below).
STANDALONE = {"envbuild.validator": "envbuild.validator",
              "envbuild.cluster.worker": "envbuild.cluster.worker",
              "envbuild.engine.sbom_probe": "envbuild.engine.sbom_probe"}

# The single doors: (module names that may import it, the modules it names).
DOORS = {
    "processes": ({"envbuild.common.proc"}, {"subprocess", "pty", "multiprocessing"}),
    "Docker": ({"envbuild.engine.docker"}, {"docker"}),
    "the command line": ({"envbuild.cli"}, {"typer", "click"}),
}
PROCESS_CALLS = {("os", name) for name in (
    "system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp", "execl", "execle",
    "execlp", "execlpe", "execv", "execve", "execvp", "execvpe", "spawnl", "spawnle", "spawnlp",
    "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe")} | {
    ("asyncio", "create_subprocess_exec"), ("asyncio", "create_subprocess_shell")}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    target: str  # the imported module (or package), dotted
    line: int


def module_name(path: Path, root: Path = PKG) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = PKG) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def _absolute(mod: str, is_pkg: bool, level: int, name: str | None) -> str:
    if not level:
        return name or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def imports_of(mod: str, path: Path, known: set[str]) -> Iterator[Import]:
    """Every import in the file, wherever it sits (a function's lazy import counts as much)."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield Import(mod, a.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(mod, is_pkg, node.level, node.module)
            for a in node.names:
                sub = f"{base}.{a.name}"
                yield Import(mod, sub if sub in known else base, node.lineno)


def layer_of(name: str) -> str | None:
    """The layer of an envbuild module: its first package under envbuild."""
    parts = name.split(".")
    if parts[0] != "envbuild":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in RANK else None


def upward(imports: list[Import]) -> list[str]:
    bad = []
    for i in imports:
        if not i.target.startswith("envbuild") or i.module in ENTRIES:
            continue
        if i.target == "envbuild":
            continue  # the face: __version__
        src, dst = layer_of(i.module), layer_of(i.target)
        if src is None or dst is None:
            bad.append(f"{i.module}:{i.line} imports {i.target}: outside the layers")
        elif RANK[dst] > RANK[src]:
            bad.append(f"{i.module}:{i.line} ({src}) imports {i.target} ({dst}): upward")
    return bad


def cycles(imports: list[Import]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {}
    for i in imports:
        if i.target.startswith("envbuild") and i.target != i.module:
            graph.setdefault(i.module, set()).add(i.target)
            graph.setdefault(i.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    top = stack.pop()
                    on.discard(top)
                    group.append(top)
                    if top == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def door_breaches(imports: list[Import], calls: list[tuple[str, int, str]]) -> list[str]:
    bad = []
    for door, (owners, names) in DOORS.items():
        for i in imports:
            top = i.target.split(".")[0]
            if top not in names or any(i.module.startswith(s) for s in STANDALONE):
                continue
            if not any(i.module == o or i.module.startswith(o + ".") for o in owners):
                bad.append(f"{i.module}:{i.line} imports {i.target}: only "
                           f"{', '.join(sorted(owners))} may reach {door}")
    bad += [f"{mod}:{line} calls {call}: only envbuild.common.proc runs processes"
            for mod, line, call in calls
            if mod != "envbuild.common.proc" and not any(mod.startswith(s) for s in STANDALONE)]
    return bad


def process_calls(mod: str, path: Path) -> Iterator[tuple[str, int, str]]:
    """`os.system(...)` and the like, also as `import os as o` / `from os import system`."""
    tree = ast.parse(path.read_text(), str(path))
    aliases = {a.asname or a.name: a.name for node in ast.walk(tree)
               if isinstance(node, ast.Import) for a in node.names}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and (aliases.get(node.value.id, node.value.id), node.attr) in PROCESS_CALLS):
            yield mod, node.lineno, f"{aliases.get(node.value.id, node.value.id)}.{node.attr}"
        elif isinstance(node, ast.ImportFrom) and node.module in ("os", "asyncio"):
            for a in node.names:
                if (node.module, a.name) in PROCESS_CALLS:
                    yield mod, node.lineno, f"{node.module}.{a.name}"


def standalone_breaches(imports: list[Import]) -> list[str]:
    allowed_outside = set(sys.stdlib_module_names) | {"torch", "__future__"}
    bad = []
    for i in imports:
        for prefix, own in STANDALONE.items():
            if not (i.module == prefix or i.module.startswith(prefix + ".")):
                continue
            top = i.target.split(".")[0]
            if i.target.startswith("envbuild"):
                if not (i.target == own or i.target.startswith(own + ".")):
                    bad.append(f"{i.module}:{i.line} imports {i.target}: {prefix} stands alone")
            elif top not in allowed_outside:
                bad.append(f"{i.module}:{i.line} imports {i.target}: {prefix} is stdlib + torch")
    return bad


def _all(root: Path = PKG) -> tuple[list[Import], list[tuple[str, int, str]]]:
    mods = modules(root)
    known = set(mods)
    imports = [i for m, p in mods.items() for i in imports_of(m, p, known)]
    calls = [c for m, p in mods.items() for c in process_calls(m, p)]
    return imports, calls


ARCHITECTURE = PKG.parent / "docs" / "development" / "architecture.md"


def documented_modules(page: str) -> dict[str, set[str]]:
    """The package table of the architecture page: package -> the names its row lists
    (`model`, and `judges/` for a subpackage)."""
    rows: dict[str, set[str]] = {}
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"`[a-z_]+/`", cells[0]):
            rows[cells[0].strip("`/")] = set(re.findall(r"`([a-z_]+/?)`", cells[1]))
    return rows


def test_architecture_page_names_every_module() -> None:
    rows = documented_modules(ARCHITECTURE.read_text())
    missing = []
    for name in modules():
        parts = name.split(".")[1:]
        if len(parts) < 2 or parts[-1] in ("__main__",):
            continue  # the package face, a layer's own face
        pkg, rest = parts[0], parts[1:]
        listed = rows.get(pkg, set())
        if not (rest[0] in listed or f"{rest[0]}/" in listed):
            missing.append(name)
    assert sorted(rows) == sorted(LAYERS)
    assert missing == [], f"docs/development/architecture.md does not name {missing}"


def test_every_module_sits_in_a_layer() -> None:
    assert len(modules()) > 100  # the scan reads the package (a wrong root would pass vacuously)
    loose = [m for m in modules() if m not in ("envbuild", *ENTRIES) and layer_of(m) is None]
    assert not loose, f"modules outside the layers {LAYERS}: {loose}"


def test_imports_only_point_down() -> None:
    imports, _ = _all()
    assert upward(imports) == []


def test_no_import_cycle() -> None:
    imports, _ = _all()
    assert cycles(imports) == []


def test_single_doors() -> None:
    imports, calls = _all()
    assert door_breaches(imports, calls) == []


def test_standalone_programs_import_nothing_of_envbuild() -> None:
    imports, _ = _all()
    assert standalone_breaches(imports) == []


# --- the checks themselves fail on what they look for --------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "envbuild"
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for d in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        (d / "__init__.py").touch()
    return root


@pytest.mark.parametrize(("files", "expect"), [
    ({"core/a.py": "from envbuild.engine import docker\n", "engine/docker.py": ""},
     "upward"),
    ({"core/a.py": "def f():\n    from envbuild.cli import app\n", "cli/app.py": ""},
     "upward"),
    ({"core/a.py": "from ..engine import docker\n", "engine/docker.py": ""}, "upward"),
    ({"stray.py": "from envbuild.core import a\n", "core/a.py": ""}, "outside"),
])
def test_layer_check_catches(tmp_path: Path, files: dict[str, str], expect: str) -> None:
    imports, _ = _all(_tree(tmp_path, files))
    assert any(expect in b for b in upward(imports)), upward(imports)


def test_cycle_check_catches(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"core/a.py": "from envbuild.core import b\n",
                            "core/b.py": "def f():\n    from envbuild.core.c import x\n",
                            "core/c.py": "import envbuild.core.a\n"})
    imports, _ = _all(root)
    assert cycles(imports) == [["envbuild.core.a", "envbuild.core.b", "envbuild.core.c"]]


def test_door_check_catches(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"core/a.py": "import subprocess\nimport os\nos.system('x')\n",
                            "core/d.py": "from os import execvp\nimport os as o\no.posix_spawn()\n",
                            "features/b.py": "def f():\n    import docker.errors\n",
                            "core/c.py": "from typer import Option\n",
                            "validator/v.py": "import subprocess\nfrom envbuild.core import a\n"
                                              "import requests\n"})
    imports, calls = _all(root)
    text = "\n".join(door_breaches(imports, calls) + standalone_breaches(imports))
    for needle in ("envbuild.core.a:1 imports subprocess", "envbuild.core.a:3 calls os.system",
                   "envbuild.features.b:2 imports docker.errors", "envbuild.core.c:1 imports typer",
                   "envbuild.validator.v:2 imports envbuild.core.a",
                   "envbuild.validator.v:3 imports requests", "envbuild.core.d:1 calls os.execvp",
                   "envbuild.core.d:3 calls os.posix_spawn"):
        assert needle in text, text
    assert "validator.v:1 imports subprocess" not in text  # the validator is its own program


def test_every_source_path_the_repo_names_exists() -> None:
    """A module or test named by path in the docs, the matrix, the code or the tests is where
    it says (a regrouping or a split left 15 such names behind once)."""
    named = re.compile(r"(?<![\w/.-])((?:envbuild|tests)/[\w/]*\w\.py)\b")
    texts = [ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("matrix/*"),
             *ROOT.glob("envbuild/**/*.py"), *ROOT.glob("tests/**/*.py"), ROOT / "Makefile"]
    missing = sorted({f"{path} (named in {text.relative_to(ROOT)})"
                      for text in texts if text.is_file() and "__pycache__" not in text.parts
                      for path in named.findall(text.read_text(errors="replace"))
                      if not (ROOT / path).exists()})
    assert missing == []
