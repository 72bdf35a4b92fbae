"""--junit: the JUnit XML of check records (core/junit.py), the cluster's and team check's suites,
and the file's rules (features/junit.py). Generated: whatever text a check carries, the XML
parses and counts what it was given."""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.cluster.report import allreduce_summary, junit_suites
from envbuild.common.errors import EnvbuildError, EnvironmentProblem, UsageError
from envbuild.core import junit
from envbuild.core.junit import Check, Suite, to_xml
from envbuild.features import junit as fj
from tests.support.cluster import ar_line

# Text a check may carry: anything, the XML-hostile on purpose, and huge.
NASTY = st.sampled_from(["]]>", "<![CDATA[x]]>", '"', "'", "&amp;", "<a/>", "\x00", "\x1b[31m",
                         "\r\n", "\t", "\ud800", "\udfff", "\ufffe", "\uffff", "\u202e", "--",
                         "\U0001f600", "\x7f", "\x85"])
TEXT = st.one_of(st.text(max_size=40), NASTY,
                 st.lists(st.one_of(NASTY, st.text(max_size=5)), max_size=8).map("".join),
                 st.tuples(st.one_of(NASTY, st.text(min_size=1, max_size=3)),
                           st.integers(10_000, 70_000)).map(lambda t: t[0] * t[1]))
STATUS = st.one_of(st.sampled_from(junit.STATUSES), st.text(max_size=8))
# A time a report may carry: any float (inf, -inf, nan, huge, negative, subnormal), any int.
SECONDS = st.one_of(st.none(), st.floats(), st.sampled_from([float("inf"), -float("inf"),
                                                             float("nan"), 1e308, -1e308]),
                    st.integers(), st.integers(10**300, 10**400))
CHECKS = st.builds(Check, id=TEXT, status=STATUS, title=TEXT, message=TEXT, detail=TEXT,
                   seconds=SECONDS, classname=TEXT)
SUITES = st.builds(Suite, name=TEXT, checks=st.lists(CHECKS, max_size=6).map(tuple),
                   prefix=TEXT, seconds=SECONDS,
                   timestamp=st.one_of(st.none(), TEXT), hostname=st.one_of(st.none(), TEXT))


def kind(status: str) -> str:
    """What a status becomes in JUnit."""
    return {"fail": "failure", "skip": "skipped", "not_run": "skipped", "pass": "",
            "warn": ""}.get(status, "error")


def parse(xml: str) -> ET.Element:
    return ET.fromstring(xml.encode("utf-8"))


def case_kind(case: ET.Element) -> str:
    return next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.data_too_large])
@given(suites=st.lists(SUITES, max_size=4), name=TEXT)
def test_any_text_gives_xml_that_parses_with_the_right_counts(suites: list[Suite],
                                                              name: str) -> None:
    root = parse(to_xml(suites, name))
    assert root.tag == "testsuites"
    got = root.findall("testsuite")
    assert len(got) == len(suites)
    for el, s in zip(got, suites, strict=True):
        want = Counter(kind(c.status) for c in s.checks)
        assert int(el.get("tests", "-1")) == len(s.checks)
        assert int(el.get("failures", "-1")) == want["failure"]
        assert int(el.get("errors", "-1")) == want["error"]
        assert int(el.get("skipped", "-1")) == want["skipped"]
        cases = el.findall("testcase")
        assert [case_kind(c) for c in cases] == [kind(c.status) for c in s.checks]
        for case, c in zip(cases, s.checks, strict=True):
            skipped = case.find("skipped")
            if c.status in ("skip", "not_run"):
                assert skipped is not None
                head = "skipped: " if c.status == "skip" else "not run: "
                assert skipped.get("message", "").startswith(head)
            if c.status == "warn":
                assert "warning: " in (case.findtext("system-out") or "")
            assert len(case.get("name", "")) <= junit.MESSAGE_CHARS + 40
    totals = {k: sum(int(el.get(k, "0")) for el in got)
              for k in ("tests", "failures", "errors", "skipped")}
    assert {k: int(root.get(k, "-1")) for k in totals} == totals
    _assert_times(root, suites)


