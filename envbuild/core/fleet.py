"""A fleet: node groups, each with a GPU model, a driver, a node count, an OS, a platform and
optionally a Slurm partition or a Kubernetes node selector (fleet.toml). Pure: the file's text
parsed and checked, a fleet written back as TOML, and the readers of the sources `fleet collect`
takes (a `doctor --json` report, `scontrol show node -o`, `kubectl get nodes -o json` with NVIDIA
GPU feature discovery's labels) turned into groups."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from envbuild.common import boundedio, tomlwrite
from envbuild.common.echo import shown
from envbuild.common.errors import UsageError
from envbuild.common.lazyre import lazy
from envbuild.common.record import record
from envbuild.core import gpus as gpu_names
from envbuild.matrix import Matrix

MAX_GROUPS = 256
KEYS = ("gpu", "driver", "count", "gpus_per_node", "os", "platform", "python",
        "slurm_partition", "node_selector", "hosts", "source")
PLATFORMS = {"x86_64": "linux/amd64", "amd64": "linux/amd64", "aarch64": "linux/arm64",
             "arm64": "linux/arm64"}
_NAME = lazy(r"[a-z0-9][a-z0-9._-]{0,63}")
_DRIVER = lazy(r"\d{3}(?:\.\d{1,3}){1,2}", re.ASCII)  # a full version `--driver` takes
_PYTHON = lazy(r"3\.\d{1,3}")
_WORD = lazy(r"[\w./:+-]{1,200}")
_PRODUCT = lazy(r"[\w./:+() -]{1,120}")  # a GPU product name: "Tesla V100-SXM2-32GB"
_HINT = ("a fleet file has one [group.NAME] table per node group: gpu = \"H100\", driver = "
         "\"580.95.05\", count = 4 (nodes), and optionally os, platform, python, gpus_per_node, "
         "slurm_partition, node_selector = { label = \"value\" }; see docs/guides/fleet.md")


@record
class Group:
    """One node group: nodes alike in what decides which image runs on them."""

    name: str
    gpu: str  # the product name as written (or as the source named it)
    cc: str  # its compute capability, from gpus.toml
    driver: str  # the NVIDIA driver; "" = not known (a Slurm node without a driver feature)
    count: int = 1  # nodes
    gpus_per_node: int = 0  # 0 = not known
    os: str = ""
    platform: str = "linux/amd64"
    python: str = ""  # the Python the group's jobs run outside an image ("" = only images)
    slurm_partition: str = ""
    node_selector: tuple[tuple[str, str], ...] = ()
    hosts: tuple[str, ...] = ()
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "gpu": self.gpu, "cc": self.cc, "driver": self.driver,
                "count": self.count, "gpus_per_node": self.gpus_per_node, "os": self.os,
                "platform": self.platform, "python": self.python,
                "slurm_partition": self.slurm_partition,
                "node_selector": dict(self.node_selector), "hosts": list(self.hosts),
                "source": self.source}


@record
class Fleet:
    groups: tuple[Group, ...]
    path: Path | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)  # what collect could not tell


# -- fleet.toml --------------------------------------------------------------------------------
def _bad(where: str, message: str, hint: str = _HINT) -> UsageError:
    return UsageError(f"{where}: {message}", hint)


def _text(value: object, where: str, key: str, rx: re.Pattern[str] = _WORD) -> str:
    if not isinstance(value, str) or not rx.fullmatch(value):
        raise _bad(where, f"{key} = {shown(str(value)) if isinstance(value, str) else value!r}"
                   f" is not a{'n' if key[0] in 'aeiou' else ''} {key} value",
                   {"driver": "a driver version, e.g. driver = \"580.95.05\"",
                    "python": "a CPython minor, e.g. python = \"3.12\""}.get(key, _HINT))
    return value


def gpu_of(m: Matrix, name: str, where: str) -> tuple[str, str]:
    """(the GPU's name as given, its compute capability): an NVIDIA GPU gpus.toml knows."""
    g = gpu_names.lookup(m, name, "nvidia")
    if g is None or not g.cc:
        known = [x.name for x in m.gpus if x.vendor == "nvidia"]
        raise _bad(where, f"gpu = {shown(name)} is not an NVIDIA GPU the matrix knows",
                   "name it as nvidia-smi does or as `envbuild resolve --gpu` takes it, e.g. "
                   + ", ".join(known[:4]) + " (`envbuild matrix show gpus`)")
    return name, g.cc


def group_of(m: Matrix, name: str, t: Mapping[str, Any], where: str) -> Group:
    unknown = sorted(set(t) - set(KEYS))
    if unknown:
        raise _bad(where, f"unknown key {shown(unknown[0])}", "keys: " + ", ".join(KEYS))
    if "gpu" not in t:
        raise _bad(where, "no gpu", "name the group's GPU model: gpu = \"H100\"")
    gpu, cc = gpu_of(m, _text(t["gpu"], where, "gpu", _PRODUCT), where)
    driver = _text(t["driver"], where, "driver", _DRIVER) if "driver" in t else ""
    counts = {}
    for key in ("count", "gpus_per_node"):
        v = t.get(key, 1 if key == "count" else 0)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 1_000_000:
            raise _bad(where, f"{key} = {v!r} is not a count", f"{key} = 4")
        counts[key] = v
    platform = _text(t.get("platform", "linux/amd64"), where, "platform")
    if platform not in PLATFORMS.values():
        raise _bad(where, f"platform = {shown(platform)} is not one envbuild builds for",
                   "platform = \"linux/amd64\" or \"linux/arm64\"")
    selector = t.get("node_selector", {})
    if not isinstance(selector, dict) or not all(
            isinstance(k, str) and _WORD.fullmatch(k) and isinstance(v, str)
            and (not v or _WORD.fullmatch(v)) for k, v in selector.items()):
        raise _bad(where, "node_selector is not a table of label = \"value\"",
                   "node_selector = { \"nvidia.com/gpu.product\" = \"NVIDIA-H100-80GB-HBM3\" }")
    hosts = t.get("hosts", [])
    if not isinstance(hosts, list) or len(hosts) > 100_000:
        raise _bad(where, "hosts is not a list of host names", "hosts = [\"n1\", \"n2\"]")
    return Group(
        name=name, gpu=gpu, cc=cc, driver=driver, count=counts["count"],
        gpus_per_node=counts["gpus_per_node"],
        os=_text(t["os"], where, "os") if "os" in t else "", platform=platform,
        python=_text(t["python"], where, "python", _PYTHON) if "python" in t
        else "",
        slurm_partition=_text(t["slurm_partition"], where, "slurm_partition")
        if "slurm_partition" in t else "",
        node_selector=tuple(sorted(selector.items())),
        hosts=tuple(_text(h, where, "hosts") for h in hosts),
        source=_text(t["source"], where, "source") if "source" in t else "")


def parse(text: str, path: Path, m: Matrix) -> Fleet:
    """fleet.toml's text -> its groups, every value checked (UsageError naming the first bad
    one)."""
    where = boundedio.path_text(path)
    try:
        data = boundedio.parse_toml(text)
    except boundedio.TooDeep as exc:
        raise _bad(where, f"{exc}; a fleet file is read up to {boundedio.MAX_DEPTH} levels") \
            from None
    except tomllib.TOMLDecodeError as exc:
        raise _bad(where, f"not valid TOML ({exc})") from None
    extra = sorted(set(data) - {"group"})
    if extra:
        raise _bad(where, f"unknown top-level key or table {shown(extra[0])}")
    groups = data.get("group", {})
    if not isinstance(groups, dict) or not groups:
        raise _bad(where, "no [group.NAME] tables")
    if len(groups) > MAX_GROUPS:
        raise _bad(where, f"{len(groups)} groups (limit {MAX_GROUPS})",
                   "merge groups whose GPU, driver, OS and platform are the same")
    out = []
    for name, t in groups.items():
        if not _NAME.fullmatch(name):
            raise _bad(where, f"[group.{shown(name)}]: not a group name",
                       "lower-case letters, digits and . _ -, e.g. [group.pascal]")
        if not isinstance(t, dict):
            raise _bad(where, f"group.{name} is not a table")
        out.append(group_of(m, name, t, f"{where}: [group.{name}]"))
    return Fleet(tuple(out), path)


def dump(fleet: Fleet) -> str:
    """fleet.toml for these groups (what `fleet collect` writes; `parse` reads it back)."""
    lines = ["# written by `envbuild fleet collect`; edit freely (docs/guides/fleet.md)"]
    lines += [f"# {n}" for n in fleet.notes]
    for g in fleet.groups:
        lines += ["", f"[group.{tomlwrite.key(g.name)}]", f"gpu = {tomlwrite.value(g.gpu)}"]
        values: list[tuple[str, Any]] = [
            ("driver", g.driver), ("count", g.count), ("gpus_per_node", g.gpus_per_node),
            ("os", g.os), ("platform", g.platform), ("python", g.python),
            ("slurm_partition", g.slurm_partition), ("node_selector", dict(g.node_selector)),
            ("hosts", list(g.hosts)), ("source", g.source)]
        lines += [f"{k} = {tomlwrite.value(v)}" for k, v in values if v not in ("", 0, {}, [])]
    return "\n".join(lines) + "\n"


# -- sources -----------------------------------------------------------------------------------
@record
class Node:
    """One machine as a source saw it, before machines alike are grouped."""

    host: str
    gpu: str
    cc: str
    driver: str
    gpus: int = 0
    os: str = ""
    platform: str = "linux/amd64"
    partition: str = ""
    selector: tuple[tuple[str, str], ...] = ()
    source: str = ""

    def key(self) -> tuple[str, ...]:
        return (self.gpu, self.cc, self.driver, str(self.gpus), self.os, self.platform,
                self.partition, str(self.selector), self.source)


def _said(name: str) -> str:
    """A name from a source, for a note: as it is when plain, else quoted and escaped."""
    return name if _WORD.fullmatch(name) else shown(name[:80])


def checked(m: Matrix, n: Node) -> str:
    """Why a node a source describes cannot be written to fleet.toml ('' when it can): the
    values go through the very rules `parse` reads them back with (an unknown GPU, a host or
    label with spaces or commas, a count past the limit ...)."""
    t: dict[str, Any] = {
        "gpu": n.gpu, "driver": n.driver, "gpus_per_node": n.gpus, "os": n.os,
        "platform": n.platform, "slurm_partition": n.partition,
        "node_selector": dict(n.selector), "hosts": [n.host], "source": n.source}
    try:
        group_of(m, "node", {k: v for k, v in t.items() if v not in ("", {})}, "node")
    except UsageError as exc:
        return exc.message.removeprefix("node: ")
    return ""


def _keep(m: Matrix, n: Node, what: str, nodes: list[Node], notes: list[str]) -> None:
    why = checked(m, n)
    if why:
        notes.append(f"{what} {_said(n.host)}: {why}; left out")
    else:
        nodes.append(n)


def unique_hosts(nodes: Iterable[Node]) -> tuple[list[Node], list[str]]:
    """One node per host name (the same host from two sources, or one file given twice, is
    counted once: the first seen), and a note for each repeat."""
    seen: dict[str, Node] = {}
    notes = []
    for n in nodes:
        if n.host in seen:
            notes.append(f"host {_said(n.host)} given twice ({seen[n.host].source}, "
                         f"{n.source}): counted once, as first seen")
            continue
        seen[n.host] = n
    return list(seen.values()), notes


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.casefold()).strip("-")[:40] or "group"


