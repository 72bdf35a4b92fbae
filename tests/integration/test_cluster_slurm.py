"""Real two-node Slurm validations with docker (`make slurm`: slurmd -N n1 / -N n2 on this host).

Healthy, a crashed node, a hung node (killed at the timeout), a node reporting another torch
(drift), Ctrl-C, and inside an allocation (salloc: srun directly). After each: nothing of ours in
the queue and no container left. In CI a missing Slurm or engine fails these tests, never skips.

How the faults reach one node: ENVBUILD_VALIDATOR_FAULT=crash:facts.torch@n2 is filtered by the
node agent (SLURMD_NODENAME) so only n2's validator gets `crash:facts.torch`; drift is injected
with ENVBUILD_CLUSTER_FAULT=version:torch=2.12.0@n2, which makes n2's agent REPORT that torch
(the node entry says `injected`): every node here runs the same image, so a real second torch
cannot differ by node.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT, Cli, run_cli, work_dir
from tests.support.junit import assert_matches_cluster
from tests.support.junit import read as read_junit
from tests.support.slurm import need as _need
from tests.support.slurm import sinfo_nodes, slurm_env

pytestmark = [pytest.mark.docker, pytest.mark.slow]

DOCKER = "/usr/bin/docker"
IMAGE = "envbuild-cluster/cpu:test"
BASE = os.environ.get("ENVBUILD_TEST_BASE", "local/debian:bookworm")
FAST = ["--only", "facts.torch", "--max-bytes", "2M"]


@pytest.fixture(scope="session")
def slurm() -> Iterator[dict[str, str]]:
    states = sinfo_nodes("%T")
    if not all(s[:1] and s[0].rstrip("*") in ("idle", "mixed", "allocated", "completing")
               for s in states.values()):
        _need(f"the two-node test cluster is not up (node states: {states})")
    yield slurm_env()


@pytest.fixture(scope="module")
def image(docker_engine: None) -> Iterator[str]:
    wheelhouse = work_dir() / "wheelhouse"
    if subprocess.run([DOCKER, "image", "inspect", BASE], capture_output=True,
                      timeout=60).returncode != 0 or not list(wheelhouse.glob("torch-2.13.0*")):
        _need(f"base image {BASE} or the torch wheelhouse missing")
    r = run_cli("make", "--target", "cpu", "--torch", "2.13.0", "--python", "3.11", "--os",
                "debian12", "--without", "torchvision", "--without", "torchaudio",
                "--base-image", BASE, "--wheelhouse", str(wheelhouse), "--tag", IMAGE,
                "--no-validate", "--progress", "plain", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    yield IMAGE
    subprocess.run([DOCKER, "rmi", IMAGE], capture_output=True, timeout=120, check=False)


def ours_in_queue(env: dict[str, str]) -> list[str]:
    p = subprocess.run(["squeue", "-h", "-o", "%i %j %T"], capture_output=True, text=True,
                       timeout=30, env={**os.environ, **env}, check=True)
    return [ln for ln in p.stdout.splitlines() if "envbuild-validate" in ln]


def cluster_containers() -> list[str]:
    p = subprocess.run([DOCKER, "ps", "-a", "--filter", "label=io.envbuild.role=cluster",
                        "--format", "{{.ID}} {{.Status}}"], capture_output=True, text=True,
                       timeout=30, check=True)
    return p.stdout.split("\n")[:-1]


def validate(slurm: dict[str, str], out: Path, *args: str,
             env: dict[str, str] | None = None) -> tuple[Cli, dict[str, Any]]:
    r = run_cli("cluster", "validate", IMAGE, "--slurm", "--nodes", "2", "--out", str(out),
                "--json", *args, env={**slurm, **(env or {})}, timeout=300)
    try:
        data = json.loads(r.stdout)
    except json.JSONDecodeError:
        data = {}
    assert ours_in_queue(slurm) == []
    assert cluster_containers() == []
    return r, data


def test_healthy_two_nodes(slurm: dict[str, str], image: str, tmp_path: Path) -> None:
    r, data = validate(slurm, tmp_path, *FAST, "--timeout", "240")
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-2000:])
    assert [(n["node"], n["rank"], n["status"]) for n in data["nodes"]] == \
        [("n1", 0, "pass"), ("n2", 1, "pass")]
    assert all(n["versions"]["torch"] == "2.13.0+cpu" for n in data["nodes"])
    ar = data["allreduce"]
    assert (ar["backend"], ar["world_size"], ar["exact"], ar["status"]) == \
        ("gloo", 2, True, "pass")
    assert [x["bytes"] for x in ar["results"]] == [1 << 20, 2 << 20]
    assert all(x["busbw_gbs"] == x["algbw_gbs"] > 0 for x in ar["results"])  # 2(n-1)/n = 1
    assert ar["expectation"] is None
    assert data["failed_hostlist"] == "" and data["drift"] == [] and data["status"] == "pass"
    assert data["job"]["in_allocation"] is False
    assert (tmp_path / "validate.sbatch").is_file()  # kept for the user to read and rerun
    # the text form of the same logs: the table and no exclude line
    c = run_cli("cluster", "collect", *map(str, sorted(tmp_path.glob("*.log"))))
    assert c.returncode == 0 and "n2    1     pass" in c.stdout and "--exclude" not in c.stdout


def test_crashed_node_is_named(slurm: dict[str, str], image: str, tmp_path: Path) -> None:
    r, data = validate(slurm, tmp_path, *FAST, "--timeout", "240",
                       env={"ENVBUILD_VALIDATOR_FAULT": "crash:facts.torch@n2"})
    assert r.returncode == 1, (r.stdout[-3000:], r.stderr[-2000:])
    status = {n["node"]: n["status"] for n in data["nodes"]}
    assert status == {"n1": "pass", "n2": "fail"}
    n2 = data["nodes"][1]["report"]
    assert any("SIGSEGV" in str(c.get("detail")) for c in n2["checks"])
    assert data["failed_hostlist"] == "n2" and data["allreduce"]["status"] == "pass"


def test_hung_node_is_killed_at_the_timeout(slurm: dict[str, str], image: str,
                                            tmp_path: Path) -> None:
    r, data = validate(slurm, tmp_path, *FAST, "--timeout", "35",
                       env={"ENVBUILD_VALIDATOR_FAULT": "hang:facts.torch@n2"})
    assert r.returncode == 1, (r.stdout[-3000:], r.stderr[-2000:])
    assert {n["node"]: n["status"] for n in data["nodes"]} == {"n1": "pass", "n2": "missing"}
    assert data["failed_hostlist"] == "n2"
    assert data["allreduce"]["status"] in ("missing", "fail")
    assert "cancelled" in data["note"]


def test_drift_names_the_node_with_another_torch(slurm: dict[str, str], image: str,
                                                 tmp_path: Path) -> None:
    r, data = validate(slurm, tmp_path, *FAST, "--timeout", "240",
                       env={"ENVBUILD_CLUSTER_FAULT": "version:torch=2.12.0@n2"})
    assert r.returncode == 1, (r.stdout[-3000:], r.stderr[-2000:])
    assert data["drift"] == [{"node": "n2", "key": "torch", "value": "2.12.0",
                              "majority": "2.13.0+cpu"}]
    assert data["nodes"][1]["injected"] == ["torch=2.12.0"]
    assert data["failed_hostlist"] == "n2"


def test_ctrl_c_cancels_the_job(slurm: dict[str, str], image: str, tmp_path: Path) -> None:
    p = subprocess.Popen([sys.executable, "-m", "envbuild", "cluster", "validate", IMAGE,
                          "--slurm", "--out", str(tmp_path), *FAST, "--timeout", "240"],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, **slurm,
                              "ENVBUILD_VALIDATOR_FAULT": "hang:facts.torch"})
    try:
        for _ in range(600):  # until both nodes' containers run (bounded wait, not a timing)
            if len(cluster_containers()) == 2:
                break
            time.sleep(0.2)
        assert len(cluster_containers()) == 2
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err[-2000:]
    assert ours_in_queue(slurm) == []
    assert cluster_containers() == []


def test_inside_an_allocation_uses_srun(slurm: dict[str, str], image: str,
                                        tmp_path: Path) -> None:
    p = subprocess.run(["salloc", "-N2", "--job-name=envbuild-validate-salloc", sys.executable,
                        "-m", "envbuild", "cluster", "validate", IMAGE, "--slurm", "--out",
                        str(tmp_path), "--json", *FAST, "--timeout", "240"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, **slurm})
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-2000:])
    data = json.loads(p.stdout)
    assert data["job"]["in_allocation"] is True and data["status"] == "pass"
    assert [n["status"] for n in data["nodes"]] == ["pass", "pass"]
    assert not (tmp_path / "validate.sbatch").exists()  # no batch job: srun steps directly
    for _ in range(300):  # salloc's own allocation may still be COMPLETING (bounded wait)
        if not ours_in_queue(slurm):
            break
        time.sleep(0.1)
    assert ours_in_queue(slurm) == [] and cluster_containers() == []


def test_host_runtime_uses_the_nodes_own_python(slurm: dict[str, str], tmp_path: Path) -> None:
    pytest.importorskip("torch")  # the venv of `make install` has it (TORCH_PIN)
    junit = tmp_path / "junit" / "cluster.xml"
    r, data = validate(slurm, tmp_path, "--runtime", "host", *FAST, "--timeout", "240",
                       "--junit", str(junit))
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-2000:])
    assert [n["status"] for n in data["nodes"]] == ["pass", "pass"]
    assert all(n["report"]["host"]["in_image"] is False for n in data["nodes"])
    assert data["allreduce"]["status"] == "pass" and data["allreduce"]["world_size"] == 2
    # --junit of the same run: a suite per node with its checks, then the cluster's
    root = read_junit(junit)
    assert_matches_cluster(root, data)
    assert [s.get("hostname") for s in root][:2] == ["n1", "n2"]


def test_pod_lines_from_real_containers_collect_into_a_report(image: str,
                                                              tmp_path: Path) -> None:
    """What each Kubernetes pod runs (the worker in `pod` mode, rank from the indexed Job's
    JOB_COMPLETION_INDEX), run as two real containers; `cluster collect` reads their logs."""
    from envbuild.cluster.render import worker_source

    procs = []
    for index in range(2):
        procs.append(subprocess.Popen(
            [DOCKER, "run", "--rm", "--network", "host", "--label", "io.envbuild.role=cluster",
             "-e", f"JOB_COMPLETION_INDEX={index}", "-e", "ENVBUILD_NODES=2", "-e",
             "MASTER_ADDR=127.0.0.1", "-e", f"MASTER_PORT={29400 + os.getpid() % 500}", "-e",
             f"ENVBUILD_NODE_NAME=pod{index}", "-e",
             "ENVBUILD_VALIDATOR_FAULT=crash:facts.torch@pod1",
             image, "python", "-c", worker_source(), "pod", "--timeout", "120", "--max-bytes",
             str(1 << 20), "--validator-arg=--only", "--validator-arg=facts.torch"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    logs = [p.communicate(timeout=240)[0] for p in procs]
    log = tmp_path / "pods.log"
    log.write_text("".join(logs))
    r = run_cli("cluster", "collect", str(log), "--nodes", "pod[0-1]", "--json")
    assert r.returncode == 1, (r.stdout[-2000:], r.stderr[-2000:])
    data = json.loads(r.stdout)
    assert {n["node"]: n["status"] for n in data["nodes"]} == {"pod0": "pass", "pod1": "fail"}
    assert data["allreduce"]["status"] == "pass" and data["allreduce"]["world_size"] == 2
    assert data["failed_hostlist"] == "pod1"
    assert cluster_containers() == []


@pytest.mark.parametrize("args", [["--partition", "nosuchpartition"], ["--nodes", "3"],
                                  ["--exclude", "n2"]])
def test_unsatisfiable_jobs_are_exit_3_and_leave_nothing(slurm: dict[str, str], tmp_path: Path,
                                                         args: list[str]) -> None:
    r = run_cli("cluster", "validate", IMAGE, "--slurm", "--out", str(tmp_path), *args,
                "--timeout", "60", env=slurm, timeout=120)
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert re.search(r"^error: (sbatch could not submit the job|job \d+ can never start)",
                     r.stderr, re.MULTILINE) and "\nhint: " in r.stderr
    assert ours_in_queue(slurm) == []