def _assert_times(root: ET.Element, suites: list[Suite]) -> None:
    """Every time is a finite number in [0, MAX_SECONDS] (absent when the record's is not); the
    total is the sum of the suites' clamped times (clamped too), there only when every suite
    has one."""
    for el in root.iter():
        if "time" in el.attrib:
            t = float(el.get("time", ""))
            assert math.isfinite(t) and 0 <= t <= junit.MAX_SECONDS, (el.tag, el.get("time"))
    for el, s in zip(root.findall("testsuite"), suites, strict=True):
        assert ("time" in el.attrib) == (junit.seconds(s.seconds) is not None)
        for case, c in zip(el.findall("testcase"), s.checks, strict=True):
            assert ("time" in case.attrib) == (junit.seconds(c.seconds) is not None)
    times = [float(el.get("time", "nan")) for el in root.findall("testsuite")]
    if suites and all(math.isfinite(t) for t in times):
        assert float(root.get("time", "nan")) == pytest.approx(
            min(sum(times), junit.MAX_SECONDS), rel=1e-9, abs=1e-2)
    else:
        assert "time" not in root.attrib


@pytest.mark.parametrize(("given", "time"), [
    (float("inf"), None), (-float("inf"), None), (float("nan"), None), (10**400, None),
    (True, None), ("3", None), (-5.0, "0.000"), (1e300, "1000000000.000"), (2.5, "2.500"),
    (7, "7.000")], ids=["inf", "-inf", "nan", "int-too-big", "bool", "text", "negative",
                        "huge", "float", "int"])
def test_a_time_is_finite_and_clamped(given: Any, time: str | None) -> None:
    root = parse(to_xml([Suite("s", (Check("a.b", "pass", seconds=given),), seconds=given)],
                        "n"))
    assert root.get("time") == time
    assert [el.get("time") for el in root.iter("testsuite")] == [time]
    assert [el.get("time") for el in root.iter("testcase")] == [time]
    assert junit.validator_check({"id": "a.b", "status": "pass", "duration_s": given}).seconds \
        == (None if time is None else float(time))


def test_each_status_as_junit_shows_it() -> None:
    checks = (Check("facts.torch", "pass", "torch imports", "torch 2.13.0", seconds=0.25),
              Check("perf.matmul", "warn", "matmul speed", "12% of peak", "fix: check clocks"),
              Check("expect.torch", "fail", "torch version", "torch 2.12, spec wants 2.13",
                    "fix: install torch==2.13"),
              Check("device.count", "not_run", "GPUs", "not run: needs a GPU"),
              Check("macos.native", "skip", "macOS", "not macOS"),
              Check("x.y", "weird", "", "oops"))
    root = parse(to_xml([Suite("host", checks, seconds=3.5, timestamp="2026-01-02T03:04:05Z",
                               hostname="vm")], "envbuild validate"))
    (suite,) = root
    assert suite.attrib == {"name": "host", "tests": "6", "failures": "1", "errors": "1",
                            "skipped": "2", "time": "3.500", "timestamp": "2026-01-02T03:04:05",
                            "hostname": "vm"}
    cases = {c.get("name"): c for c in suite}
    assert cases["facts.torch"].attrib == {"classname": "facts", "name": "facts.torch",
                                           "time": "0.250"}
    assert cases["facts.torch"].findtext("system-out") == "torch imports\ntorch 2.13.0"
    assert cases["perf.matmul"].findtext("system-out") == \
        "matmul speed\nwarning: 12% of peak fix: check clocks"
    failure = cases["expect.torch"].find("failure")
    assert failure is not None and failure.get("message") == "torch 2.12, spec wants 2.13"
    assert failure.text == "torch 2.12, spec wants 2.13\nfix: install torch==2.13"
    assert cases["device.count"][0].attrib == {"message": "not run: needs a GPU"}
    assert cases["macos.native"][0].attrib == {"message": "skipped: not macOS"}
    assert cases["x.y"][0].get("message") == "unknown status 'weird': oops"


def test_hostile_text_is_escaped_not_dropped() -> None:
    xml = to_xml([Suite("s", (Check("a.b", "fail", "t", "bad \x1b[31m ]]> \ud800 end"),))], "n")
    failure = parse(xml).find("testsuite/testcase/failure")
    assert failure is not None
    assert failure.get("message") == "bad \\x1b[31m ]]> \\ud800 end"


