"""The task that runs INSIDE the image on every rank (standalone: stdlib + torch, no envbuild).

Like the validator, this file is shipped into the environment under test (as `python -c SOURCE`
through docker, copied next to the job for apptainer/enroot, a ConfigMap on Kubernetes), so it
cannot import envbuild. It prints exactly one JSON line on stdout, starting with
`{"envbuild_cluster": 1`, which the controller (or `envbuild cluster collect`) reads.

Modes:
  allreduce  torch.distributed: init from MASTER_ADDR/MASTER_PORT and the rank variables
             (RANK/WORLD_SIZE, else Slurm's SLURM_PROCID/SLURM_NTASKS, else the indexed Job's
             JOB_COMPLETION_INDEX x tasks), an exact-result all-reduce, then a bandwidth sweep
             over powers of two from --min-bytes to --max-bytes (seconds per op, per size).
  node       the validator (`envbuild-validate --json`) for this node, as one line; faults
             in ENVBUILD_VALIDATOR_FAULT with an `@NODE` suffix reach only that node.
  pod        the validator (`envbuild-validate --json`) and then `allreduce`, as one line: what a
             Kubernetes pod prints for `envbuild cluster collect`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta
from typing import Any

MARK = "envbuild_cluster"


def _emit(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({MARK: 1, **line}) + "\n")
    sys.stdout.flush()


def _rank_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun/k8s, Slurm, or a single task."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", "0"))
    if "SLURM_PROCID" in env:
        return (int(env["SLURM_PROCID"]), int(env.get("SLURM_NTASKS", "1")),
                int(env.get("SLURM_LOCALID", "0")))
    if "JOB_COMPLETION_INDEX" in env:
        per = int(env.get("ENVBUILD_TASKS_PER_NODE", "1"))
        nodes = int(env.get("ENVBUILD_NODES", "1"))
        return int(env["JOB_COMPLETION_INDEX"]) * per, nodes * per, 0
    return 0, 1, 0


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or os.environ.get("ENVBUILD_NODE_NAME") \
        or socket.gethostname()


def allreduce(min_bytes: int, max_bytes: int, iters: int, warmup: int,
              timeout_s: float) -> dict[str, Any]:
    rank, world, local = _rank_env()
    out: dict[str, Any] = {"kind": "allreduce", "node": node_name(), "rank": rank,
                           "world_size": world, "backend": None, "exact": False,
                           "results": [], "error": None}
    try:
        import torch
        import torch.distributed as dist
    except Exception as exc:
        out["error"] = f"import torch failed: {exc}"
        return out
    gpu = torch.cuda.is_available()
    backend = "nccl" if gpu else "gloo"
    out["backend"] = backend
    out["torch"] = torch.__version__
    device = torch.device("cpu")
    if gpu:
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
    try:
        t0 = time.monotonic()
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world,
                                timeout=timedelta(seconds=timeout_s))
        out["init_s"] = round(time.monotonic() - t0, 3)
        # exact result: every rank adds rank+1, small integers are exact in float32
        x = torch.full((1024,), float(rank + 1), dtype=torch.float32, device=device)
        dist.all_reduce(x)
        want = world * (world + 1) / 2
        out["exact"] = bool(torch.all(x == want).item())
        if not out["exact"]:
            out["error"] = f"all-reduce gave {x[:4].tolist()}, expected {want} everywhere"
        size = min_bytes
        while size <= max_bytes:
            t = torch.ones(size // 4, dtype=torch.float32, device=device)
            for _ in range(warmup):
                dist.all_reduce(t)
            if gpu:
                torch.cuda.synchronize()
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t)
            if gpu:
                torch.cuda.synchronize()
            out["results"].append({"bytes": size,
                                   "seconds": (time.perf_counter() - start) / iters})
            del t
            size *= 2
        dist.barrier()
        dist.destroy_process_group()
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return out


def _faults_for(text: str, node: str) -> str:
    """Same rule as envbuild.cluster.hosts.faults_for_node (this file cannot import envbuild)."""
    keep = []
    for item in (x.strip() for x in text.split(",")):
        body, at, target = item.rpartition("@")
        if item and not at:
            keep.append(item)
        elif item and target == node and body:
            keep.append(body)
    return ",".join(keep)


def validator(args: list[str], timeout_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "node", "node": node_name(), "exit_code": None,
                           "report": None, "error": None}
    env = dict(os.environ)
    fault = _faults_for(env.pop("ENVBUILD_VALIDATOR_FAULT", ""), out["node"])
    if fault:
        env["ENVBUILD_VALIDATOR_FAULT"] = fault
    try:
        p = subprocess.run(["envbuild-validate", "--json", *args], capture_output=True,
                           text=True, timeout=timeout_s, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        out["error"] = f"validator: {exc}"
        return out
    out["exit_code"] = p.returncode
    start = p.stdout.find("{")
    try:
        out["report"] = json.loads(p.stdout[start:]) if start >= 0 else None
    except ValueError:
        out["error"] = "the validator printed no JSON report"
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="envbuild-cluster-worker")
    p.add_argument("mode", choices=["allreduce", "node", "pod"])
    p.add_argument("--min-bytes", type=int, default=1 << 20)
    p.add_argument("--max-bytes", type=int, default=1 << 30)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--validator-arg", action="append", default=[])
    a = p.parse_args(argv)
    ar = allreduce(a.min_bytes, a.max_bytes, a.iters, a.warmup, a.timeout) \
        if a.mode == "allreduce" else None
    if a.mode == "node":
        node = validator(a.validator_arg, a.timeout)
        _emit(node)
        return 0 if node["exit_code"] == 0 else 1
    if a.mode == "pod":
        node = validator(a.validator_arg, a.timeout)
        ar = allreduce(a.min_bytes, a.max_bytes, a.iters, a.warmup, a.timeout)
        _emit({**node, "kind": "pod", "rank": ar["rank"], "allreduce": ar})
        return 0
    assert ar is not None
    _emit(ar)
    return 0 if ar["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
