"""Text and JSON renderings of a doctor run (pure: data in, text out)."""

from __future__ import annotations

import textwrap
from collections import Counter
from typing import Any

from envbuild.common.echo import escaped
from envbuild.doctor.model import Finding, HostFacts, Recommendation, Severity

WIDTH = 100
_LABEL = {Severity.OK: "ok", Severity.INFO: "info", Severity.WARN: "WARN", Severity.ERROR: "ERROR"}


def host_summary(facts: HostFacts) -> dict[str, Any]:
    return {"system": facts.system, "machine": facts.machine,
            "python": facts.python.get("version", ""),
            "executable": facts.python.get("executable", ""),
            "container": facts.container}


def to_json(findings: list[Finding], rec: Recommendation, facts: HostFacts) -> dict[str, Any]:
    counts = Counter(str(f.severity) for f in findings)
    return {"schema": 1, "host": host_summary(facts),
            "summary": {s.value: counts.get(s.value, 0) for s in Severity},
            "findings": [f.to_json() for f in findings],
            "recommendation": rec.to_json()}


def _wrap(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent,
                         break_on_hyphens=False, break_long_words=False) or [indent]


def render(findings: list[Finding], rec: Recommendation, facts: HostFacts,
           verbose: bool = False) -> str:
    h = host_summary(facts)
    where = f"{h['system']} {h['machine']}"
    if h["container"]:
        where += f", inside a {h['container']} container"
    lines = [f"envbuild doctor: {where}, Python {h['python']} ({h['executable']})", ""]
    pad = " " * 9
    for f in findings:
        lines += textwrap.wrap(f"{_LABEL[f.severity]:<5}  {f.id}  {f.message}", WIDTH,
                               initial_indent="  ", subsequent_indent=pad,
                               break_on_hyphens=False, break_long_words=False)
        if f.remediation and f.severity is not Severity.OK:
            lines += _wrap("fix: " + f.remediation, pad)
        if f.evidence and (verbose or f.severity in (Severity.WARN, Severity.ERROR)):
            for ev in f.evidence[: None if verbose else 3]:
                lines += _wrap("| " + ev, pad)
    counts = Counter(f.severity for f in findings)
    lines += ["", f"{counts[Severity.ERROR]} error(s), {counts[Severity.WARN]} warning(s), "
              f"{counts[Severity.INFO]} note(s), {counts[Severity.OK]} ok", "",
              "Recommended for this host:", f"  {rec.command}"]
    if rec.reason:
        lines += _wrap(f"({rec.reason})", "  ")
    for alt in rec.alternatives:
        lines += _wrap("or: " + alt, "  ")
    return "\n".join(escaped(line) for line in lines) + "\n"  # a recording's terminal escapes