def test_huge_text_is_cut_saying_how_much() -> None:
    xml = to_xml([Suite("s", (Check("a.b", "fail", "t", "x" * 10, "y" * 100_000),))], "n")
    body = parse(xml).findtext("testsuite/testcase/failure") or ""
    assert body.endswith(f"...({10 + 1 + 100_000 - junit.BODY_CHARS} more characters)")
    assert len(xml) < junit.BODY_CHARS + 2000


def test_a_validator_report_becomes_one_suite() -> None:
    report = {"started": "2026-01-02T03:04:05Z", "duration_s": 2.5, "host": {"hostname": "n1"},
              "checks": [{"id": "facts.torch", "title": "torch", "status": "pass", "reason": "",
                          "detail": "torch 2.13", "remediation": "", "duration_s": 0.5},
                         {"id": "expect.torch_version", "title": "version", "status": "fail",
                          "reason": "", "detail": "2.12 != 2.13", "remediation": "install 2.13",
                          "duration_s": 0.0},
                         {"id": "device.count", "title": "GPUs", "status": "not_run",
                          "reason": "not run: needs a GPU", "detail": "", "remediation": "",
                          "duration_s": 0.0}]}
    s = junit.validation_suite(report, "host")
    assert [(c.id, c.status, c.message, c.detail) for c in s.checks] == [
        ("facts.torch", "pass", "torch 2.13", ""),
        ("expect.torch_version", "fail", "2.12 != 2.13", "fix: install 2.13"),
        ("device.count", "not_run", "not run: needs a GPU", "")]
    assert (s.seconds, s.timestamp, s.hostname) == (2.5, "2026-01-02T03:04:05Z", "n1")


# -- the cluster report ------------------------------------------------------------------------
def _node(node: str, rank: int, status: str, checks: list[dict[str, Any]] | None,
          error: str | None = None) -> dict[str, Any]:
    n: dict[str, Any] = {"node": node, "rank": rank, "status": status, "versions": {},
                         "perf": {}, "report": None if checks is None else {
                             "checks": checks, "duration_s": 1.0}}
    if error:
        n["error"] = error
    return n


def _c(cid: str, status: str) -> dict[str, Any]:
    return {"id": cid, "title": cid, "status": status, "reason": "", "detail": "",
            "remediation": "", "duration_s": 0.1}


def test_the_cluster_report_is_a_suite_per_node_and_one_for_the_cluster() -> None:
    report = {
        "nodes": [_node("n1", 0, "pass", [_c("facts.torch", "pass"), _c("perf.h2d", "skip")]),
                  _node("n2", 1, "fail", [_c("facts.torch", "fail"), _c("perf.h2d", "skip")]),
                  _node("n3", 2, "missing", None),
                  _node("n4", 3, "fail", None, error="docker: no such image"),
                  _node("n5", 4, "fail", [_c("facts.torch", "pass")])],
        "allreduce": {"status": "fail", "backend": "gloo", "world_size": 5, "exact": True,
                      "errors": [], "missing_ranks": [2, 3], "results": [], "expectation": None},
        "drift": [{"node": "n5", "key": "torch", "value": "2.12", "majority": "2.13"}],
        "stragglers": [{"node": "n1", "gpu": "H100", "metric": "tflops", "value": 1.0,
                        "median": 2.0, "ratio": 0.5}],
        "status": "fail", "job": {"seconds": 12.5}}
    suites = junit_suites(report)
    root = parse(to_xml(suites, "envbuild cluster validate"))
    got = {s.get("name"): (s.get("tests"), s.get("failures"), s.get("errors"), s.get("skipped"))
           for s in root}
    assert got == {"node n1": ("2", "0", "0", "1"), "node n2": ("2", "1", "0", "1"),
                   "node n3": ("1", "0", "1", "0"), "node n4": ("1", "0", "1", "0"),
                   "node n5": ("2", "1", "0", "0"), "cluster": ("4", "2", "0", "1")}
    assert [s.hostname for s in suites[:5]] == ["n1", "n2", "n3", "n4", "n5"]
    n2 = root.find("testsuite[@name='node n2']/testcase")
    assert n2 is not None and n2.get("classname") == "n2.facts"
    cluster = {c.get("name"): case_kind(c) for c in root.find("testsuite[@name='cluster']") or ()}
    assert cluster == {"cluster.allreduce": "failure", "cluster.busbw": "skipped",
                       "cluster.drift": "failure", "cluster.stragglers": ""}
    missing = root.find("testsuite[@name='node n3']/testcase/error")
    assert missing is not None and missing.get("message") == "never reported"
    assert [s.get("time") for s in root] == ["1.000", "1.000", None, None, "1.000", "12.500"]


