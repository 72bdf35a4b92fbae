"""The cluster report: pure judgement over what every task printed (no processes, no I/O).

Inputs are the JSON lines the tasks print (`{"envbuild_cluster": 1, "kind": ...}`): one `node`
line per node (the validator's report), one `allreduce` line per rank, or one `pod` line per
Kubernetes pod (both in one). Thresholds come from matrix/cluster.toml (see `ClusterRules`).
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from typing import Any

from envbuild.cluster.hosts import compress, sort_key
from envbuild.common.boundedio import parse_json
from envbuild.common.record import record

MARK = "envbuild_cluster"
VERSION_KEYS = ("driver", "torch", "cuda", "cudnn", "nccl")


@record
class Fabric:
    name: str
    match: str
    gpus_per_node: int
    nodes: int
    busbw_floor_gbs: float
    source: str


@record
class ClusterRules:
    straggler_fraction: float = 0.10
    min_nodes_for_median: int = 2
    drift_keys: tuple[str, ...] = ("driver", "torch", "cuda", "cudnn", "nccl", "gpu")
    min_bytes: int = 1 << 20
    max_bytes: int = 1 << 30
    iters: int = 5
    warmup: int = 2
    fabrics: tuple[Fabric, ...] = field(default_factory=tuple)
    never_start_reasons: tuple[str, ...] = ()
    fabric_names: tuple[str, ...] = ()


def rules_from_toml(doc: Mapping[str, Any]) -> ClusterRules:
    judge = doc.get("judge", {})
    ar = doc.get("allreduce", {})
    fabrics = tuple(Fabric(str(f["name"]), str(f["match"]), int(f["gpus_per_node"]),
                           int(f["nodes"]), float(f["busbw_floor_gbs"]), str(f["source"]))
                    for f in doc.get("fabric", []))
    return ClusterRules(float(judge["straggler_fraction"]), int(judge["min_nodes_for_median"]),
                        tuple(str(k) for k in judge["drift_keys"]), int(ar["min_bytes"]),
                        int(ar["max_bytes"]), int(ar["iters"]), int(ar["warmup"]), fabrics,
                        tuple(str(r) for r in doc.get("slurm", {}).get("never_start_reasons",
                                                                         [])),
                        tuple(str(f) for f in judge.get("fabrics", [])))


# ---------------------------------------------------------------------------------------------
# Reading task output


def parse_lines(text: str) -> list[dict[str, Any]]:
    """Every envbuild cluster line in a log (kubectl logs --prefix, srun output, ...)."""
    out = []
    for raw in text.splitlines():
        start = raw.find("{")
        if start < 0 or MARK not in raw:
            continue
        try:
            obj = parse_json(raw[start:])
        except ValueError:  # TooDeep included
            continue
        if isinstance(obj, dict) and obj.get(MARK) == 1 and isinstance(obj.get("kind"), str):
            out.append(obj)
    return out


def _checks(report: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    if not report:
        return {}
    return {str(c.get("id")): c for c in report.get("checks", []) if isinstance(c, Mapping)}


def _evidence(checks: Mapping[str, Mapping[str, Any]], cid: str) -> Mapping[str, Any]:
    ev = checks.get(cid, {}).get("evidence")
    return ev if isinstance(ev, Mapping) else {}


def _cudnn(raw: Any) -> str | None:
    if isinstance(raw, int) and raw > 0:  # torch.backends.cudnn.version(): 91900 -> 9.19.0
        major, rest = divmod(raw, 10000) if raw >= 10000 else divmod(raw, 1000)
        minor, patch = divmod(rest, 100)
        return f"{major}.{minor}.{patch}"
    return str(raw) if raw else None


def versions_of(report: Mapping[str, Any] | None) -> dict[str, str | None]:
    checks = _checks(report)
    torch = _evidence(checks, "facts.torch")
    count = _evidence(checks, "device.count")
    driver = count.get("driver")
    if isinstance(driver, str):
        m = re.search(r"\b(\d{3,}\.\d+(?:\.\d+)?)\b", driver)
        driver = m.group(1) if m else driver
    props = _evidence(checks, "device.properties").get("devices") or []
    names = count.get("names") or []
    gpu = None
    if props and isinstance(props[0], Mapping):
        gpu = props[0].get("name")
    elif names:
        gpu = names[0]
    return {"driver": driver or None, "torch": torch.get("version"),
            "cuda": torch.get("cuda") or torch.get("hip"), "cudnn": _cudnn(torch.get("cudnn")),
            "nccl": torch.get("nccl"), "gpu": gpu}


def perf_of(report: Mapping[str, Any] | None) -> dict[str, Any]:
    """The per-node numbers stragglers are judged on: perf.matmul and perf.mem_bw measurements."""
    checks = _checks(report)
    out: dict[str, Any] = {}
    for cid in ("perf.matmul", "perf.mem_bw"):
        ev = _evidence(checks, cid)
        measured = ev.get("measured")
        if isinstance(measured, Mapping):
            out.update({str(k): v for k, v in measured.items() if isinstance(v, (int, float))})
        if ev.get("device") and "device" not in out:
            out["device"] = ev["device"]
    return out


def node_status(line: Mapping[str, Any] | None) -> str:
    if line is None:
        return "missing"
    report = line.get("report")
    if line.get("error") or not isinstance(report, Mapping):
        return "fail"
    summary = report.get("summary") or {}
    status = str(summary.get("status", "fail"))
    if line.get("exit_code") not in (0, None) and status != "fail":
        status = "fail"
    return status if status in ("pass", "warn", "fail", "skip") else "fail"


# ---------------------------------------------------------------------------------------------
# Judgement


def _majority(values: Sequence[tuple[str, str]]) -> str:
    """The most common value; a tie goes to the value of the first node (in hostlist order)."""
    counts = Counter(v for _, v in values)
    top = max(counts.values())
    for _, v in values:
        if counts[v] == top:
            return v
    raise AssertionError("unreachable")


def drift(nodes: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> list[dict[str, Any]]:
    """Nodes whose driver / torch / CUDA / cuDNN / NCCL / GPU model differ from the majority."""
    found = []
    for key in keys:
        values = [(str(n["node"]), str(n["versions"][key])) for n in nodes
                  if n.get("versions", {}).get(key) is not None]
        if len({v for _, v in values}) < 2:
            continue
        majority = _majority(values)
        found += [{"node": node, "key": key, "value": v, "majority": majority}
                  for node, v in values if v != majority]
    return found


def stragglers(nodes: Sequence[Mapping[str, Any]], fraction: float,
               min_nodes: int) -> list[dict[str, Any]]:
    """Nodes more than `fraction` below the median of the nodes with the same GPU model, per
    metric (every numeric perf.matmul / perf.mem_bw measurement)."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for n in nodes:
        perf = n.get("perf") or {}
        model = n.get("versions", {}).get("gpu")  # GPUs only: a CPU's numbers get no verdict
        if model and perf:
            groups.setdefault(str(model), []).append(n)
    out = []
    for model, members in sorted(groups.items()):
        metrics = sorted({k for m in members for k, v in m["perf"].items()
                          if isinstance(v, (int, float)) and not isinstance(v, bool)})
        for metric in metrics:
            vals = [(str(m["node"]), float(m["perf"][metric])) for m in members
                    if isinstance(m["perf"].get(metric), (int, float))]
            if len(vals) < max(min_nodes, 2):
                continue
            med = statistics.median(v for _, v in vals)
            if med <= 0:
                continue
            out += [{"node": node, "gpu": model, "metric": metric, "value": round(v, 3),
                     "median": round(med, 3), "ratio": round(v / med, 3)}
                    for node, v in vals if v < med * (1.0 - fraction)]
    return out


