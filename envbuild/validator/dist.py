"""dist.allreduce: two processes rendezvous over localhost and all-reduce (gloo; NCCL with
>= 2 GPUs)."""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import time
from typing import Any

from .context import TorchContext
from .judges import (
    Outcome,
    _err,
    _gpu_present,
    device_coverage_rows,
    failed,
    passed,
    skipped,
)
from .probes import import_torch
from .procs import exit_with_parent, kill_tree, self_argv


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def t_dist_allreduce(ctx: TorchContext) -> Outcome:
    torch = ctx.torch
    facts = ctx.device_facts()
    if not facts["torch"].get("distributed"):
        return skipped("torch.distributed is not available in this torch build")
    dev = facts["devices"]
    rows = device_coverage_rows(facts) if _gpu_present(facts) else []
    gpus = [r for r in rows if r["covered"]] if dev["backend"] in ("cuda", "rocm") else []
    backend = "nccl" if len(gpus) >= 2 else "gloo"
    if backend == "gloo" and not torch.distributed.is_gloo_available():
        return skipped("this torch build has no gloo backend")
    world, limit = 2, 60.0 * ctx.opts.timeout_scale
    env = dict(os.environ)
    if platform.system() == "Linux":
        # The loopback interface always exists; hostname resolution inside containers may not.
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        env.setdefault("NCCL_SOCKET_IFNAME", "lo")
    port = _free_port()
    procs: list[subprocess.Popen[str]] = []
    outputs: list[dict[str, Any]] = []
    t0 = time.monotonic()
    try:
        for rank in range(world):
            cfg = {"rank": rank, "world": world, "port": port, "backend": backend,
                   "timeout": max(10.0, limit - 10.0)}
            procs.append(subprocess.Popen(
                [*self_argv(), "--_dist-child", json.dumps(cfg)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, env=env))
        for rank, p in enumerate(procs):
            remaining = max(1.0, limit - (time.monotonic() - t0))
            try:
                out, err = p.communicate(timeout=remaining)
            except subprocess.TimeoutExpired:
                for q in procs:
                    kill_tree(q, group=False)
                out, err = p.communicate()
                outputs.append({"rank": rank, "timeout": True, "stderr_tail": (err or "")[-800:]})
                continue
            last = (out or "").strip().splitlines()[-1:] or ["{}"]
            try:
                res = json.loads(last[0])
            except ValueError:
                res = {"ok": False, "error": "no result line", "stdout_tail": (out or "")[-400:]}
            res.update(rank=rank, returncode=p.returncode)
            if p.returncode != 0 or not res.get("ok"):
                res["stderr_tail"] = (err or "")[-800:]
            outputs.append(res)
    finally:
        for q in procs:
            kill_tree(q, group=False)
    ev = {"backend": backend, "world_size": world, "port": port, "ranks": outputs,
          "seconds": round(time.monotonic() - t0, 3), "gpus": len(gpus)}
    if any(o.get("timeout") for o in outputs):
        return failed(
            "the 2-process all-reduce timed out: processes cannot rendezvous over localhost TCP "
            "or a collective hangs; check firewalls/loopback, GLOO_SOCKET_IFNAME / "
            "NCCL_SOCKET_IFNAME, and /dev/shm size (NCCL uses it)", "all-reduce timed out", ev)
    bad = [o for o in outputs if o.get("returncode") != 0 or not o.get("ok")]
    if bad:
        first = bad[0]
        return failed(
            "the 2-process all-reduce failed: see evidence.ranks[].error/stderr_tail (NCCL: set "
            "NCCL_DEBUG=INFO; check /dev/shm size and --ipc=host for multi-GPU)",
            f"rank {first.get('rank')}: "
            f"{first.get('error') or 'exit ' + str(first.get('returncode'))}",
            ev)
    return passed(f"{backend} all-reduce across {world} processes exact", ev)


def dist_child(cfg: dict[str, Any]) -> int:
    exit_with_parent()
    result: dict[str, Any] = {"ok": False}
    try:
        import datetime

        torch = import_torch()
        dist = torch.distributed
        rank, world, backend = int(cfg["rank"]), int(cfg["world"]), str(cfg["backend"])
        device = "cpu"
        if backend == "nccl":
            torch.cuda.set_device(rank)
            device = f"cuda:{rank}"
        t0 = time.monotonic()
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{cfg['port']}", rank=rank,
                                world_size=world,
                                timeout=datetime.timedelta(seconds=float(cfg["timeout"])))
        result["init_s"] = round(time.monotonic() - t0, 3)
        t = torch.arange(1024, dtype=torch.float32, device=device) * (rank + 1)
        dist.all_reduce(t)
        expected = torch.arange(1024, dtype=torch.float32) * (world * (world + 1) / 2)
        result["ok"] = bool(torch.equal(t.cpu(), expected))
        if not result["ok"]:
            result["error"] = (f"all_reduce gave {t[:4].tolist()}..., "
                               f"expected {expected[:4].tolist()}...")
        dist.destroy_process_group()
    except Exception as e:
        result["error"] = _err(e)
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1
