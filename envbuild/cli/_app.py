"""The typer application object shared by the command modules."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

app = typer.Typer(
    name="envbuild",
    help="Resolve, render, build and validate GPU/ML environments (CUDA, ROCm, CPU, Apple MPS).",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion [bash|zsh|fish|powershell]
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        from envbuild import __version__

        sys.stdout.write(f"envbuild {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[bool, typer.Option(
        "--version", "-V", help="Print the envbuild version and exit.", is_eager=True,
        callback=_print_version)] = False,
) -> None:
    """Resolve, render, build and validate GPU/ML environments (CUDA, ROCm, CPU, Apple MPS)."""


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False) + "\n")


def say(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def warn(text: str) -> None:
    sys.stderr.write(text + "\n")
