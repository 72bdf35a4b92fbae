"""Cluster validation without a cluster: hostlists, fault routing, the report's judgement (drift,
stragglers, busbw, missing nodes) on real H100/H200 recordings, the sbatch / srun / Kubernetes
renders (manifests checked offline with kubernetes-validate), and `envbuild cluster collect`."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.cluster import hosts, report
from envbuild.cluster.render import (
    ClusterOptions,
    check_options,
    k8s_manifests,
    sbatch_script,
    srun_argv,
    task_argv,
    worker_source,
)
from envbuild.cluster.slurm import load_rules
from envbuild.common.errors import EXIT_USAGE, UsageError
from tests.support import TESTS
from tests.support.cluster import FIX, H100, ar_line, node_line

H200 = json.loads((FIX / "h200-validate.json").read_text())
RULES = load_rules()


# --------------------------------------------------------------------------------------------
# hostlists and faults


@given(st.sets(st.integers(0, 3000), min_size=1, max_size=40), st.sampled_from(["n", "gpu-", "a"]))
def test_hostlist_round_trip(nums: set[int], prefix: str) -> None:
    names = [f"{prefix}{i}" for i in nums]
    assert sorted(hosts.expand(hosts.compress(names)), key=hosts.sort_key) == \
        sorted(names, key=hosts.sort_key)


def test_hostlist_slurm_syntax() -> None:
    assert hosts.expand("n[1-3,7]") == ["n1", "n2", "n3", "n7"]
    assert hosts.compress(["n5", "n2"]) == "n[2,5]"
    assert hosts.first_host("gpu[07-09],cpu1") == "gpu07"


@pytest.mark.parametrize("bad", ["n[", "n[3-1]", "n[1-100000000]", "[]", "n]1[",
                                 "a;rm -rf /", "$(id)", "n[1-2]`x`", "x y", "../etc"])
def test_bad_hostlists_are_usage_errors(bad: str) -> None:
    with pytest.raises(UsageError) as err:
        hosts.expand(bad)
    assert err.value.exit_code == EXIT_USAGE


fault_items = st.tuples(st.sampled_from(["crash", "hang"]),
                        st.sampled_from(["facts.torch", "train.smoke", "perf.matmul"]),
                        st.sampled_from([None, "n1", "n2", "n10"]))


@given(st.lists(fault_items, max_size=6), st.sampled_from(["n1", "n2", "n10", "n3"]))
def test_faults_reach_every_node_or_only_the_named_one(items: list[Any], node: str) -> None:
    text = ",".join(f"{k}:{c}" + (f"@{n}" if n else "") for k, c, n in items)
    got = [x for x in hosts.faults_for_node(text, node).split(",") if x]
    want = [f"{k}:{c}" for k, c, n in items if n in (None, node)]
    assert got == want
    assert "@" not in ",".join(got)  # the validator never sees a node suffix


def test_injected_versions_only_for_their_node() -> None:
    text = "version:torch=2.12.0@n2,crash:x@n2,version:nccl=2.1@n1"
    assert hosts.injected_versions(text, "n2") == ["torch=2.12.0"]
    assert hosts.injected_versions(text, "n3") == []


def test_node_addr_and_port() -> None:
    out = "NodeName=n1 Arch=x86_64 CoresPerSocket=1\n   NodeAddr=127.0.0.1 NodeHostName=vm\n"
    assert hosts.node_addr(out) == "127.0.0.1"
    assert hosts.node_addr("nothing") is None
    assert hosts.master_port("12345") == 20000 + 12345 % 20000
    assert 20000 <= hosts.master_port(None) < 40000


# --------------------------------------------------------------------------------------------
# the report


def test_versions_and_perf_from_a_real_h100_report() -> None:
    v = report.versions_of(H100)
    assert v == {"driver": "580.159.04", "torch": "2.11.0+cu130", "cuda": "13.0",
                 "cudnn": "9.19.0", "nccl": "2.28.9", "gpu": "NVIDIA H100 80GB HBM3"}
    p = report.perf_of(H100)
    assert p["bf16_tflops"] > 700 and p["mem_bw_gbs"] > 2900


@pytest.mark.parametrize(("n", "factor"), [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75),
                                           (16, 1.875)])
def test_busbw_is_nccl_tests_all_reduce_factor(n: int, factor: float) -> None:
    alg = report.algbw_gbs(1 << 30, 0.5)
    assert alg == pytest.approx((1 << 30) / 0.5 / 1e9)
    assert report.busbw_gbs(alg, n) == pytest.approx(alg * factor)


def test_allreduce_uses_the_slowest_rank_and_fails_on_any_defect() -> None:
    lines = [ar_line(0, 2, 0.01), ar_line(1, 2, 0.02)]
    s = report.allreduce_summary(lines, 2, rules=RULES)
    assert s["status"] == "pass" and s["results"][-1]["seconds"] == pytest.approx(0.02)
    assert s["results"][-1]["busbw_gbs"] == pytest.approx((1 << 26) / 0.02 / 1e9, rel=1e-3)
    assert s["expectation"] is None  # no fabric given: numbers, no verdict
    for bad, why in ([ar_line(0, 2)], "missing rank"), \
                    ([ar_line(0, 2), ar_line(1, 2, exact=False)], "inexact"), \
                    ([ar_line(0, 2), ar_line(1, 2, error="boom")], "error"):
        assert report.allreduce_summary(bad, 2, rules=RULES)["status"] == "fail", why
    assert report.allreduce_summary([], 2, rules=RULES)["status"] == "missing"


@pytest.mark.parametrize(("seconds", "verdict"), [(0.0001, "pass"), (0.01, "fail")])
def test_fabric_floor_from_the_matrix(seconds: float, verdict: str) -> None:
    lines = [ar_line(r, 8, seconds) for r in range(8)]
    s = report.allreduce_summary(lines, 8, rules=RULES, fabric="nvlink",
                                 gpu="NVIDIA H100 80GB HBM3", gpus_per_node=8, nodes=1)
    assert s["expectation"]["busbw_floor_gbs"] == 460
    assert s["expectation"]["status"] == verdict and s["status"] == verdict
    none = report.allreduce_summary(lines, 8, rules=RULES, fabric="tcp",
                                    gpu="NVIDIA H100 80GB HBM3", gpus_per_node=8, nodes=1)
    assert none["expectation"] is None and none["status"] == "pass"


def test_healthy_cluster_passes() -> None:
    lines = [node_line("n1"), node_line("n2"), node_line("n3"),
             *[ar_line(r, 3) for r in range(3)]]
    r = report.build(["n1", "n2", "n3"], lines, rules=RULES, world_size=3)
    assert r["status"] == "pass" and report.exit_code(r) == 0
    assert r["failed_hostlist"] == "" and r["drift"] == [] and r["stragglers"] == []
    assert [n["rank"] for n in r["nodes"]] == [0, 1, 2]
    assert "--exclude" not in report.render_text(r)


@pytest.mark.parametrize(("scale", "straggles"), [(0.85, True), (0.5, True), (0.95, False),
                                                  (1.2, False)])
def test_straggler_is_a_fraction_below_the_median_of_its_gpu_model(scale: float,
                                                                   straggles: bool) -> None:
    lines = [node_line("n1"), node_line("n2"), node_line("n3", scale=scale), node_line("n4"),
             node_line("h1", H200, scale=0.5), node_line("h2", H200, scale=0.5)]
    r = report.build([], lines, rules=RULES, world_size=0)
    assert {s["node"] for s in r["stragglers"]} == ({"n3"} if straggles else set())
    # the H200s are slow together: their own median, not the H100s', judges them
    assert all(s["gpu"] == "NVIDIA H100 80GB HBM3" for s in r["stragglers"])
    # a GPU model other than the majority's is drift (h1, h2); a straggler is excluded only
    assert {(d["node"], d["key"]) for d in r["drift"]} == {("h1", "gpu"), ("h2", "gpu")}
    assert r["failed_hostlist"] == "h[1-2]"
    assert r["exclude"] == ("h[1-2],n3" if straggles else "h[1-2]")
    assert f"--exclude={r['exclude']}" in report.render_text(r)


def test_cpu_nodes_get_no_straggler_verdict() -> None:
    nodes = [{"node": f"n{i}", "versions": {"gpu": None},
              "perf": {"fp32_gflops": 10.0 * i, "device": "AMD EPYC"}} for i in range(1, 5)]
    assert report.stragglers(nodes, 0.1, 2) == []


@pytest.mark.parametrize("key", ["torch", "nccl", "driver", "gpu"])
def test_drift_names_the_odd_node(key: str) -> None:
    lines = [node_line(f"n{i}") for i in range(1, 5)]
    lines[2]["injected"] = [f"{key}=odd-1.0"]
    r = report.build([f"n{i}" for i in range(1, 5)], lines, rules=RULES, world_size=0)
    assert r["drift"] == [{"node": "n3", "key": key, "value": "odd-1.0",
                           "majority": report.versions_of(H100)[key]}]
    assert r["failed_hostlist"] == "n3" and r["status"] == "fail"


def test_drift_tie_goes_to_the_first_node() -> None:
    lines = [node_line("n1"), node_line("n2", torch="2.12.0")]
    assert [d["node"] for d in report.build([], lines, rules=RULES)["drift"]] == ["n2"]


def test_missing_and_failed_nodes_are_named_never_dropped() -> None:
    lines = [node_line("n1"), node_line("n2", exit_code=1), node_line("n4"),
             ar_line(0, 2), ar_line(1, 2)]
    r = report.build(hosts.expand("n[1-5]"), lines, rules=RULES, world_size=2)
    status = {n["node"]: n["status"] for n in r["nodes"]}
    assert status == {"n1": "pass", "n2": "fail", "n3": "missing", "n4": "pass",
                      "n5": "missing"}
    assert r["failed_hostlist"] == "n[2-3,5]" and report.exit_code(r) == 1
    text = report.render_text(r)
    assert "n3: missing (never reported)" in text and "--exclude=n[2-3,5]" in text


@settings(max_examples=200)
@given(st.text(max_size=400))
def test_parse_lines_never_raises_on_garbage(text: str) -> None:
    for x in report.parse_lines(text):
        assert x["envbuild_cluster"] == 1


def test_parse_lines_reads_prefixed_logs() -> None:
    log = ("[pod/x-0/validate] some warning\n"
           f"[pod/x-0/validate] {json.dumps(node_line('n1'))}\n"
           '{"envbuild_cluster": 2, "kind": "node"}\n{"envbuild_cluster": 1}\n')
    assert [x["node"] for x in report.parse_lines(log)] == ["n1"]


# --------------------------------------------------------------------------------------------
# rendering


def opts(**kw: Any) -> ClusterOptions:
    base: dict[str, Any] = {"image": "envbuild/cuda:test", "out": Path("/shared/ev"),
                            "python": "/opt/envbuild/bin/python"}
    return check_options(ClusterOptions(**{**base, **kw}))


def test_sbatch_script_directives_and_steps() -> None:
    o = opts(nodes=4, ntasks_per_node=8, gpus_per_node=8, partition="gpu", account="ml",
             constraint="h100&ib", exclude="n[3,9]", time_min=20, only="facts.torch")
    text = sbatch_script(o, Path("/shared/ev/validate.sbatch"))
    for d in ("--nodes=4", "--ntasks-per-node=8", "--gpus-per-node=8", "--partition=gpu",
              "--account=ml", "--constraint=h100&ib", "--exclude=n[3,9]", "--time=20",
              "--output=/shared/ev/slurm-%j.out"):
        assert f"#SBATCH {d}\n" in text
    srun = [ln for ln in text.splitlines() if ln.startswith("srun ")]
    assert len(srun) == 2
    node, allred = (shlex.split(s) for s in srun)
    assert "--ntasks-per-node=1" in node and "--ntasks-per-node=8" in allred
    assert node[node.index("envbuild.cluster.agent") + 1] == "node"
    assert "--only" in node and "NCCL" in text
    assert "MASTER_ADDR=$(" in text and "export MASTER_PORT" in text


def test_cpu_script_has_no_gpu_lines() -> None:
    text = sbatch_script(opts(), Path("/shared/ev/validate.sbatch"))
    assert "--gpus-per-node" not in text and "gloo" in text and "--partition" not in text


@pytest.mark.parametrize(("field", "value"), [
    ("image", "img; rm -rf /"), ("image", "$(id)"), ("image", "a b"), ("image", "../x"),
    ("image", ""), ("partition", "gpu;id"), ("partition", "a b"), ("account", "$(x)"),
    ("job_name", "x\ny"), ("constraint", "a;b"), ("constraint", "$(id)"),
    ("exclude", "n[1-"), ("exclude", "n1;id"), ("only", "facts.torch;id"), ("only", "A B"),
    ("runtime", "podman"), ("nodes", 0), ("nodes", 100000), ("ntasks_per_node", 0),
    ("gpus_per_node", -1), ("time_min", 0), ("timeout", 0.0), ("timeout", -5.0),
    ("min_bytes", 0), ("min_bytes", 3), ("max_bytes", 1 << 40), ("out", Path("rel/dir")),
    ("out", Path("/a b")), ("out", Path("/x$(id)")), ("out", Path("/x\ny")),
])
def test_hostile_options_are_usage_errors(field: str, value: Any) -> None:
    base: dict[str, Any] = {"image": "img:1", "out": Path("/shared/ev"), field: value}
    with pytest.raises(UsageError) as err:
        check_options(ClusterOptions(**base))
    assert err.value.exit_code == EXIT_USAGE


def test_runtimes_command_lines() -> None:
    docker = task_argv(opts(), "node")
    assert docker[:3] == ["/opt/envbuild/bin/python", "-m", "envbuild.cluster.agent"]
    host = task_argv(opts(runtime="host"), "allreduce")
    assert "--runtime" in host and host[host.index("--runtime") + 1] == "host"
    app = task_argv(opts(runtime="apptainer", gpus_per_node=8), "node")
    assert app[:3] == ["apptainer", "exec", "--nv"] and "/shared/ev/image.sif" in app
    assert task_argv(opts(runtime="apptainer", image="/img/x.sif"), "node")[2:4] == \
        ["--bind", "/shared/ev"]
    en = srun_argv(opts(runtime="enroot"), "allreduce")
    assert "--container-image=envbuild/cuda:test" in en
    assert "--container-mounts=/shared/ev:/shared/ev" in en
    assert en[-len(task_argv(opts(runtime="enroot"), "allreduce")):][:2] == \
        ["python", "/shared/ev/envbuild_cluster_worker.py"]
    script = sbatch_script(opts(runtime="apptainer"), Path("/shared/ev/validate.sbatch"))
    assert "apptainer build image.sif docker-daemon://envbuild/cuda:test" in script


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.mark.parametrize("gpus", [0, 8])
def test_k8s_indexed_job_is_valid_against_current_kubernetes(gpus: int) -> None:
    files = k8s_manifests(opts(nodes=3, gpus_per_node=gpus))
    docs = _docs(files["job.yaml"])
    assert [d["kind"] for d in docs] == ["ConfigMap", "Service", "Job"]
    version = kubernetes_validate.latest_version()
    for d in docs:
        kubernetes_validate.validate(d, version, strict=True)
    svc, job = docs[1], docs[2]
    assert svc["spec"]["clusterIP"] == "None"
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == 3
    pod = job["spec"]["template"]["spec"]
    assert pod["subdomain"] == svc["metadata"]["name"]
    limits = pod["containers"][0]["resources"]["limits"]
    assert (limits.get("nvidia.com/gpu") == 8) == (gpus == 8)
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory"
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == f"{job['metadata']['name']}-0.{svc['metadata']['name']}"
    assert docs[0]["data"]["worker.py"] == worker_source()  # the ConfigMap ships it verbatim


def test_k8s_jobset_variant_embeds_a_valid_job() -> None:
    docs = _docs(k8s_manifests(opts(nodes=4, gpus_per_node=8))["jobset.yaml"])
    assert [d["kind"] for d in docs] == ["ConfigMap", "JobSet"]
    js = docs[1]
    assert js["apiVersion"].startswith("jobset.x-k8s.io/")
    assert js["spec"]["network"]["enableDNSHostnames"] is True
    rj = js["spec"]["replicatedJobs"][0]
    # kubernetes-validate has no JobSet schema: its job template is checked as a batch/v1 Job
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "t"},
           **rj["template"]}
    kubernetes_validate.validate(job, kubernetes_validate.latest_version(), strict=True)
    env = {e["name"]: e.get("value")
           for e in rj["template"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    name = js["metadata"]["name"]
    assert env["MASTER_ADDR"] == f"{name}-{rj['name']}-0-0.{name}"


GOLDEN = TESTS / "golden" / "cluster"


def _golden_renders() -> dict[str, str]:
    gpu = opts(nodes=4, ntasks_per_node=8, gpus_per_node=8, partition="gpu", time_min=20)
    k8s = k8s_manifests(opts(nodes=4, gpus_per_node=8))
    return {"gpu-docker.sbatch": sbatch_script(gpu, Path("/shared/ev/validate.sbatch")),
            "cpu-enroot.sbatch": sbatch_script(opts(runtime="enroot"),
                                               Path("/shared/ev/validate.sbatch")),
            "job.yaml": k8s["job.yaml"], "jobset.yaml": k8s["jobset.yaml"]}


@pytest.mark.parametrize("name", sorted(_golden_renders()))
def test_cluster_golden(name: str) -> None:
    text = _golden_renders()[name]
    if os.environ.get("ENVBUILD_UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(parents=True, exist_ok=True)
        (GOLDEN / name).write_text(text)
    assert text == (GOLDEN / name).read_text(), f"{name} differs: regenerate with " \
        "`make golden`, and review the diff"


def test_job_state_and_reason() -> None:
    from envbuild.cluster.slurm import job_state

    out = "JobId=26 JobName=x JobState=PENDING Reason=PartitionConfig Dependency=(null)"
    assert job_state(out) == ("PENDING", "PartitionConfig")
    assert job_state("slurm_load_jobs error: Invalid job id specified") == (None, None)
    assert "PartitionConfig" in RULES.never_start_reasons and "Resources" not in \
        RULES.never_start_reasons


@pytest.mark.parametrize("field", ["image", "partition", "account", "constraint", "only"])
@pytest.mark.parametrize("tail", ["\n", "\r\n", "\x0b", " "])
def test_a_trailing_line_break_is_refused(field: str, tail: str) -> None:
    """`$` in a Python regex matches before a final newline: every value that reaches the sbatch
    script is matched whole (fullmatch), so `p\\n` is refused like any other stray character."""
    good = {"image": "envbuild/cpu:t", "partition": "gpu", "account": "ml",
            "constraint": "a100", "only": "facts.torch"}[field]
    kw: dict[str, Any] = {"image": "envbuild/cpu:t", "out": Path("/tmp/x"), field: good + tail}
    with pytest.raises(UsageError):
        check_options(ClusterOptions(**kw))
    check_options(ClusterOptions(**{**kw, field: good}))


def test_wait_does_not_take_a_busy_controller_for_an_ended_job(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """scontrol failing (slurmctld busy under load) says nothing about the job: _wait asks
    again; only "Invalid job id" or a terminal state ends the wait (CI once cancelled a running
    job after one failed scontrol and reported its nodes missing)."""
    import time as _time

    from envbuild.cluster import slurm
    from envbuild.common import proc

    answers = [(1, "", "slurm_load_jobs error: Socket timed out on send/recv operation"),
               (0, "JobId=7 JobState=RUNNING Reason=None", ""),
               (1, "", "slurm_load_jobs error: Unable to contact slurm controller"),
               (0, "JobId=7 JobState=COMPLETED Reason=None", "")]
    asked = []

    def fake_run(argv, **_: object) -> proc.Result:  # type: ignore[no-untyped-def]
        rc, out, err = answers[len(asked)]
        asked.append(argv)
        return proc.Result(tuple(argv), rc, out, err, 0.0)

    monkeypatch.setattr(slurm.proc, "run", fake_run)
    monkeypatch.setattr(slurm.time, "sleep", lambda _s: None)
    slurm._wait("7", _time.monotonic() + 60, ())
    assert len(asked) == 4
    asked.clear()
    answers[:] = [(1, "", "slurm_load_jobs error: Invalid job id specified")]
    slurm._wait("7", _time.monotonic() + 60, ())
    assert len(asked) == 1
