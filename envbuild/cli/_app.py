"""The typer application object shared by the command modules."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer

app = typer.Typer(
    name="envbuild",
    help="Resolve, render, build and validate GPU/ML environments (CUDA, ROCm, CPU, Apple MPS).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False) + "\n")


def say(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def warn(text: str) -> None:
    sys.stderr.write(text + "\n")
