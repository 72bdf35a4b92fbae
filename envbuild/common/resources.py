"""Where the matrix data and the templates live, installed or in a checkout."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

_PKG = Path(__file__).resolve().parent.parent  # envbuild/, two levels up from common/resources.py


@cache
def data_dir(name: str) -> Path:
    """`matrix` or `templates`: inside the wheel (envbuild/_data/NAME) or at the repo top."""
    for candidate in (_PKG / "_data" / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"envbuild data directory {name!r} not found next to {_PKG}")


def matrix_dir() -> Path:
    """The shipped matrix, or ENVBUILD_MATRIX_DIR: a matrix of one's own (a fork holding internal
    facts, or a test's edited copy); it is checked like the shipped one when loaded."""
    override = os.environ.get("ENVBUILD_MATRIX_DIR")
    return Path(override) if override else data_dir("matrix")


def templates_dir() -> Path:
    return data_dir("templates")