def algbw_gbs(nbytes: int, seconds: float) -> float:
    """nccl-tests: algorithm bandwidth = bytes / time (GB/s, 1e9)."""
    return nbytes / seconds / 1e9 if seconds > 0 else 0.0


def busbw_gbs(algbw: float, world_size: int) -> float:
    """nccl-tests, all_reduce: busbw = algbw x 2(n-1)/n; 0 for a single rank (no traffic)."""
    return algbw * 2 * (world_size - 1) / world_size if world_size > 0 else 0.0


def check_fabric(rules: ClusterRules, fabric: str | None) -> str | None:
    from envbuild.common.errors import UsageError

    if fabric is not None and fabric not in rules.fabric_names:
        raise UsageError(f"unknown --fabric {fabric[:40]!r}",
                         f"one of {', '.join(rules.fabric_names)} (matrix/cluster.toml)")
    return fabric


def fabric_floor(rules: ClusterRules, fabric: str | None, gpu: str | None, gpus_per_node: int,
                 nodes: int) -> Fabric | None:
    if not fabric or not gpu:
        return None
    for f in rules.fabrics:
        if (f.name == fabric and f.gpus_per_node == gpus_per_node and f.nodes == nodes
                and re.search(rf"\b{re.escape(f.match)}\b", gpu, re.IGNORECASE)):
            return f
    return None


