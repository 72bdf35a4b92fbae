"""`envbuild fleet collect --slurm` against the real two-node Slurm of this host (`make slurm`,
.ci/slurm.sh), whose nodes carry GPU GRES types (n1 gpu:tesla_v100:2, n2
gpu:nvidia_h100_80gb_hbm3:4) and a driver-VERSION feature each. In CI a missing Slurm fails this
test, never skips it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support import run_cli
from tests.support.slurm import need, sinfo_nodes, slurm_env

pytestmark = [pytest.mark.slow]


def test_collect_reads_the_gres_types_of_the_real_cluster(tmp_path: Path) -> None:
    env = slurm_env()
    seen = sinfo_nodes("%G %f")
    if not all(gres.startswith("gpu:") for gres, _ in seen.values()):
        need(f"the test cluster has no GPU GRES types: rerun `bash .ci/slurm.sh` ({seen})")
    out = tmp_path / "fleet.toml"
    r = run_cli("fleet", "collect", "--slurm", "--out", str(out), "--json", env=env)
    assert r.returncode == 0, r.stderr
    groups = {g["hosts"][0]: g for g in json.loads(r.stdout)["groups"]}
    assert sorted(groups) == ["n1", "n2"]
    for node, (gres, features) in seen.items():  # what sinfo says, fleet collect read
        kind, count = re.fullmatch(r"gpu:([\w.-]+):(\d+)", gres).groups()  # type: ignore[union-attr]
        g = groups[node]
        assert (g["gpu"], g["gpus_per_node"], g["slurm_partition"], g["source"]) == (
            kind, int(count), "debug", "slurm")
        assert features == f"driver-{g['driver']}"
    assert (groups["n1"]["cc"], groups["n2"]["cc"]) == ("7.0", "9.0")  # V100, H100
    r = run_cli("plan", "--fleet", str(out), "--to", "torch==2.15", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    status = {g["group"]: g["status"] for g in json.loads(r.stdout)["groups"]}
    assert len(status) == 2
