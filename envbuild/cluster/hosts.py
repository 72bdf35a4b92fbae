"""Hostlists (Slurm's `n[1-3,7]` syntax, through python-hostlist), fault routing, rendezvous."""

from __future__ import annotations

import re
from collections.abc import Iterable

from envbuild.common.errors import UsageError

FAULT_ENV = "ENVBUILD_VALIDATOR_FAULT"
CLUSTER_FAULT_ENV = "ENVBUILD_CLUSTER_FAULT"
_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$", re.ASCII)


def expand(hostlist_expr: str) -> list[str]:
    """`n[1-3,7]` -> [n1, n2, n3, n7]; malformed input is a usage error, never a traceback."""
    import hostlist

    text = hostlist_expr.strip()
    if not text:
        return []
    try:
        hosts = list(hostlist.expand_hostlist(text))
    except hostlist.BadHostlist as exc:
        raise UsageError(f"bad hostlist {hostlist_expr[:80]!r}: {exc}",
                         "use Slurm's syntax, e.g. n[1-3,7] or gpu01,gpu02") from None
    for h in hosts:
        if not _NODE.fullmatch(h):
            raise UsageError(f"bad host name {h[:80]!r} in hostlist {hostlist_expr[:80]!r}",
                             "host names are letters, digits, '.', '_' and '-'")
    return hosts


def compress(hosts: Iterable[str]) -> str:
    import hostlist

    items = list(hosts)
    return str(hostlist.collect_hostlist(items)) if items else ""


def sort_key(host: str) -> tuple[object, ...]:
    """Natural order: n2 before n10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", host))


def first_host(nodelist: str) -> str:
    hosts = expand(nodelist)
    if not hosts:
        raise UsageError("empty node list", "is SLURM_JOB_NODELIST set?")
    return hosts[0]


def faults_for_node(text: str | None, node: str) -> str:
    """The comma-separated faults meant for `node`: an item without `@` goes to every node,
    `kind:check@NAME` only to NAME (the suffix is dropped before it reaches the validator).
    The rule's one copy is the worker's, which runs on the nodes without envbuild."""
    from envbuild.cluster.worker import _faults_for

    return _faults_for(text or "", node)


def injected_versions(text: str | None, node: str) -> list[str]:
    """Cluster-level test faults for `node`: `version:torch=2.12.0@n2` makes n2 REPORT torch
    2.12.0 (the report marks the node `injected`), so drift detection can be tested for real
    on one host where every node runs the same image."""
    out = []
    for item in faults_for_node(text, node).split(","):
        kind, _, body = item.partition(":")
        if kind == "version" and "=" in body:
            out.append(body)
    return out


def node_addr(scontrol_show_node: str) -> str | None:
    """NodeAddr from `scontrol show node NAME` (the address slurmd listens on)."""
    m = re.search(r"\bNodeAddr=(\S+)", scontrol_show_node)
    return m.group(1) if m else None


def master_port(job_id: str | None, base: int = 20000, span: int = 20000) -> int:
    """A rendezvous port per job, so two validations on the same nodes do not collide."""
    digits = re.sub(r"\D", "", job_id or "")
    return base + (int(digits) % span if digits else 9000)