def group_nodes(nodes: Iterable[Node]) -> tuple[Group, ...]:
    """Machines alike (GPU, driver, GPUs per node, OS, platform, partition or selector)
    become one group, named after its partition or its GPU."""
    by: dict[tuple[str, ...], list[Node]] = {}
    for n in nodes:
        by.setdefault(n.key(), []).append(n)
    out: list[Group] = []
    taken: set[str] = set()
    for same in by.values():
        n = same[0]
        base = _slug(n.partition + "-" + n.gpu if n.partition else n.gpu)
        name, i = base, 2
        while name in taken:
            name, i = f"{base}-{i}", i + 1
        taken.add(name)
        out.append(Group(name=name, gpu=n.gpu, cc=n.cc, driver=n.driver, count=len(same),
                         gpus_per_node=n.gpus, os=n.os, platform=n.platform,
                         slurm_partition=n.partition, node_selector=n.selector,
                         hosts=tuple(sorted(x.host for x in same)), source=n.source))
    return tuple(out)


# `doctor --json`'s nvidia.gpus finding: "2 x NVIDIA H100 80GB HBM3 (compute capability 9.0,
# 80 GiB)", several kinds joined by "; " (envbuild/doctor/checks_host.py writes it)
_DOCTOR_GPUS = lazy(r"(\d{1,7}) x (.+?) \(compute capability ([0-9.?]+)", re.ASCII)
_DOCTOR_DRIVER = lazy(r"\bdriver (\d+(?:\.\d+){1,2})\b")


