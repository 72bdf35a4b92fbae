"""Helpers shared by the one_voice tests and others (moved out of test_one_voice.py)."""

from __future__ import annotations

import itertools
import re

import pytest

from envbuild.matrix import Matrix, load
from tests.support import FIXTURES, ROOT

# ---------------------------------------------------------------- README

def _refusal_examples() -> list[tuple[str, list[str]]]:
    """README blocks `$ envbuild resolve ...` followed by the refusal it prints."""
    lines = (ROOT / "README.md").read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.startswith("$ envbuild") and i + 1 < len(lines) \
                and lines[i + 1].startswith("error:"):
            shown = list(itertools.takewhile(lambda x: not x.startswith("```"), lines[i + 1:]))
            out.append((line.removeprefix("$ "), shown))
    return out

# `envbuild make ...` / `envbuild resolve ...` quoted in backticks, or a whole line of a block
_QUOTED = re.compile(r"`(envbuild (?:make|resolve)\b[^`]*)`")


@pytest.fixture(scope="module")
def m() -> Matrix:
    return load()


def commands_in(text: str) -> list[str]:
    return [c.strip().rstrip(".,;") for c in _QUOTED.findall(text)]


# ---------------------------------------------------------------- doctor

DOCTOR = FIXTURES / "doctor"


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    refused = {c for c, _ in _refusal_examples()}
    found = set(commands_in(text))
    for line in text.splitlines():  # code blocks and printed hints: whole lines
        line = line.strip().removeprefix("$ ")
        if line in refused:
            continue
        if re.match(r"envbuild (make|resolve)\b", line) and "`" not in line:
            found.add(line.split("  #", 1)[0].split(" # ", 1)[0].strip())
        if line.startswith(("hint:", "  - ", "or:")):
            found.update(commands_in(line))
    return sorted(found)