def allreduce_summary(lines: Sequence[Mapping[str, Any]], world_size: int, *,
                      rules: ClusterRules, fabric: str | None = None, gpu: str | None = None,
                      gpus_per_node: int = 0, nodes: int = 0) -> dict[str, Any]:
    """One all-reduce result from every rank's line: the slowest rank's time per size."""
    backend = next((str(x["backend"]) for x in lines if x.get("backend")), None)
    errors = [f"rank {x.get('rank')} ({x.get('node')}): {x['error']}" for x in lines
              if x.get("error")]
    ranks = sorted({int(x["rank"]) for x in lines if isinstance(x.get("rank"), int)})
    missing = [r for r in range(world_size) if r not in ranks]
    times: dict[int, float] = {}
    for x in lines:
        for r in x.get("results") or []:
            b, s = int(r["bytes"]), float(r["seconds"])
            times[b] = max(times.get(b, 0.0), s)
    results = []
    for b in sorted(times):
        alg = algbw_gbs(b, times[b])
        results.append({"bytes": b, "seconds": round(times[b], 6), "algbw_gbs": round(alg, 3),
                        "busbw_gbs": round(busbw_gbs(alg, world_size), 3)})
    exact = bool(lines) and all(x.get("exact") for x in lines)
    status = "pass" if exact and not errors and not missing and results else "fail"
    if not lines:
        status = "missing"
    out: dict[str, Any] = {"backend": backend, "world_size": world_size, "results": results,
                           "exact": exact, "missing_ranks": missing, "errors": errors,
                           "status": status, "expectation": None}
    floor = fabric_floor(rules, fabric, gpu, gpus_per_node, nodes)
    if floor is not None and results:
        got = results[-1]["busbw_gbs"]
        ok = got >= floor.busbw_floor_gbs
        out["expectation"] = {"fabric": floor.name, "busbw_floor_gbs": floor.busbw_floor_gbs,
                              "bytes": results[-1]["bytes"], "busbw_gbs": got,
                              "status": "pass" if ok else "fail", "source": floor.source}
        if not ok and status == "pass":
            out["status"] = "fail"
    return out


def node_entry(node: str, rank: int, line: Mapping[str, Any] | None) -> dict[str, Any]:
    report = line.get("report") if line else None
    rep = report if isinstance(report, Mapping) else None
    versions = versions_of(rep)
    for item in (line or {}).get("injected") or []:  # test fault: version:KEY=VALUE
        key, _, value = str(item).partition("=")
        if key in versions:
            versions[key] = value
    entry: dict[str, Any] = {"node": node, "rank": rank, "status": node_status(line),
                             "report": rep, "versions": versions, "perf": perf_of(rep)}
    if line and line.get("error"):
        entry["error"] = line["error"]
    if line and line.get("injected"):
        entry["injected"] = list(line["injected"])
    return entry


