"""The docs build strictly, and what they show is real.

`mkdocs build --strict` of docs/ (its config: docs/_mkdocs/mkdocs.yml) fails on a link to a page
that does not exist or to an anchor a page lacks; a broken copy proves it does. The generated
reference pages hold every command and every validator check. Every `envbuild ...` command the
README and the docs show names a real command and only options it takes (that the make/resolve
commands also resolve is tests/cli/test_one_voice.py's job), the `envbuild resolve` runs they show
are what it prints, and the README stays a short door in.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
CONFIG = Path("docs") / "_mkdocs" / "mkdocs.yml"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def mkdocs_build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", str(root / CONFIG), "-d", str(site)],
                          capture_output=True, text=True, cwd=root, timeout=300,
                          env={**os.environ, "PYTHONWARNINGS": "ignore::DeprecationWarning"})


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    r = mkdocs_build(ROOT, out)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def test_docs_build_strictly(site: Path) -> None:
    for page in ("index.html", "development/architecture/index.html",
                 "reference/cli/index.html", "reference/checks/index.html"):
        assert (site / page).is_file(), page


BROKEN = {  # a link of each kind that must fail the build -> what mkdocs says about it
    "guides/no-such-page.md": "'guides/no-such-page.md', but the target is not found",
    "guides/resolve.md#no-such-anchor": "does not contain an anchor '#no-such-anchor'",
    "reference/cli.md#envbuild-no-such-command":  # a generated page's anchors are checked too
        "does not contain an anchor '#envbuild-no-such-command'",
}


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """A copy of the docs with broken links: a missing page, a missing anchor on a written page
    and on a generated one. The build fails naming each."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    for name in ("envbuild", "matrix"):  # what the generated pages are read from
        (tmp_path / name).symlink_to(ROOT / name)
    index = tmp_path / "docs" / "index.md"
    index.write_text(index.read_text() + "".join(f"\n[gone]({link})\n" for link in BROKEN))
    r = mkdocs_build(tmp_path, tmp_path / "site")
    assert r.returncode != 0
    for said in BROKEN.values():
        assert said in r.stdout + r.stderr


def test_generated_pages_hold_every_command_and_check(site: Path) -> None:
    from envbuild.validator.checks import CHECKS

    cli = (site / "reference" / "cli" / "index.html").read_text()
    for path in _commands():
        assert f'id="{"-".join(path)}"' in cli, path
    checks = (site / "reference" / "checks" / "index.html").read_text()
    for c in CHECKS:
        assert f"<code>{c.id}</code>" in checks, c.id


def _commands() -> dict[tuple[str, ...], click.Command]:
    """Every command of the CLI by its path (`("envbuild", "team", "plan")`)."""
    from envbuild.cli import load_commands
    from envbuild.cli._app import command

    load_commands([])
    root = command()
    out: dict[tuple[str, ...], click.Command] = {}

    def walk(cmd: click.Command, path: tuple[str, ...], ctx: click.Context) -> None:
        out[path] = cmd
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None
                walk(sub, (*path, name), click.Context(sub, info_name=name, parent=ctx))

    walk(root, ("envbuild",), click.Context(root, info_name="envbuild"))
    return out


_INLINE = re.compile(r"`(envbuild [^`]*)`")


def _shown() -> list[tuple[str, str]]:
    """(page, command) for every `envbuild ...` in inline code, and every command line of a
    code block (`$ envbuild ...` or `envbuild ...`, with its continuation lines)."""
    found = []
    for page in PAGES:
        name = page.relative_to(ROOT).as_posix()
        text = page.read_text()
        found += [(name, m) for m in _INLINE.findall(text)]
        lines = iter(re.findall(r"^```[^\n]*\n(.*?)^```", text, re.MULTILINE | re.DOTALL))
        for block in lines:
            rows = block.splitlines()
            for i, row in enumerate(rows):
                cmd = row.strip().removeprefix("$ ")
                if not cmd.startswith("envbuild "):
                    continue
                cmd = cmd.split("  #", 1)[0]
                for more in rows[i + 1:]:
                    if not (cmd.endswith("\\") or more.startswith(("    [", "    --"))):
                        break
                    cmd = cmd.removesuffix("\\") + " " + more.strip()
                found.append((name, cmd))
    return found


def test_shown_commands_are_real() -> None:
    """Each shown `envbuild A B --opt ...` names a command of the CLI and options it takes."""
    commands = _commands()
    checked = 0
    for page, text in _shown():
        words = text.split()
        path: tuple[str, ...] = ("envbuild",)
        for w in words[1:]:
            if (*path, w) in commands:
                path = (*path, w)
            elif not w.startswith("-"):
                break
        if len(words) > 1 and not words[1].startswith("-") and len(path) == 1:
            if re.fullmatch(r"[a-z]+", words[1]):  # `envbuild ... | head` is a form, not a name
                raise AssertionError(f"{page}: `{text}` names no command of envbuild")
            continue
        ctx = click.Context(commands[path], info_name=path[-1])
        options = {o for p in commands[path].get_params(ctx) for o in (*p.opts, *p.secondary_opts)}
        options |= {o for p in commands[("envbuild",)].params for o in p.opts}
        for w in words[len(path):]:
            if w == "--":  # the rest is another program's command line (`envbuild run IMG -- CMD`)
                break
            for opt in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", w.split("=", 1)[0]):
                assert opt in options, f"{page}: `{text}`: {' '.join(path)} has no {opt}"
        checked += 1
    assert checked >= 50


def _resolve_runs() -> list[tuple[str, str, list[str]]]:
    """(page, command, lines shown) for every block that is one `$ envbuild resolve` and what it
    printed (refusals are tests/cli/test_one_voice.py's)."""
    runs = []
    for page in PAGES:
        for block in re.findall(r"^```\n(.*?)^```", page.read_text(), re.MULTILINE | re.DOTALL):
            first, *shown = block.splitlines()
            if first.startswith("$ envbuild resolve") and shown \
                    and not shown[0].startswith("error:") \
                    and not any(x.startswith("$ ") for x in shown):
                runs.append((page.relative_to(ROOT).as_posix(), first.removeprefix("$ "), shown))
    return runs


def test_shown_runs_are_what_envbuild_prints() -> None:
    """The README's real run (and the resolve guide's) is what `envbuild resolve` prints today."""
    from envbuild.cli import run

    runs = _resolve_runs()
    assert any(page == "README.md" for page, _, _ in runs)
    for page, cmd, shown in runs:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            assert run(shlex.split(cmd)[1:]) == 0, (page, cmd, err.getvalue())
        assert (out.getvalue() + err.getvalue()).splitlines() == shown, f"{page}: `{cmd}`"


def test_readme_is_a_short_door_in() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 150
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme):
        if "://" not in target:
            assert (ROOT / target).is_file(), f"README links to {target}, which is not there"
    make = (ROOT / ".ci" / "run").read_text()
    for line in ("make install", "make test"):  # the two commands the README gives
        assert f"\n{line}   " in readme and f"\n{line}\n" in make, line
