"""Helpers shared by the team tests and others (moved out of test_team.py)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GOOD = """
[defaults]
registry = "registry.example.com/ml"
python = "3.11"
torch = "2.13.0"
target = "cpu"
os = "debian12"
pip = ["numpy>=1.26", "einops"]
apt = ["git"]

[image.a]

[image.b]
pip = ["bitsandbytes", "einops"]

[image.c]
python = "3.12"
"""



@dataclass
class TeamRun:
    """A `team build --push --json` run on a real registry: its output and the lock it wrote."""

    registry: str
    dir: Path
    data: dict[str, Any]
    stderr: str

    @property
    def lock(self) -> dict[str, Any]:
        return tomllib.loads((self.dir / "envbuild.lock").read_text())
