"""fleet.toml and the sources `fleet collect` reads, as pure functions: the file parsed and
written back (generated groups), a real `doctor --json` recording, a `kubectl get nodes -o json`
with GPU feature discovery's labels, `scontrol show node -o` text; malformed input of each kind
is a UsageError, never another exception."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.common.errors import UsageError
from envbuild.core import fleet
from envbuild.core.gpus import lookup
from envbuild.matrix import Matrix, load
from tests.support import FIXTURES

FLEET = FIXTURES / "fleet"
DOCTOR = FIXTURES / "hosts" / "h200-driver580-torch2.11-cu130-2026-11-28" / "doctor.json"


@pytest.fixture(scope="module")
def m() -> Matrix:
    return load()


def test_the_fixture_fleet_parses(m: Matrix) -> None:
    f = fleet.parse((FLEET / "fleet.toml").read_text(), FLEET / "fleet.toml", m)
    by = {g.name: g for g in f.groups}
    assert list(by) == ["pascal", "volta", "ampere", "hopper", "blackwell"]
    for g in f.groups:  # the compute capability is the matrix's for the GPU named
        row = lookup(m, g.gpu, "nvidia")
        assert row is not None and g.cc == row.cc
    assert by["pascal"].slurm_partition == "pascal" and by["pascal"].count == 8
    assert dict(by["ampere"].node_selector) == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert by["blackwell"].python == "3.10"


_names = st.from_regex(r"[a-z][a-z0-9._-]{0,20}", fullmatch=True)
_drivers = st.from_regex(r"[1-9][0-9]{2}\.[0-9]{1,3}(\.[0-9]{2})?", fullmatch=True)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_what_dump_writes_parses_back_the_same(m: Matrix, data: st.DataObject) -> None:
    nvidia = [g for g in m.gpus if g.vendor == "nvidia" and g.cc]
    names = data.draw(st.lists(_names, min_size=1, max_size=6, unique=True))
    groups = []
    for name in names:
        g = data.draw(st.sampled_from(nvidia))
        groups.append(fleet.Group(
            name=name, gpu=g.name, cc=g.cc, driver=data.draw(_drivers | st.just("")),
            count=data.draw(st.integers(1, 5000)), gpus_per_node=data.draw(st.integers(0, 16)),
            os=data.draw(st.sampled_from(["", "ubuntu22.04", "rocky9"])),
            platform=data.draw(st.sampled_from(["linux/amd64", "linux/arm64"])),
            python=data.draw(st.sampled_from(["", "3.10", "3.14"])),
            slurm_partition=data.draw(st.sampled_from(["", "gpu", "a100-long"])),
            node_selector=data.draw(st.sampled_from([(), (("nvidia.com/gpu.product", "X-1"),)])),
            hosts=tuple(data.draw(st.lists(_names, max_size=3, unique=True)))))
    f = fleet.Fleet(tuple(groups), None, ("a note",))
    back = fleet.parse(fleet.dump(f), Path("fleet.toml"), m)
    assert back.groups == f.groups


BAD = {
    "not TOML": "[group.a\n",
    "unknown top-level table": "[groups.a]\ngpu = \"H100\"\n",
    "no groups": "",
    "a group that is not a table": "group = 1\n",
    "bad group name": "[group.\"A B\"]\ngpu = \"H100\"\n",
    "no gpu": "[group.a]\ndriver = \"580.95.05\"\n",
    "unknown gpu": "[group.a]\ngpu = \"Voodoo 5\"\n",
    "an AMD gpu": "[group.a]\ngpu = \"MI300X\"\n",
    "bad driver": "[group.a]\ngpu = \"H100\"\ndriver = \"latest\"\n",
    "driver a number": "[group.a]\ngpu = \"H100\"\ndriver = 580\n",
    "negative count": "[group.a]\ngpu = \"H100\"\ncount = -1\n",
    "count a bool": "[group.a]\ngpu = \"H100\"\ncount = true\n",
    "bad platform": "[group.a]\ngpu = \"H100\"\nplatform = \"windows/amd64\"\n",
    "bad python": "[group.a]\ngpu = \"H100\"\npython = \"2.7\"\n",
    "unknown key": "[group.a]\ngpu = \"H100\"\nram = 1\n",
    "selector not a table": "[group.a]\ngpu = \"H100\"\nnode_selector = \"x\"\n",
    "selector with a shell word": "[group.a]\ngpu = \"H100\"\nnode_selector = { a = \"$(id)\" }\n",
    "hosts not a list": "[group.a]\ngpu = \"H100\"\nhosts = \"n1\"\n",
    "a control character": "[group.a]\ngpu = \"H100\\u001b[2J\"\n",
    "deep": "x = " + "[" * 500 + "]" * 500 + "\n",
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_fleet_file_is_one_usage_error(m: Matrix, case: str) -> None:
    with pytest.raises(UsageError) as err:
        fleet.parse(BAD[case], Path("fleet.toml"), m)
    assert "\n" not in err.value.message and err.value.hint


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=300))
def test_any_text_is_a_fleet_or_a_usage_error(m: Matrix, text: str) -> None:
    with contextlib.suppress(UsageError):
        fleet.parse("[group.a]\n" + text, Path("fleet.toml"), m)


# -- sources -----------------------------------------------------------------------------------
def test_a_real_doctor_recording_is_one_node(m: Matrix) -> None:
    data = json.loads(DOCTOR.read_text())
    (n,), notes = fleet.from_doctor(data, "h200-0", m, str(DOCTOR))
    assert (n.gpu, n.cc, n.driver, n.gpus, n.platform) == (
        "NVIDIA H200", "9.0", data["recommendation"]["driver"], 1, "linux/amd64")
    assert notes == []
    # doctor's host.python is the interpreter envbuild ran under, not the jobs' Python: the
    # group has none (fleet.toml's python is what the user declares)
    assert data["host"].get("python")
    (g,) = fleet.group_nodes([n])
    assert g.python == ""


@pytest.mark.parametrize("data", [[], {"findings": []}, {"host": {}, "findings": "x"},
                                  {"host": {}, "findings": [{"id": "nvidia.gpus", "message": 3}]}])
def test_what_is_not_a_doctor_report_is_refused(m: Matrix, data: object) -> None:
    with pytest.raises(UsageError):
        fleet.from_doctor(data, "h", m, "h.json")


def test_kubectl_nodes_with_gfd_labels(m: Matrix) -> None:
    data = json.loads((FLEET / "kubectl-nodes.json").read_text())
    nodes, notes = fleet.from_kubectl(data, m, "kubectl-nodes.json")
    groups = {g.gpu: g for g in fleet.group_nodes(nodes)}
    labels = {i["metadata"]["name"]: i["metadata"]["labels"] for i in data["items"]}
    a100 = groups["NVIDIA-A100-SXM4-80GB"]
    assert a100.count == 2 and a100.hosts == ("gpu-a100-0", "gpu-a100-1")
    assert a100.driver == labels["gpu-a100-0"][fleet.GFD_DRIVER_FULL]
    assert a100.os == "ubuntu22.04" and a100.gpus_per_node == 8
    assert dict(a100.node_selector) == {fleet.GFD_PRODUCT: "NVIDIA-A100-SXM4-80GB"}
    p100 = groups["Tesla-P100-PCIE-16GB"]  # an older GFD: only the deprecated driver labels
    assert fleet.GFD_DRIVER_FULL not in labels["gpu-p100-0"]
    assert p100.driver == ".".join(labels["gpu-p100-0"][k] for k in fleet.GFD_DRIVER)
    for g in groups.values():  # the matrix's compute capability agrees with GFD's labels
        first = labels[g.hosts[0]]
        assert g.cc == ".".join(first[k] for k in fleet.GFD_CC)
    assert notes == ["kubernetes node cpu-0: no nvidia.com/gpu.product label, left out"]


@pytest.mark.parametrize("data", [[], {"items": 3}, {"kind": "List"}])
def test_what_is_not_a_node_list_is_refused(m: Matrix, data: object) -> None:
    with pytest.raises(UsageError):
        fleet.from_kubectl(data, m, "nodes.json")


SCONTROL = (
    "NodeName=n1 Arch=x86_64 CoresPerSocket=1 AvailableFeatures=driver-535.183.01 "
    "ActiveFeatures=driver-535.183.01 Gres=gpu:tesla_v100:2 NodeAddr=127.0.0.1 "
    "OS=Linux 6.1.0 #1 SMP Partitions=volta,debug State=IDLE\n"
    "NodeName=n2 Arch=aarch64 ActiveFeatures=ib Gres=gpu:nvidia_gh200_480gb:1(S:0) "
    "Partitions=arm State=IDLE\n"
    "NodeName=n3 Arch=x86_64 Gres=(null) Partitions=cpu State=IDLE\n"
    "NodeName=n4 Arch=x86_64 Gres=gpu:2 Partitions=old State=IDLE\n")


def test_scontrol_nodes_with_typed_gpu_gres(m: Matrix) -> None:
    nodes, notes = fleet.from_scontrol(SCONTROL, m)
    by = {n.host: n for n in nodes}
    assert sorted(by) == ["n1", "n2"]
    assert (by["n1"].cc, by["n1"].driver, by["n1"].gpus, by["n1"].partition) == (
        "7.0", "535.183.01", 2, "volta")
    assert (by["n2"].cc, by["n2"].driver, by["n2"].platform) == ("9.0", "", "linux/arm64")
    assert any("n2: no driver-VERSION feature" in x for x in notes)
    assert any(x.startswith("slurm node n3: no typed GPU GRES") for x in notes)
    assert any(x.startswith("slurm node n4: no typed GPU GRES") for x in notes)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=400))
def test_any_scontrol_text_reads_without_an_exception(m: Matrix, text: str) -> None:
    nodes, _ = fleet.from_scontrol(SCONTROL + text, m)
    assert all(n.cc for n in nodes)


# -- what collect writes always parses (review of issue 24) -------------------------------------
_label = st.text(max_size=30) | st.sampled_from(["NVIDIA-H100-80GB-HBM3", "Tesla-P100-PCIE-16GB",
                                                 "NVIDIA-H100-80GB-HBM3,evil", "Voodoo-5"])
_any = st.none() | st.integers() | st.booleans() | _label | st.lists(st.integers(), max_size=2)
_labels = st.fixed_dictionaries({}, optional={
    fleet.GFD_PRODUCT: _any, fleet.GFD_COUNT: _any | st.just("9" * 5000),
    fleet.GFD_DRIVER_FULL: _any | st.just("580.126.20"), fleet.GFD_CC[0]: _any,
    fleet.GFD_CC[1]: _any, fleet.K8S_ARCH: _any | st.sampled_from(["arm64", "amd64"]),
    fleet.NFD_OS[0]: _any, fleet.NFD_OS[1]: _any})
_items = st.lists(st.fixed_dictionaries({"metadata": st.fixed_dictionaries(
    {}, optional={"name": _any | st.just("node with space"), "labels": _labels})}) | _any,
    max_size=6)
_doctor_host = st.fixed_dictionaries({}, optional={
    "gpus": st.lists(st.fixed_dictionaries({}, optional={
        "name": _any | st.sampled_from(["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"]),
        "cc": _any}), max_size=9) | _any,
    "driver": _any | st.just("9999.1"), "hostname": _any | st.just("a" * 250),
    "machine": _any | st.just("aarch64"), "python": _any})


def _writes_what_parses(m: Matrix, nodes: list[fleet.Node], notes: list[str]) -> None:
    nodes, _ = fleet.unique_hosts(nodes)
    groups = fleet.group_nodes(nodes)
    if nodes and len(groups) <= fleet.MAX_GROUPS:
        back = fleet.parse(fleet.dump(fleet.Fleet(groups, None, tuple(notes))),
                           Path("fleet.toml"), m)
        assert back.groups == groups
    assert all("\n" not in n for n in notes)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(items=_items, host=_doctor_host, stem=st.text(max_size=20), text=st.text(max_size=300))
def test_whatever_the_sources_say_collect_writes_what_parses(
        m: Matrix, items: list[object], host: dict[str, object], stem: str, text: str) -> None:
    """Arbitrary kubectl node lists, doctor host blocks and scontrol lines: a node is written
    only with values parse takes back (else left out with a note); never another exception."""
    nodes, notes = fleet.from_kubectl({"items": items}, m, "nodes.json")
    _writes_what_parses(m, nodes, notes)
    try:
        nodes, notes = fleet.from_doctor({"host": host, "findings": []}, stem or "h", m, "h.json")
    except UsageError as exc:  # not a report / no NVIDIA GPU: one line
        assert "\n" not in exc.message
    else:
        _writes_what_parses(m, nodes, notes)
    nodes, notes = fleet.from_scontrol(SCONTROL + text + "\nNodeName=a,b Gres=gpu:h100:"
                                       + "9" * 5000 + "\n", m)
    _writes_what_parses(m, nodes, notes)


def test_a_host_with_two_gpu_kinds_is_grouped_by_one_and_noted(m: Matrix) -> None:
    host = {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "cc": "9.0"}] * 3
            + [{"name": "NVIDIA A100-SXM4-80GB", "cc": "8.0"}] * 5, "driver": "580.126.20"}
    (n,), notes = fleet.from_doctor({"host": host, "findings": []}, "mixed", m, "mixed.json")
    assert n.gpus == 5 and n.cc == "8.0"
    assert len(notes) == 1 and "3 x NVIDIA H100 80GB HBM3" in notes[0] and "one group" in notes[0]


def test_one_host_from_two_sources_counts_once(m: Matrix) -> None:
    n = fleet.Node(host="n1", gpu="H100", cc="9.0", driver="580.126.20", source="doctor")
    nodes, notes = fleet.unique_hosts([n, n])
    assert nodes == [n] and len(notes) == 1 and "given twice" in notes[0]


def test_a_driver_the_resolver_does_not_take_is_a_fleet_file_error(m: Matrix) -> None:
    with pytest.raises(UsageError) as err:
        fleet.parse('[group.a]\ngpu = "H100"\ndriver = "9999.1"\n', Path("f.toml"), m)
    assert "f.toml: [group.a]" in err.value.message
