"""Helpers shared by the team tests and others (moved out of test_team.py)."""

from __future__ import annotations

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

