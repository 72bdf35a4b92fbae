"""The CI pipelines `envbuild team ci` writes, read back: their `envbuild ...` command lines, each
parsed by envbuild's own command tree without running it, and the providers' schemas."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import click

SHELL_OPERATORS = (">", ">>", "<", "|", "&&", "||", ";", "2>", "2>&1")


def envbuild_lines(doc: Any) -> list[str]:
    """Every shell line of a GitHub workflow (steps' `run`) or a GitLab pipeline (`script`,
    `before_script`) that runs envbuild."""
    lines: list[str] = []

    def walk(node: Any, key: str = "") -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, str(k))
        elif isinstance(node, list):
            for v in node:
                walk(v, key)
        elif isinstance(node, str) and key in ("run", "script", "before_script"):
            lines.extend(ln.strip() for ln in node.splitlines()
                         if ln.strip().startswith("envbuild "))

    walk(doc)
    return lines


def argv_of(line: str) -> list[str]:
    """The words of `envbuild ...` up to the first shell operator, without the program name."""
    words = shlex.split(line)
    assert words[0] == "envbuild", line
    out = []
    for w in words[1:]:
        if w in SHELL_OPERATORS:
            break
        out.append(w)
    return out


def dry_parse(argv: list[str]) -> str:
    """Parse argv as `envbuild` does, running nothing: the command's path ("team check"); an
    unknown option, a missing value or a bad type raises click's UsageError (exit 2)."""
    from envbuild.cli import load_commands
    from envbuild.cli._app import command

    load_commands([])  # every command module
    cmd: click.Command = command()
    ctx = cmd.make_context("envbuild", list(argv))
    path = []
    while isinstance(cmd, click.Group):
        name, sub, rest = cmd.resolve_command(ctx, [*ctx._protected_args, *ctx.args])
        assert name is not None and sub is not None, argv
        path.append(name)
        ctx = sub.make_context(name, rest, parent=ctx)
        cmd = sub
    return " ".join(path)


def schema_check(path: Path, schema: str) -> subprocess.CompletedProcess[str]:
    """check-jsonschema with its vendored schema (`vendor.github-workflows`, `vendor.gitlab-ci`):
    offline."""
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema,
                           str(path)], capture_output=True, text=True, timeout=120)
