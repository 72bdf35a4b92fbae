"""mkdocs hook: the reference pages that are read from the code and the data, made at build time.

- reference/cli.md: every command of envbuild's CLI (the click tree of the typer app): usage,
  help, arguments and options, as `--help` prints them;
- reference/checks.md: the validator's check table (`envbuild.validator.checks.CHECKS`);
- reference/signatures.md: `envbuild explain`'s catalogue (`matrix/signatures.toml`);
- reference/matrix-schema.md: `matrix/README.md`, the schema's one home.

Nothing here is committed as a generated copy, so these pages cannot drift from what they
describe. The repository this config belongs to goes first on sys.path, so the pages describe
this tree, not whichever envbuild happens to be installed.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

_SPECIAL = re.compile(r"([\\*_\[\]#|])")


def _md(text: str) -> str:
    """Plain text as Markdown: special characters escaped outside `code` spans (angle
    brackets as entities: Markdown has no backslash escape for `<`)."""
    def plain(p: str) -> str:
        return _SPECIAL.sub(r"\\\1", p).replace("<", "&lt;").replace(">", "&gt;")

    parts = re.split(r"(`[^`]*`)", text)
    return "".join(p if p.startswith("`") else plain(p) for p in parts)


def _help_text(text: str) -> str:
    """A click help string as Markdown paragraphs (click's \\b markers and typer's \\[ dropped)."""
    text = text.replace("\\[", "[").replace("\b\n", "")
    paras = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text.strip())]
    return "\n\n".join(_md(p) for p in paras if p)


def _cell(text: str) -> str:
    return _help_text(text).replace("\n\n", " ")


def cli_page() -> str:
    import click

    from envbuild.cli import load_commands
    from envbuild.cli._app import command

    load_commands([])  # every command module, as `envbuild --help` loads them
    root = command()
    out = ["# CLI reference", "",
           "Generated from the CLI itself when the docs are built: each command's usage, help, "
           "arguments and options, as `envbuild COMMAND --help` prints them (every command also "
           "takes `--help`). The guides explain what the commands do.", ""]

    def walk(cmd: click.Command, ctx: click.Context, level: int) -> None:
        out.append(f"{'#' * level} {ctx.command_path}")
        out.append("")
        usage = " ".join([ctx.command_path, *cmd.collect_usage_pieces(ctx)])
        out.extend(["```", usage, "```", ""])
        if cmd.help:
            out.extend([_help_text(cmd.help), ""])
        rows = []
        for p in cmd.get_params(ctx):
            if isinstance(p, click.Argument):
                rows.append(f"- `{p.make_metavar(ctx)}` (argument)")
                continue
            if p.name == "help":
                continue
            record = p.get_help_record(ctx)
            if record is not None:
                opts, text = record
                rows.append(f"- `{opts}`" + (f": {_cell(text)}" if text else ""))
        if rows:
            out.extend([*rows, ""])
        if isinstance(cmd, click.Group):
            names = cmd.list_commands(ctx)
            anchor = ctx.command_path.replace(" ", "-")
            out.extend(["Commands: " + ", ".join(f"[`{n}`](#{anchor}-{n})" for n in names) + ".",
                        ""])
            for name in names:
                sub = cmd.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    walk(sub, click.Context(sub, info_name=name, parent=ctx), level + 1)

    walk(root, click.Context(root, info_name="envbuild"), 2)
    return "\n".join(out)


def checks_page() -> str:
    from envbuild.validator.checks import CHECKS
    from envbuild.validator.judges import CPU_FALLBACK_CHECKS, GPU_ONLY_CHECKS

    out = ["# Validator checks", "",
           "Generated from the validator's check table (`envbuild/validator/checks.py`, "
           "`CHECKS`) when the docs are built. The order is the report's order. *Runs in*: "
           "`torch` checks run in the worker process that imports torch, `host` checks in "
           "the supervisor. *Without a GPU*: a GPU-only check is `not_run` (never passed); "
           "a CPU-fallback check runs on the CPU. Every check is time-limited. How they are "
           "run: [Build and validate](../guides/build-validate.md).", "",
           "| id | what it checks | runs in | without a GPU | time limit |",
           "|---|---|---|---|---|"]
    for c in CHECKS:
        where = "torch" if c.torch is not None else "host"
        gpu = ("not run" if c.id in GPU_ONLY_CHECKS
               else "on the CPU" if c.id in CPU_FALLBACK_CHECKS else "")
        out.append(f"| `{c.id}` | {_cell(c.title)} | {where} | {gpu} | {c.timeout_s:g} s |")
    out += ["", f"{len(CHECKS)} checks. Inside an image, `envbuild-validate --only ID` / "
            "`--skip ID` (the validator program's options) take these ids or a group prefix "
            "(`numerics` is every `numerics.*`); `envbuild validate` runs them all."]
    return "\n".join(out)


def signatures_page() -> str:
    data: dict[str, Any] = tomllib.loads((ROOT / "matrix" / "signatures.toml").read_text())
    sigs = data.get("signature", [])
    out = ["# Explain signatures", "",
           f"Generated from `matrix/signatures.toml` when the docs are built: the {len(sigs)} "
           "error signatures `envbuild explain` knows, with the cause it names. The fixes are "
           "templates filled from the matrix with the versions found in the text; the "
           "file's header comment documents every key. A harmless message (a warning that is no "
           "error) is named, marked and listed after every real error. How explain reads a log: "
           "[Explain](../guides/explain.md).", "",
           "| id | title | confidence | cause |", "|---|---|---|---|"]
    for s in sigs:
        mark = " *(harmless: no error)*" if s.get("harmless") else ""
        out.append(f"| `{s['id']}` | {_cell(s['title'])}{mark} | {s['confidence']:g} | "
                   f"{_cell(s.get('cause', ''))} |")
    return "\n".join(out)


def matrix_schema_page() -> str:
    text = (ROOT / "matrix" / "README.md").read_text()
    body = re.sub(r"^(#+) ", r"#\1 ", text, flags=re.MULTILINE)  # its headings one level down
    return "\n".join(["# Matrix schema", "",
                      "This page is `matrix/README.md`, the schema's one home, included when the "
                      "docs are built. The [matrix guide](../guides/matrix.md) shows the "
                      "commands that check, show and refresh it.", "", body])


PAGES = {
    "reference/cli.md": cli_page,
    "reference/checks.md": checks_page,
    "reference/signatures.md": signatures_page,
    "reference/matrix-schema.md": matrix_schema_page,
}


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    if str(ROOT) not in sys.path[:1]:
        sys.path.insert(0, str(ROOT))
    for path, make in PAGES.items():
        files.append(File.generated(config, path, content=make()))
    return files
