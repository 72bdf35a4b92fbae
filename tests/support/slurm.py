"""The two-node test cluster `make slurm` starts (.ci/slurm.sh): its SLURM_CONF and what `sinfo`
says of its nodes, for the integration modules that use it. In CI a cluster that is not there is
a failure, never a skip."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import NoReturn

import pytest

from tests.support import IN_CI

SLURM_CONF = Path(os.environ.get("ENVBUILD_SLURM_DIR", "/var/lib/envbuild-slurm")) / "slurm.conf"


def need(problem: str) -> NoReturn:
    if IN_CI:
        pytest.fail(f"CI must provide this (make slurm / make fixtures): {problem}")
    pytest.skip(problem)


def slurm_env() -> dict[str, str]:
    return {"SLURM_CONF": os.environ.get("SLURM_CONF", str(SLURM_CONF))}


def sinfo_nodes(fields: str) -> dict[str, list[str]]:
    """`sinfo -h -N -o "%N <fields>"` of the test cluster: node -> its other words; fails (CI) or
    skips unless both nodes n1 and n2 answer."""
    try:
        p = subprocess.run(["sinfo", "-h", "-N", "-o", f"%N {fields}"], capture_output=True,
                           text=True, timeout=30, env={**os.environ, **slurm_env()})
    except (OSError, subprocess.TimeoutExpired) as exc:
        need(f"no Slurm client: {exc}")
    nodes = {ln.split()[0]: ln.split()[1:] for ln in p.stdout.splitlines() if ln.strip()}
    if p.returncode != 0 or sorted(nodes) != ["n1", "n2"]:
        need(f"the two-node test cluster is not up (sinfo: {p.stdout.strip() or p.stderr})")
    return nodes
