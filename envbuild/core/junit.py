"""JUnit XML from check records (pure): the test report CI systems read (GitLab's
artifacts:reports:junit, GitHub's test-report actions, Jenkins).

One <testsuite> per suite, one <testcase> per check: classname = the suite's prefix and the
check's group (its id up to the first dot), name = the check id; the title, and for a warning the
warning, in the testcase's <system-out>. A failed check is a <failure>, a check (or a whole run)
that could not run an <error>; a skipped check and a check that was not run are both <skipped>,
told apart by the message ("skipped: ..." / "not run: ..."); a warning passes.

Text envbuild did not write (titles and messages from checks, registries, nodes) is made
XML-safe: what XML cannot hold (control characters, lone surrogates, U+FFFE/U+FFFF) is written as
its Python escape (\\x1b), attributes are cut at MESSAGE_CHARS and bodies at BODY_CHARS.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from envbuild.common.record import record

STATUSES = ("pass", "warn", "fail", "error", "skip", "not_run")
MESSAGE_CHARS = 1000  # of a failure/skipped message attribute
BODY_CHARS = 64 * 1024  # of a failure body or a system-out
MAX_SECONDS = 1e9  # every time is clamped to [0, MAX_SECONDS]; inf and nan are left out
# What XML 1.0 cannot hold: controls other than tab, LF and CR; surrogates; U+FFFE and U+FFFF.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


@record
class Check:
    id: str
    status: str  # one of STATUSES
    title: str = ""
    message: str = ""  # why it failed, was skipped or warned: one line
    detail: str = ""  # more: the fix, what was measured
    seconds: float | None = None
    classname: str = ""  # default: the id's group ("facts" of "facts.torch")


@record
class Suite:
    name: str
    checks: tuple[Check, ...]
    prefix: str = ""  # of every classname: "n1." for a node's checks
    seconds: float | None = None
    timestamp: str | None = None  # ISO 8601, UTC
    hostname: str | None = None


def xml_text(text: str, limit: int = BODY_CHARS) -> str:
    """`text` as XML can hold it: characters it cannot, written as their Python escapes; cut at
    `limit` characters, saying how many were left out."""
    out = _NOT_XML.sub(lambda m: repr(m.group())[1:-1], text)
    more = len(out) - limit
    return out if more <= 0 else f"{out[:limit]}...({more} more characters)"


def counts(checks: Iterable[Check]) -> dict[str, int]:
    """tests, failures, errors, skipped (skipped and not run together), as JUnit counts them."""
    out = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for c in checks:
        out["tests"] += 1
        status = _status(c.status)
        if status == "fail":
            out["failures"] += 1
        elif status == "error":
            out["errors"] += 1
        elif status in ("skip", "not_run"):
            out["skipped"] += 1
    return out


def _status(status: str) -> str:
    return status if status in STATUSES else "error"


def _strip(message: str, *prefixes: str) -> str:
    for p in prefixes:
        if message.lower().startswith(p):
            return message[len(p):].lstrip()
    return message


def seconds(s: object) -> float | None:
    """A time as JUnit gets it: a finite number (an int or float from a report, not a bool)
    clamped to [0, MAX_SECONDS]; None for anything else (inf, nan, text, an int too big for a
    float)."""
    if isinstance(s, bool) or not isinstance(s, (int, float)):
        return None
    try:
        t = float(s)
    except OverflowError:
        return None
    return min(max(t, 0.0), MAX_SECONDS) if math.isfinite(t) else None


def _seconds(s: float | None) -> str | None:
    t = seconds(s)
    return None if t is None else f"{t:.3f}"


def _case(suite: Suite, c: Check) -> Any:
    from xml.etree import ElementTree as ET

    status = _status(c.status)
    group = c.classname or c.id.partition(".")[0]
    attrs = {"classname": xml_text(suite.prefix + group, MESSAGE_CHARS),
             "name": xml_text(c.id, MESSAGE_CHARS)}
    if (t := _seconds(c.seconds)) is not None:
        attrs["time"] = t
    case = ET.Element("testcase", attrs)
    message = " ".join(c.message.split())
    if status in ("fail", "error"):
        if status != c.status:
            message = f"unknown status {c.status!r}" + (f": {message}" if message else "")
        el = ET.SubElement(case, "failure" if status == "fail" else "error",
                           {"message": xml_text(message or status, MESSAGE_CHARS),
                            "type": status})
        el.text = xml_text("\n".join(x for x in (c.message, c.detail) if x))
    elif status in ("skip", "not_run"):
        why = _strip(message, "skipped:", "not run:")
        head = "skipped" if status == "skip" else "not run"
        ET.SubElement(case, "skipped",
                      {"message": xml_text(f"{head}: {why or 'no reason given'}",
                                           MESSAGE_CHARS)})
    out = [c.title] if c.title else []
    if status == "warn":
        out.append("warning: " + " ".join(x for x in (c.message, c.detail) if x))
    elif status == "pass" and c.message:
        out.append(c.message)
    if out:
        ET.SubElement(case, "system-out").text = "\n".join(xml_text(x) for x in out)
    return case


def _suite(s: Suite) -> Any:
    from xml.etree import ElementTree as ET

    attrs = {"name": xml_text(s.name, MESSAGE_CHARS),
             **{k: str(v) for k, v in counts(s.checks).items()}}
    if (t := _seconds(s.seconds)) is not None:
        attrs["time"] = t
    if s.timestamp:
        attrs["timestamp"] = xml_text(s.timestamp.removesuffix("Z"), 64)
    if s.hostname:
        attrs["hostname"] = xml_text(s.hostname, MESSAGE_CHARS)
    el = ET.Element("testsuite", attrs)
    el.extend(_case(s, c) for c in s.checks)
    return el


def to_xml(suites: Sequence[Suite], name: str) -> str:
    """The JUnit XML document: <testsuites> with the totals, then each suite."""
    from xml.etree import ElementTree as ET

    total = counts(c for s in suites for c in s.checks)
    root = ET.Element("testsuites", {"name": xml_text(name, MESSAGE_CHARS),
                                     **{k: str(v) for k, v in total.items()}})
    times = [t for s in suites if (t := seconds(s.seconds)) is not None]
    if times and len(times) == len(suites):  # the total of what the suites say, clamped too
        root.set("time", f"{min(sum(times), MAX_SECONDS):.3f}")
    root.extend(_suite(s) for s in suites)
    ET.indent(root)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            + ET.tostring(root, encoding="unicode") + "\n")


def error_suite(name: str, message: str, hint: str = "") -> Suite:
    """A run that stopped before it had results: one testcase, an <error>."""
    return Suite(name, (Check("envbuild.run", "error", "the run could not finish", message,
                              f"hint: {hint}" if hint else "", classname="envbuild"),))


def validator_check(c: Mapping[str, Any]) -> Check:
    """A check of the validator's report ({id, title, status, reason, detail, remediation,
    duration_s}) as a record."""
    status = str(c.get("status", ""))
    reason, detail = str(c.get("reason") or ""), str(c.get("detail") or "")
    fix = str(c.get("remediation") or "")
    message = reason if status in ("skip", "not_run") else (detail or fix)
    more = f"fix: {fix}" if fix and status in ("warn", "fail") and fix != message else ""
    return Check(str(c.get("id", "?")), status, str(c.get("title") or ""), message, more,
                 seconds(c.get("duration_s")))


def validation_suite(report: Mapping[str, Any], name: str, prefix: str = "") -> Suite:
    """The validator's report as one suite: one testcase per check, in the report's order."""
    checks = report.get("checks")
    host = report.get("host")
    return Suite(name, tuple(validator_check(c) for c in checks or () if isinstance(c, Mapping)),
                 prefix, seconds(report.get("duration_s")),
                 str(report["started"]) if report.get("started") else None,
                 str(host.get("hostname")) if isinstance(host, Mapping)
                 and host.get("hostname") else None)
