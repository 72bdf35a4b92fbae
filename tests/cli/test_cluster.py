"""Cluster validation without a cluster: hostlists, fault routing, the report's judgement (drift,
stragglers, busbw, missing nodes) on real H100/H200 recordings, the sbatch / srun / Kubernetes
renders (manifests checked offline with kubernetes-validate), and `envbuild cluster collect`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support import run_cli
from tests.support.cluster import ar_line, node_line


def test_cli_render_k8s_and_slurm(tmp_path: Path) -> None:
    r = run_cli("cluster", "render", "--k8s", "img:1", "--nodes", "2", "--out",
                str(tmp_path / "k"), "--json")
    assert r.returncode == 0, r.stderr
    assert sorted(Path(p).name for p in json.loads(r.stdout)["files"]) == ["job.yaml",
                                                                           "jobset.yaml"]
    r = run_cli("cluster", "render", "--slurm", "img:1", "--out", str(tmp_path / "s"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "s" / "validate.sbatch").read_text().startswith("#!/bin/bash")
    assert not list(tmp_path.rglob(".*.tmp"))


@pytest.mark.parametrize("args", [
    ["validate", "img:1"], ["render", "img:1"], ["render", "--k8s", "--slurm", "img:1"],
    ["validate", "--slurm", "bad image"], ["validate", "--slurm", "img", "--max-bytes", "lots"],
    ["validate", "--slurm", "img", "--exclude", "n[1-"], ["collect", "/nonexistent/log"],
    ["validate", "--slurm", "img", "--fabric", "infiniband"], ["collect", "-", "--fabric", "x"],
])
def test_cli_usage_errors(args: list[str]) -> None:
    r = run_cli("cluster", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr


def test_cli_validate_without_slurm_is_exit_3(tmp_path: Path) -> None:
    r = run_cli("cluster", "validate", "--slurm", "img:1", "--out", str(tmp_path),
                env={"PATH": "/nonexistent", "SLURM_JOB_ID": ""})
    assert r.returncode == 3 and "srun not found" in r.stderr and "hint:" in r.stderr


def test_cli_collect_pod_logs(tmp_path: Path) -> None:
    pods = []
    for rank, node in enumerate(["gpu1", "gpu2", "gpu3"]):
        line = node_line(node, scale=0.5 if node == "gpu3" else 1.0)
        pods.append(f"[pod/job-{rank}/validate] " + json.dumps(
            {**line, "kind": "pod", "rank": rank, "allreduce": ar_line(rank, 4)}))
    log = tmp_path / "pods.log"
    log.write_text("\n".join(pods) + "\n")
    r = run_cli("cluster", "collect", str(log), "--nodes", "gpu[1-4]", "--world-size", "4",
                "--json")
    assert r.returncode == 1, r.stderr
    data = json.loads(r.stdout)
    assert {n["node"]: n["status"] for n in data["nodes"]} == {
        "gpu1": "pass", "gpu2": "pass", "gpu3": "pass", "gpu4": "missing"}
    assert data["allreduce"]["missing_ranks"] == [3] and data["allreduce"]["status"] == "fail"
    assert data["failed_hostlist"] == "gpu4" and data["exclude"] == "gpu[3-4]"
    r = run_cli("cluster", "collect", "-", input_text="\n".join(pods[:2]) + "\n")
    assert r.returncode == 1  # 2 pods of a world of 2 ranks... their all-reduce said world 4
    assert re.search(r"gpu1\s+0\s+pass", r.stdout)
