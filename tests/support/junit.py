"""Reading a --junit file back and holding it against the --json of the same run: the same
checks, in the same order, each with the same outcome, and the same counts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

COUNTS = ("tests", "failures", "errors", "skipped")
# a check's status as JUnit shows it (a warning passes)
KIND = {"pass": "pass", "warn": "pass", "fail": "failure", "error": "error", "skip": "skip",
        "not_run": "not_run"}


def read(path: Path) -> ET.Element:
    root = ET.fromstring(path.read_bytes())
    assert root.tag == "testsuites", root.tag
    for suite in root:
        assert suite.tag == "testsuite"
        assert counts(suite) == expected_counts([kind(c) for c in suite.iter("testcase")])
    assert counts(root) == {k: sum(counts(s)[k] for s in root) for k in COUNTS}
    return root


def counts(el: ET.Element) -> dict[str, int]:
    return {k: int(el.get(k, "-1")) for k in COUNTS}


def kind(case: ET.Element) -> str:
    """pass | failure | error | skip | not_run (a <skipped> message says which)."""
    for child in case:
        if child.tag in ("failure", "error"):
            return child.tag
        if child.tag == "skipped":
            message = child.get("message", "")
            assert message.startswith(("skipped: ", "not run: ")), message
            return "skip" if message.startswith("skipped: ") else "not_run"
    return "pass"


def expected_counts(kinds: Sequence[str]) -> dict[str, int]:
    n = Counter(kinds)
    return {"tests": len(kinds), "failures": n["failure"], "errors": n["error"],
            "skipped": n["skip"] + n["not_run"]}


def cases(suite: ET.Element) -> list[tuple[str, str]]:
    return [(c.get("name", ""), kind(c)) for c in suite.iter("testcase")]


def report_cases(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A validator report's checks as (id, kind)."""
    return [(c["id"], KIND[c["status"]]) for c in report["checks"]]


def assert_matches_report(suite: ET.Element, report: Mapping[str, Any]) -> None:
    """The suite holds the report's checks; its counts are the report's summary."""
    assert cases(suite) == report_cases(report)
    s = report["summary"]
    assert counts(suite) == {"tests": sum(s.get(k, 0) for k in KIND), "failures": s["fail"],
                             "errors": 0, "skipped": s["skip"] + s["not_run"]}


def assert_matches_cluster(root: ET.Element, data: Mapping[str, Any]) -> None:
    """A suite per node of the cluster report (its report's checks first), then the cluster's."""
    suites = list(root)
    assert [s.get("name") for s in suites] == [f"node {n['node']}" for n in data["nodes"]] \
        + ["cluster"]
    for suite, n in zip(suites, data["nodes"], strict=False):
        got = cases(suite)
        want = report_cases(n["report"]) if n.get("report") else []
        assert got[:len(want)] == want
        extra = got[len(want):]
        assert len(extra) <= 1 and all(k in ("failure", "error") for _, k in extra)
        no_failed_check = "failure" not in {k for _, k in want}
        assert bool(extra) == (n["status"] == "missing" or bool(n.get("error"))
                               or not n.get("report")
                               or (n["status"] == "fail" and no_failed_check))
    ar = data["allreduce"]
    worked = (ar["status"] != "missing" and not ar["errors"] and not ar["missing_ranks"]
              and ar["exact"] and ar["results"])  # the floor is busbw's, not the all-reduce's
    assert dict(cases(suites[-1])) == {
        "cluster.allreduce": "pass" if worked else "failure",
        "cluster.busbw": KIND[ar["expectation"]["status"]] if ar["expectation"] else "skip",
        "cluster.drift": "failure" if data["drift"] else "pass",
        "cluster.stragglers": "pass"}


def assert_matches_team(root: ET.Element, data: Mapping[str, Any]) -> None:
    """A suite per image row of `team check --json`, a testcase per check of that image."""
    assert [s.get("name") for s in root] == [f"image {r['name']}" for r in data["images"]]
    got = [(s.get("name", "").removeprefix("image "), name, k) for s in root
           for name, k in cases(s)]
    assert got == [(c["image"], c["check"], KIND[c["status"]]) for c in data["checks"]]
    failed = sum(1 for c in data["checks"] if c["status"] == "fail")
    errors = sum(1 for c in data["checks"] if c["status"] == "error")
    assert (counts(root)["failures"], counts(root)["errors"]) == (failed, errors)
    assert failed + errors == len(data["problems"])