def _cluster_cases(lines: list[dict[str, Any]], world: int, **floor: Any) -> dict[str, Any]:
    from envbuild.cluster.slurm import load_rules

    ar = allreduce_summary(lines, world, rules=load_rules(), **floor)
    report = {"nodes": [], "allreduce": ar, "drift": [], "stragglers": [], "status": "x"}
    (suite,) = junit_suites(report)
    return {c.id: (c.status, c.message) for c in suite.checks}


NVLINK = {"fabric": "nvlink", "gpu": "NVIDIA H100 80GB HBM3", "gpus_per_node": 8, "nodes": 1}


def test_a_missed_bandwidth_floor_fails_busbw_only() -> None:
    """An exact all-reduce on every rank, below the fabric's floor: cluster.allreduce passes,
    cluster.busbw fails saying by how much."""
    got = _cluster_cases([ar_line(r, 8, 0.01) for r in range(8)], 8, **NVLINK)
    assert got["cluster.allreduce"] == ("pass", "exact on 8 ranks, 2 sizes timed")
    status, message = got["cluster.busbw"]
    assert status == "fail" and message.startswith("11.744 GB/s busbw at 64 MiB: below the "
                                                   "nvlink floor of 460.0 GB/s"), message
    got = _cluster_cases([ar_line(r, 8, 0.0001) for r in range(8)], 8, **NVLINK)
    assert got["cluster.allreduce"][0] == got["cluster.busbw"][0] == "pass"
    assert "at or above the nvlink floor" in got["cluster.busbw"][1]


@pytest.mark.parametrize(("lines", "says"), [
    ([], "no rank reported an all-reduce result"),
    ([ar_line(0, 2)], "1 of 2 ranks never reported: 1"),
    ([ar_line(0, 2), ar_line(1, 2, exact=False)], "the reduced values were not exact on every "
                                                  "rank"),
    ([ar_line(0, 2), ar_line(1, 2, error="NCCL timeout")], "rank 1 (n2): NCCL timeout"),
], ids=["none", "missing", "inexact", "error"])
def test_an_allreduce_that_did_not_work_fails_saying_why(lines: list[dict[str, Any]],
                                                         says: str) -> None:
    got = _cluster_cases(lines, 2)
    assert got["cluster.allreduce"] == ("fail", says)
    assert got["cluster.busbw"][0] == "skip"