_HOSTNAME = lazy(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}")


def _doctor_gpus(data: object) -> list[tuple[str, str, str]]:
    """doctor --json's host.gpus ([{index, name, cc, memory_mib}]) as (count, name, cc) per
    kind; [] when absent or not that shape."""
    if not isinstance(data, list):
        return []
    kinds: dict[tuple[str, str], int] = {}
    for g in data:
        if isinstance(g, dict) and isinstance(g.get("name"), str) and g["name"].strip():
            k = (g["name"].strip()[:120], str(g.get("cc") or "?")[:8])
            kinds[k] = kinds.get(k, 0) + 1
    return [(str(n), name, cc) for (name, cc), n in kinds.items()]


def from_doctor(data: object, host: str, m: Matrix, where: str) -> tuple[list[Node], list[str]]:
    """A `doctor --json` report -> the machine it describes (its GPU, driver, platform), or a
    note saying why it is left out; UsageError when it is not a report or names no NVIDIA GPU.
    Not its Python: doctor's is the interpreter envbuild ran under, not the jobs'."""
    if not isinstance(data, dict) or not isinstance(data.get("findings"), list) \
            or not isinstance(data.get("host"), dict):
        raise _bad(where, "not an `envbuild doctor --json` report",
                   "record each host with `envbuild doctor --json > HOST.json`")
    h = data["host"]
    found: dict[str, str] = {}
    for f in data["findings"]:
        if isinstance(f, dict) and isinstance(f.get("message"), str):
            found.setdefault(str(f.get("id")), f["message"])
    # doctor's own data (host.gpus, host.driver) first; a report of an older envbuild has only
    # the nvidia.gpus finding's text
    gpus = _doctor_gpus(h.get("gpus")) or _DOCTOR_GPUS.findall(found.get("nvidia.gpus", ""))
    if not gpus:
        raise _bad(where, "the report names no NVIDIA GPU (no nvidia.gpus finding)",
                   "a fleet is GPU nodes: record a host where nvidia-smi works")
    count, name, cc = max(gpus, key=lambda g: int(g[0]))  # the host's main GPU kind
    rec = data.get("recommendation") if isinstance(data.get("recommendation"), dict) else {}
    driver = str(h.get("driver") or (rec or {}).get("driver") or "")
    if not _DRIVER.fullmatch(driver):
        d = _DOCTOR_DRIVER.search(found.get("nvidia.driver", ""))
        driver = d.group(1) if d else ""
    named = h.get("hostname")
    if isinstance(named, str) and _HOSTNAME.fullmatch(named):
        host = named
    g = gpu_names.lookup(m, name, "nvidia")
    notes = []
    if len(gpus) > 1:
        kinds = ", ".join(f"{n} x {k}" for n, k, _ in gpus)
        notes.append(f"host {_said(host)} has {shown(kinds[:200])}: a node is in one "
                     f"group, grouped by its most numerous GPU, {_said(name)}")
    nodes: list[Node] = []
    _keep(m, Node(host=host, gpu=name, cc=g.cc if g is not None and g.cc else cc,
                  driver=driver, gpus=int(count),
                  platform=PLATFORMS.get(str(h.get("machine", "")), "linux/amd64"),
                  source="doctor"), "doctor host", nodes, notes)
    return nodes, notes


