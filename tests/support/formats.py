"""Helpers shared by the formats tests and others (moved out of test_formats.py)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import yaml


@dataclass
class PipCall:
    index: str
    extras: list[str]
    trusted: list[str]


def _parse(args: list[str]) -> PipCall:
    opts: dict[str, list[str]] = {}
    for a, b in itertools.pairwise(args):
        if a.startswith("--") and a in ("--index-url", "--extra-index-url", "--trusted-host"):
            opts.setdefault(a, []).append(b)
    assert len(opts.get("--index-url", [])) == 1, args
    return PipCall(opts["--index-url"][0], opts.get("--extra-index-url", []),
                   opts.get("--trusted-host", []))


def _environment_yml(text: str) -> tuple[PipCall, list[str]]:
    env = yaml.safe_load(text)
    section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    args = [w for line in section if line.startswith("--") for w in line.split(" ", 1)]
    return _parse(args), [line for line in section if not line.startswith("--")]

