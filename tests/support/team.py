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


def remove_images(*repositories: str) -> None:
    """Remove every local tag of these repositories (bare, or under any registry): a team build
    tags each image twice (its local and its registry name) and a pull adds the index's."""
    import subprocess

    listed = subprocess.run(["/usr/bin/docker", "images", "--format",
                             "{{.Repository}}:{{.Tag}}"], capture_output=True, text=True,
                            check=False).stdout.split()
    doomed = [ref for ref in listed if ref.rpartition(":")[0].rpartition("/")[2] in repositories
              or ref.rpartition(":")[0] in repositories]
    if doomed:
        subprocess.run(["/usr/bin/docker", "rmi", "-f", *doomed], capture_output=True,
                       check=False)