# `scontrol show node -o`: one node per line, Key=Value words (a value may hold spaces only in
# keys this reads nothing from, e.g. OS=Linux 6.1.0 #1 SMP ...)
_KV = lazy(r"(\w+)=(\S*)")
_GRES_GPU = lazy(r"(?:^|,)gpu:([A-Za-z0-9_.-]+):(\d{1,7})", re.ASCII)
_DRIVER_FEATURE = lazy(r"(?:^|,)(?:nvidia[_-]?)?driver[_-]?(\d{2,4}(?:\.\d{1,4}){1,2})(?:,|$)")


def from_scontrol(text: str, m: Matrix) -> tuple[list[Node], list[str]]:
    """`scontrol show node -o` -> the nodes with a typed GPU GRES (gpu:TYPE:N), and a note for
    each node left out. The driver comes from a node feature `driver-VERSION` (Slurm does not
    know it): a node without one has no driver here."""
    nodes: list[Node] = []
    notes: list[str] = []
    for line in text.splitlines():
        kv = dict(_KV.findall(line))
        name = kv.get("NodeName", "")
        if not name:
            continue
        gres = _GRES_GPU.findall(kv.get("Gres", ""))
        if not gres:
            notes.append(f"slurm node {_said(name)}: no typed GPU GRES (gpu:TYPE:N), left out")
            continue
        kind, count = max(gres, key=lambda g: int(g[1]))
        g = gpu_names.lookup(m, kind, "nvidia")
        if g is None or not g.cc:
            notes.append(f"slurm node {_said(name)}: GRES type {kind} is no GPU the matrix "
                         "knows, left out")
            continue
        drv = _DRIVER_FEATURE.search(kv.get("ActiveFeatures") or kv.get("AvailableFeatures", ""))
        if drv is None:
            notes.append(f"slurm node {_said(name)}: no driver-VERSION feature, driver "
                         "unknown")
        parts = [p for p in kv.get("Partitions", "").split(",") if p]
        _keep(m, Node(host=name, gpu=kind, cc=g.cc, driver=drv.group(1) if drv else "",
                      gpus=int(count), platform=PLATFORMS.get(kv.get("Arch", ""), "linux/amd64"),
                      partition=parts[0] if parts else "", source="slurm"),
              "slurm node", nodes, notes)
    return nodes, notes


