"""Helpers shared by the cluster tests and others (moved out of test_cluster.py)."""

from __future__ import annotations

import copy
import json
from typing import Any

from tests.support import FIXTURES

FIX = FIXTURES / "cluster"
H100 = json.loads((FIX / "h100-validate.json").read_text())


def node_line(node: str, rep: dict[str, Any] | None = None, *, scale: float = 1.0,
              torch: str | None = None, exit_code: int = 0) -> dict[str, Any]:
    r = copy.deepcopy(rep if rep is not None else H100)
    for c in r["checks"]:
        if c["id"] in ("perf.matmul", "perf.mem_bw"):
            c["evidence"]["measured"] = {k: v * scale
                                         for k, v in c["evidence"]["measured"].items()}
        if c["id"] == "facts.torch" and torch:
            c["evidence"]["version"] = torch
    r["summary"]["status"] = "pass"
    return {"envbuild_cluster": 1, "kind": "node", "node": node, "exit_code": exit_code,
            "report": r, "error": None}


def ar_line(rank: int, world: int, seconds: float = 0.01, *, exact: bool = True,
            error: str | None = None) -> dict[str, Any]:
    return {"envbuild_cluster": 1, "kind": "allreduce", "node": f"n{rank + 1}", "rank": rank,
            "world_size": world, "backend": "nccl", "exact": exact, "error": error,
            "results": [{"bytes": 1 << 20, "seconds": seconds / 64},
                        {"bytes": 1 << 26, "seconds": seconds}]}