def build(expected_nodes: Sequence[str], lines: Iterable[Mapping[str, Any]], *,
          rules: ClusterRules, world_size: int | None = None, fabric: str | None = None,
          gpus_per_node: int = 0, note: str | None = None) -> dict[str, Any]:
    """The whole cluster report from the expected hosts and every line the tasks printed."""
    by_node: dict[str, Mapping[str, Any]] = {}
    ar_lines: list[Mapping[str, Any]] = []
    for x in lines:
        kind = x.get("kind")
        if kind in ("node", "pod") and x.get("node") is not None:
            by_node.setdefault(str(x["node"]), x)
        if kind == "allreduce":
            ar_lines.append(x)
        if kind == "pod" and isinstance(x.get("allreduce"), Mapping):
            ar_lines.append(x["allreduce"])
    names = list(expected_nodes) or sorted(by_node, key=sort_key)
    extra = sorted((n for n in by_node if n not in names), key=sort_key)
    nodes = [node_entry(n, i, by_node.get(n)) for i, n in enumerate([*names, *extra])]
    drifted = drift(nodes, rules.drift_keys)
    slow = stragglers(nodes, rules.straggler_fraction, rules.min_nodes_for_median)
    ws = world_size if world_size is not None else max(
        [int(x.get("world_size", 0)) for x in ar_lines] or [len(nodes)])
    gpus = [n["versions"]["gpu"] for n in nodes if n["versions"].get("gpu")]
    allred = allreduce_summary(ar_lines, ws, rules=rules, fabric=fabric,
                               gpu=gpus[0] if gpus else None, gpus_per_node=gpus_per_node,
                               nodes=len(nodes))
    failed = sorted({n["node"] for n in nodes if n["status"] in ("fail", "missing")}
                    | {d["node"] for d in drifted}, key=sort_key)
    exclude = sorted(set(failed) | {s["node"] for s in slow}, key=sort_key)
    ok = not failed and allred["status"] == "pass"
    status = "pass" if ok and not slow else ("warn" if ok else "fail")
    out: dict[str, Any] = {"nodes": nodes, "allreduce": allred, "drift": drifted,
                           "stragglers": slow, "failed_hostlist": compress(failed),
                           "exclude": compress(exclude), "status": status}
    if note:
        out["note"] = note
    return out


def exit_code(report: Mapping[str, Any]) -> int:
    return 0 if report.get("status") in ("pass", "warn") else 1


# ---------------------------------------------------------------------------------------------
# Text