# NVIDIA GPU feature discovery's labels (tests/fixtures/fleet/README.md names the source)
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_COUNT = "nvidia.com/gpu.count"
GFD_CC = ("nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor")
GFD_DRIVER_FULL = "nvidia.com/cuda.driver-version.full"
GFD_DRIVER = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor",
              "nvidia.com/cuda.driver.rev")
NFD_OS = ("feature.node.kubernetes.io/system-os_release.ID",
          "feature.node.kubernetes.io/system-os_release.VERSION_ID")
K8S_ARCH = "kubernetes.io/arch"


def from_kubectl(data: object, m: Matrix, where: str) -> tuple[list[Node], list[str]]:
    """`kubectl get nodes -o json` -> the nodes GPU feature discovery labelled, and a note for
    each node left out."""
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise _bad(where, "not a `kubectl get nodes -o json` list (no items)",
                   "record it with `kubectl get nodes -o json > nodes.json`")
    nodes: list[Node] = []
    notes: list[str] = []
    for item in items:
        meta = item.get("metadata") if isinstance(item, dict) else None
        labels = meta.get("labels") if isinstance(meta, dict) else None
        raw = meta.get("name") if isinstance(meta, dict) else None
        name = raw if isinstance(raw, str) else "?"
        if not isinstance(labels, dict) or not isinstance(labels.get(GFD_PRODUCT), str):
            notes.append(f"kubernetes node {_said(name)}: no {GFD_PRODUCT} label, left out")
            continue
        product = labels[GFD_PRODUCT]
        g = gpu_names.lookup(m, product, "nvidia")
        if g is None or not g.cc:  # as parse: a GPU the matrix does not know has no verdict
            notes.append(f"kubernetes node {_said(name)}: GPU {shown(product[:80])} is no "
                         "NVIDIA GPU the matrix knows, left out")
            continue
        driver = str(labels.get(GFD_DRIVER_FULL) or
                     ".".join(str(labels[k]) for k in GFD_DRIVER if labels.get(k)))
        os_id = "".join(str(labels.get(k, "")) for k in NFD_OS)
        count = str(labels.get(GFD_COUNT, "0"))
        if not re.fullmatch(r"\d{1,7}", count, re.ASCII):
            notes.append(f"kubernetes node {_said(name)}: {GFD_COUNT} = "
                         f"{shown(count[:20])} is not a count, left out")
            continue
        _keep(m, Node(
            host=name, gpu=product, cc=g.cc, driver=driver if _DRIVER.fullmatch(driver) else "",
            gpus=int(count),
            os=os_id, platform=PLATFORMS.get(str(labels.get(K8S_ARCH, "")), "linux/amd64"),
            selector=((GFD_PRODUCT, product),), source="kubernetes"),
            "kubernetes node", nodes, notes)
    return nodes, notes