# -- team check --------------------------------------------------------------------------------
def test_team_check_records_each_check_and_derives_the_problems(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from envbuild.engine import registry
    from envbuild.features import team

    a, b, base_old, base_new = ("sha256:" + c * 64 for c in "abcd")

    class Client:
        def head_manifest(self, ref: Any) -> tuple[str, str, int] | None:
            return (ref.digest, "x", 1) if ref.digest == a else None

    att = registry.Attached(f"reg.example/team/a@{a}", {"summary": {"pass": 3, "fail": 0}},
                            "reg.example/team/a:sha256-x.envbuild", "referrers")
    monkeypatch.setattr(registry, "client", lambda host: Client())
    monkeypatch.setattr(registry, "fetch_report", lambda ref: att)
    monkeypatch.setattr(registry, "resolve_digest", lambda ref: base_new)
    lock = {"image": {
        "a": {"tag": "reg.example/team/a:1", "digest": a, "base_image": "reg.example/base:1",
              "base_digest": base_old},
        "b": {"tag": "reg.example/team/b:1", "digest": b, "base_image": "reg.example/base:1",
              "base_digest": base_new},
        "c": {"tag": "team/c:1", "digest": "", "base_image": f"reg.example/base@{base_old}"}}}
    data = team.check(lock, Path("envbuild.lock"))
    assert [(c["image"], c["check"], c["status"]) for c in data["checks"]] == [
        ("a", "present", "pass"), ("a", "report", "pass"), ("a", "base", "fail"),
        ("b", "present", "fail"), ("b", "report", "not_run"), ("b", "base", "pass"),
        ("c", "present", "fail"), ("c", "report", "not_run"), ("c", "base", "skip")]
    assert data["problems"] == [
        f"a: the base image tag reg.example/base:1 moved: locked {base_old}, now {base_new}",
        f"b: reg.example/team/b@{b} is gone from the registry",
        "c: the lock has no registry digest (built without --push)"]
    root = parse(to_xml(fj.team_suites(data), "envbuild team check"))
    assert [(s.get("name"), s.get("tests"), s.get("failures"), s.get("skipped")) for s in root] \
        == [("image a", "3", "1", "0"), ("image b", "3", "1", "1"), ("image c", "3", "1", "2")]
    skipped = [s.get("message") for s in root.iter("skipped")]
    assert skipped == ["not run: the image is gone", "not run: the image is not in a registry",
                       f"skipped: the base image reg.example/base@{base_old} is pinned by digest"]
    assert {c.get("classname") for c in root.iter("testcase")} == {"a", "b", "c"}


def test_a_registry_error_on_the_base_is_an_error_not_a_vanished_tag(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry answers 429 for the base tag: the base check is an <error> saying so (not
    a failure claiming the tag vanished), and a problem, so the run still exits 1."""
    from envbuild.engine import registry
    from envbuild.features import team

    a, base_old = ("sha256:" + c * 64 for c in "ab")

    class Client:
        def head_manifest(self, ref: Any) -> tuple[str, str, int] | None:
            return (ref.digest, "x", 1)

    def refuse(ref: str) -> str | None:
        raise EnvironmentProblem("reg.example answered 429 Too Many Requests", "wait")

    att = registry.Attached(f"reg.example/team/a@{a}", {"summary": {"pass": 3, "fail": 0}},
                            "reg.example/team/a:sha256-x.envbuild", "referrers")
    monkeypatch.setattr(registry, "client", lambda host: Client())
    monkeypatch.setattr(registry, "fetch_report", lambda ref: att)
    monkeypatch.setattr(registry, "resolve_digest", refuse)
    lock = {"image": {"a": {"tag": "reg.example/team/a:1", "digest": a,
                            "base_image": "reg.example/base:1", "base_digest": base_old}}}
    data = team.check(lock, Path("envbuild.lock"))
    base = data["checks"][-1]
    why = ("could not ask the registry for the base image tag reg.example/base:1: "
           "reg.example answered 429 Too Many Requests")
    assert (base["check"], base["status"], base["message"]) == ("base", "error", why)
    assert data["problems"] == [f"a: {why}"]
    assert data["images"][0]["base_error"] == "reg.example answered 429 Too Many Requests"
    assert "vanished" not in json.dumps(data)
    root = parse(to_xml(fj.team_suites(data), "envbuild team check"))
    assert (root.get("errors"), root.get("failures")) == ("1", "0")
    error = root.find("testsuite/testcase[@name='base']/error")
    assert error is not None and error.get("message") == why


# -- the file ----------------------------------------------------------------------------------
@pytest.mark.parametrize("make", ["dir", "fifo", "device", "under_a_file", "empty"])
def test_a_junit_path_that_is_not_a_file_is_refused(tmp_path: Path, make: str) -> None:
    path = {"dir": tmp_path, "fifo": tmp_path / "fifo", "device": Path("/dev/null"),
            "under_a_file": tmp_path / "file" / "x.xml", "empty": Path("")}[make]
    if make == "fifo":
        os.mkfifo(path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError) as info:
        fj.check_path(path)
    assert info.value.exit_code == 2 and info.value.message.startswith("--junit ")
    assert "\n" not in info.value.message and info.value.hint


def test_the_report_is_written_on_success_and_on_an_error_never_on_ctrl_c(
        tmp_path: Path) -> None:
    said: list[str] = []
    out = tmp_path / "new" / "dir" / "report.xml"
    with fj.report(fj.check_path(out), "envbuild x", said.append) as record:
        record([Suite("s", (Check("a.b", "fail"),))])
    assert parse(out.read_text()).get("failures") == "1"
    with pytest.raises(EnvironmentProblem), fj.report(out, "envbuild x", said.append):
        raise EnvironmentProblem("no Docker engine", "start it")
    error = parse(out.read_text()).find("testsuite/testcase/error")
    assert error is not None and error.get("message") == "no Docker engine"
    assert "hint: start it" in (error.text or "")
    out.unlink()
    with pytest.raises(KeyboardInterrupt), fj.report(out, "envbuild x", said.append):
        raise KeyboardInterrupt
    assert not out.exists()
    with pytest.raises(EnvbuildError), fj.report(None, "envbuild x", said.append):
        raise EnvbuildError("x", "y")
    assert sorted(p.name for p in out.parent.iterdir()) == []  # no temporary file left
    assert said == []


def test_a_symlink_is_refused_never_replaced(tmp_path: Path) -> None:
    target = tmp_path / "real.xml"
    target.write_text("keep")
    for name, to in (("link.xml", target), ("dangling.xml", tmp_path / "nowhere.xml")):
        link = tmp_path / name
        link.symlink_to(to)
        with pytest.raises(UsageError) as info:
            fj.check_path(link)
        assert info.value.message == f"--junit {link}: is a symlink (envbuild would replace " \
            "the link with a file)"
        assert link.is_symlink()
    assert target.read_text() == "keep" and not (tmp_path / "nowhere.xml").exists()


def test_a_junit_path_that_is_an_input_of_the_command_is_refused(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    monkeypatch.chdir(tmp_path)
    lock = tmp_path / "envbuild.lock"
    lock.write_text("format = 1\n")
    os.link(lock, tmp_path / "hard.lock")
    (tmp_path / "sub").mkdir()
    for path, read in ((Path("envbuild.lock"), lock),  # relative and absolute
                       (tmp_path / "sub" / ".." / "envbuild.lock", Path("envbuild.lock")),
                       (tmp_path / "hard.lock", lock),  # another name, the same inode
                       (Path("envbuild.toml"), tmp_path / "envbuild.toml")):  # not there yet
        with pytest.raises(UsageError) as info:
            fj.check_path(path, [Path("-"), read])
        assert "is the command's own input" in info.value.message, path
        assert info.value.exit_code == 2
    assert lock.read_text() == "format = 1\n" and not (tmp_path / "envbuild.toml").exists()
    assert fj.check_path(Path("other.xml"), [lock, Path("-")]) == Path("other.xml")


def test_a_place_no_file_can_be_written_is_refused_before_the_run(tmp_path: Path) -> None:
    """/proc/self/status is a 'regular' file, but no file can be made next to it."""
    with pytest.raises(UsageError) as info:
        fj.check_path(Path("/proc/self/status"))
    assert info.value.message.startswith("--junit /proc/self/status: cannot create a file in "
                                         "/proc/self: ")
    made = tmp_path / "a" / "b" / "x.xml"
    assert fj.check_path(made) == made and made.parent.is_dir()  # its directories made
    assert list(made.parent.iterdir()) == []  # the probe removed


def test_a_stale_file_is_removed_when_the_path_is_checked(tmp_path: Path) -> None:
    old = tmp_path / "old.xml"
    old.write_text("<testsuites/>")
    fj.check_path(old)
    assert not old.exists()  # an error before the run leaves no old result behind


def test_a_write_that_fails_at_the_end_is_a_warning_not_the_run_s_error(tmp_path: Path) -> None:
    """The path became a directory while the checks ran: the block's own outcome (no error,
    the run's error) is kept, the write is a one-line warning."""
    said: list[str] = []
    out = tmp_path / "x.xml"
    with fj.report(fj.check_path(out), "envbuild x", said.append) as record:
        out.mkdir()
        record([Suite("s", (Check("a.b", "pass"),))])
    assert said == [f"warning: --junit {out}: is a directory, not a file (not written)"]
    said.clear()
    with pytest.raises(EnvironmentProblem) as info, fj.report(out, "envbuild x", said.append):
        raise EnvironmentProblem("no Docker engine", "start it")
    assert info.value.message == "no Docker engine" and len(said) == 1
    said.clear()
    out.rmdir()
    (tmp_path / "x.xml").write_text("")
    under = tmp_path / "x.xml" / "y.xml"  # under a file
    with fj.report(under, "envbuild x", said.append) as record:
        record([])
    assert said == [f"warning: --junit {under}: Not a directory (not written)"]
