"""What one Slurm task runs on its node for the docker and host runtimes (thin process layer).

  python -m envbuild.cluster.agent node --runtime docker --image IMG   the in-image validator
  python -m envbuild.cluster.agent allreduce --runtime docker ...      one all-reduce rank
  python -m envbuild.cluster.agent rendezvous                          prints MASTER_ADDR

Each prints one JSON line (`{"envbuild_cluster": 1, ...}`) into the step's log. Docker goes
through envbuild.engine.docker, every other process through envbuild.common.proc. SIGTERM
(scancel, a killed srun) removes the task's container before the agent exits: nothing is left
running on the node.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from envbuild.cluster.hosts import (
    CLUSTER_FAULT_ENV,
    FAULT_ENV,
    faults_for_node,
    first_host,
    injected_versions,
    node_addr,
)
from envbuild.cluster.report import MARK
from envbuild.common import signals
from envbuild.common.boundedio import parse_json
from envbuild.common.errors import EnvbuildError

ROLE = "cluster"
RUN_ENV = "ENVBUILD_CLUSTER_RUN"


def node_name() -> str:
    import socket

    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def _labels(step: str) -> dict[str, str]:
    from envbuild.engine import docker

    return {docker.LABEL_ROLE: ROLE, "io.envbuild.cluster-run": os.environ.get(RUN_ENV, "-"),
            "io.envbuild.cluster-step": step, "io.envbuild.cluster-node": node_name()}


def _parse_json(text: str) -> dict[str, Any] | None:
    start = text.find("{")
    if start < 0:
        return None
    try:
        data = parse_json(text[start:])
    except ValueError:  # TooDeep included
        return None
    return data if isinstance(data, dict) else None


def run_validator(runtime: str, image: str, args: list[str], env: dict[str, str],
                  timeout: float) -> tuple[int, dict[str, Any] | None, str]:
    """THE adapter to the validator: (exit code, JSON report or None, output tail).

    docker: `envbuild-validate --json ARGS` inside the image; host: this node's Python running
    the validator module. The one place to change when the validator's entry point moves.
    """
    if runtime == "docker":
        from envbuild.engine import docker

        labels = docker.image_labels(image)
        target = labels.get("io.envbuild.target", "cpu")
        gpus = target == "cuda" and docker.gpu_runtime()
        r = docker.run_container(image, ["envbuild-validate", "--json", *args], target=target,
                                 gpus=gpus, timeout=timeout, labels=_labels("node"),
                                 environment=env)
        if r.timed_out:
            return 124, None, f"the validator did not finish within {timeout:.0f} s"
        return r.exit_code, _parse_json(r.output), r.output[-400:]
    from envbuild.common import proc
    from envbuild.engine.validate import host_spec
    from envbuild.matrix import load
    from envbuild.render.context import peaks_json

    with tempfile.TemporaryDirectory(prefix="envbuild-cluster-") as tmp:
        peaks = Path(tmp, "peaks.json")
        peaks.write_text(peaks_json(load()))
        spec = Path(tmp, "spec.json")
        spec.write_text(json.dumps(host_spec()))
        argv = [sys.executable, "-m", "envbuild.validator", "--json", "--peaks", str(peaks),
                "--spec", str(spec), *args]
        res = proc.run(argv, timeout=timeout, check=False, env={**os.environ, **env})
        return res.returncode, _parse_json(res.stdout), (res.stderr or res.stdout)[-400:]


def emit(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({MARK: 1, **line}) + "\n")
    sys.stdout.flush()


def step_node(a: argparse.Namespace) -> int:
    node = node_name()
    env: dict[str, str] = {}
    fault = faults_for_node(os.environ.get(FAULT_ENV), node)
    if fault:
        env[FAULT_ENV] = fault
    args = ["--only", a.only] if a.only else []
    line: dict[str, Any] = {"kind": "node", "node": node, "exit_code": None, "report": None,
                            "error": None}
    try:
        code, report, tail = run_validator(a.runtime, a.image, args, env, a.timeout)
        line.update(exit_code=code, report=report)
        if report is None:
            line["error"] = f"the validator could not run (exit {code}): {tail.strip()[-200:]}"
    except EnvbuildError as exc:
        line["error"] = exc.message
    injected = injected_versions(os.environ.get(CLUSTER_FAULT_ENV), node)
    if injected:
        line["injected"] = injected
    emit(line)
    return 0 if line["exit_code"] == 0 else 1


def step_allreduce(a: argparse.Namespace) -> int:
    from envbuild.cluster.render import worker_source

    node = node_name()
    wargs = ["allreduce", "--min-bytes", str(a.min_bytes), "--max-bytes", str(a.max_bytes),
             "--iters", str(a.iters), "--timeout", str(int(a.timeout))]
    keep = ("MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
            "SLURMD_NODENAME", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "NCCL_DEBUG",
            "NCCL_IB_HCA")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env["ENVBUILD_NODE_NAME"] = node
    line: dict[str, Any] | None = None
    try:
        if a.runtime == "docker":
            from envbuild.engine import docker

            target = docker.image_labels(a.image).get("io.envbuild.target", "cpu")
            gpus = target == "cuda" and docker.gpu_runtime()
            r = docker.run_container(a.image, ["python", "-c", worker_source(), *wargs],
                                     target=target, gpus=gpus, timeout=a.timeout,
                                     labels=_labels("allreduce"), environment=env,
                                     network_host=True)
            output, code = r.output, r.exit_code
        else:
            from envbuild.common import proc

            with tempfile.TemporaryDirectory(prefix="envbuild-cluster-") as tmp:
                script = Path(tmp, "worker.py")
                script.write_text(worker_source())
                res = proc.run([sys.executable, str(script), *wargs], timeout=a.timeout,
                               check=False, env={**os.environ, **env})
                output, code = res.stdout, res.returncode
        found = [x for x in (_parse_json(s) for s in output.splitlines()) if x and MARK in x]
        line = found[-1] if found else None
        if line is None:
            line = {MARK: 1, "kind": "allreduce", "node": node,
                    "rank": int(os.environ.get("SLURM_PROCID", "0")), "exact": False,
                    "results": [], "error": f"the all-reduce task died (exit {code}): "
                    f"{output.strip()[-200:]}"}
    except EnvbuildError as exc:
        line = {MARK: 1, "kind": "allreduce", "node": node,
                "rank": int(os.environ.get("SLURM_PROCID", "0")), "exact": False,
                "results": [], "error": exc.message}
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()
    return 0 if not line.get("error") else 1


def rendezvous() -> str:
    """MASTER_ADDR: ENVBUILD_MASTER_ADDR, else the NodeAddr Slurm has for the first host of
    SLURM_JOB_NODELIST (several slurmd on one host share 127.0.0.1), else that host's name."""
    override = os.environ.get("ENVBUILD_MASTER_ADDR")
    if override:
        return override
    first = first_host(os.environ.get("SLURM_JOB_NODELIST", ""))
    from envbuild.common import proc

    try:
        r = proc.run(["scontrol", "show", "node", first], timeout=30, check=False)
        addr = node_addr(r.stdout) if r.ok else None
    except proc.ProcessError:
        addr = None
    return addr or first


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m envbuild.cluster.agent")
    p.add_argument("step", choices=["node", "allreduce", "rendezvous"])
    p.add_argument("--runtime", choices=["docker", "host"], default="docker")
    p.add_argument("--image", default="")
    p.add_argument("--timeout", type=float, default=1800.0)
    p.add_argument("--only")
    p.add_argument("--min-bytes", type=int, default=1 << 20)
    p.add_argument("--max-bytes", type=int, default=1 << 30)
    p.add_argument("--iters", type=int, default=5)
    a = p.parse_args(argv)
    # exit 128 + the signal, unwinding: the container is removed in run_container
    signals.install((signal.SIGTERM, signal.SIGINT), lambda signum: SystemExit(128 + signum))
    if a.step == "rendezvous":
        try:
            print(rendezvous())
        except EnvbuildError as exc:
            sys.stderr.write(f"error: {exc.message}\n")
            return 2
        return 0
    return step_node(a) if a.step == "node" else step_allreduce(a)


if __name__ == "__main__":
    sys.exit(main())