def _fmt_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def render_text(report: Mapping[str, Any]) -> str:
    rows = [("node", "rank", "status", "gpu", "driver", "torch", "cuda", "nccl")]
    for n in report["nodes"]:
        v = n["versions"]
        rows.append((n["node"], str(n["rank"]), n["status"], v.get("gpu") or "-",
                     v.get("driver") or "-", v.get("torch") or "-", v.get("cuda") or "-",
                     v.get("nccl") or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in rows]
    for n in report["nodes"]:
        if n["status"] in ("fail", "missing"):
            why = n.get("error") or ("never reported" if n["status"] == "missing" else "")
            if not why and n.get("report"):
                why = ", ".join(f"{c['id']}: {c.get('detail') or c.get('status')}"
                                for c in n["report"].get("checks", []) if c.get("status") == "fail")
            lines.append(f"  {n['node']}: {n['status']}" + (f" ({why[:160]})" if why else ""))
    for d in report["drift"]:
        lines.append(f"drift: {d['node']} {d['key']} {d['value']} (majority {d['majority']})")
    for s in report["stragglers"]:
        lines.append(f"straggler: {s['node']} {s['metric']} {s['value']} = {s['ratio']:.0%} of "
                     f"the {s['gpu']} median {s['median']}")
    ar = report["allreduce"]
    lines.append(f"all-reduce: {ar['status']} ({ar['backend'] or '-'}, world size "
                 f"{ar['world_size']}, exact result: {'yes' if ar['exact'] else 'no'})")
    for r in ar["results"]:
        lines.append(f"  {_fmt_bytes(r['bytes']):>8}  algbw {r['algbw_gbs']:9.3f} GB/s  "
                     f"busbw {r['busbw_gbs']:9.3f} GB/s")
    for e in ar["errors"]:
        lines.append(f"  {e[:200]}")
    exp = ar.get("expectation")
    if exp:
        lines.append(f"  {exp['fabric']} floor {exp['busbw_floor_gbs']} GB/s busbw: "
                     f"{exp['status']} ({exp['busbw_gbs']})")
    elif ar["results"]:
        lines.append("  no fabric expectation in matrix/cluster.toml for this shape: no verdict")
    if report.get("note"):
        lines.append(f"note: {report['note']}")
    if report["failed_hostlist"]:
        lines.append(f"failed: {report['failed_hostlist']}")
    lines.append(f"status: {report['status']}")
    if report["exclude"]:
        lines.append(f"--exclude={report['exclude']}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# JUnit


def _node_problem(n: Mapping[str, Any]) -> Any:
    """A node that failed without a failed check to show it (never reported, no report, an
    error, a non-zero exit): one more testcase, NODE.node."""
    from envbuild.core.junit import Check

    checks = (n.get("report") or {}).get("checks") or []
    if n["status"] == "missing":
        return Check("node.report", "error", "the node reported", "never reported")
    if n.get("error") or not n.get("report"):
        return Check("node.report", "error", "the node reported",
                     str(n.get("error") or "no validator report"))
    if n["status"] == "fail" and not any(c.get("status") == "fail" for c in checks
                                         if isinstance(c, Mapping)):
        return Check("node.status", "fail", "the node's validator passed",
                     "the validator exited non-zero although no check failed")
    return None


def allreduce_problems(ar: Mapping[str, Any]) -> list[str]:
    """Why the all-reduce itself did not work (errors, ranks that never reported, an inexact
    result, nothing timed); [] when it did. The fabric's bandwidth floor is not one of them: that
    is cluster.busbw's verdict."""
    if ar["status"] == "missing":
        return ["no rank reported an all-reduce result"]
    out = list(ar["errors"])
    if ar["missing_ranks"]:
        out.append(f"{len(ar['missing_ranks'])} of {ar['world_size']} ranks never reported: "
                   + ", ".join(map(str, ar["missing_ranks"])))
    if not ar["exact"] and not ar["errors"]:  # a rank's error says why already
        out.append("the reduced values were not exact on every rank")
    if not ar["results"] and not out:
        out.append("no message size was timed")
    return out


def _cluster_checks(report: Mapping[str, Any]) -> tuple[Any, ...]:
    from envbuild.core.junit import Check

    ar = report["allreduce"]
    problems = allreduce_problems(ar)
    done = (f"exact on {ar['world_size']} ranks, {len(ar['results'])} sizes timed"
            if not problems else "")
    ar_check = Check("cluster.allreduce", "fail" if problems else "pass",
                     f"all-reduce across {ar['world_size']} ranks ({ar['backend'] or '-'})",
                     "; ".join(problems) or done)
    exp = ar.get("expectation")
    title = "all-reduce bus bandwidth against the fabric's floor"
    busbw = Check("cluster.busbw", "skip", title,
                  "no fabric floor in matrix/cluster.toml for this shape (or no --fabric)") \
        if not exp else Check(
            "cluster.busbw", exp["status"], title,
            f"{exp['busbw_gbs']} GB/s busbw at {_fmt_bytes(exp['bytes'])}: "
            + ("below" if exp["status"] != "pass" else "at or above")
            + f" the {exp['fabric']} floor of {exp['busbw_floor_gbs']} GB/s")
    drift_ = report["drift"]
    drift_check = Check("cluster.drift", "fail" if drift_ else "pass",
                        "every node has the majority's driver, torch, CUDA, cuDNN, NCCL, GPU",
                        "; ".join(f"{d['node']} {d['key']} {d['value']} (majority "
                                  f"{d['majority']})" for d in drift_))
    slow = report["stragglers"]
    slow_check = Check("cluster.stragglers", "warn" if slow else "pass",
                       "no node far below its GPU model's median",
                       "; ".join(f"{s['node']} {s['metric']} {s['value']} = {s['ratio']:.0%} "
                                 f"of the median {s['median']}" for s in slow))
    return ar_check, busbw, drift_check, slow_check


def junit_suites(report: Mapping[str, Any]) -> list[Any]:
    """The cluster report as JUnit suites: one per node (its validator's checks, classnames
    NODE.GROUP; a node that failed without a failed check gets one more testcase), then one for
    the cluster (all-reduce, bus bandwidth, drift, stragglers)."""
    import dataclasses

    from envbuild.core.junit import Suite, seconds, validation_suite

    out = []
    for n in report["nodes"]:
        rep = n.get("report")
        suite = validation_suite(rep if isinstance(rep, Mapping) else {}, f"node {n['node']}",
                                 f"{n['node']}.")
        extra = _node_problem(n)
        out.append(dataclasses.replace(suite, hostname=str(n["node"]),
                                       checks=suite.checks + ((extra,) if extra else ())))
    job = report.get("job") or {}
    out.append(Suite("cluster", _cluster_checks(report),
                     seconds=seconds(job.get("seconds")) if isinstance(job, Mapping) else None))
    return out
