"""Text and JSON renderings of a doctor run (pure: data in, text out)."""

from __future__ import annotations

import textwrap
from collections import Counter
from typing import Any

from envbuild.common.echo import escaped
from envbuild.doctor.collect_env import Report
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
           verbose: bool = False, *, heading: str = "", host: str = "this host",
           after: tuple[str, ...] = ()) -> str:
    """The text report; a collect_env report's run gives its own heading, calls the host
    "that host" and adds what it could not judge (`after`)."""
    h = host_summary(facts)
    where = f"{h['system']} {h['machine']}"
    if h["container"]:
        where += f", inside a {h['container']} container"
    lines = [heading or f"envbuild doctor: {where}, Python {h['python']} ({h['executable']})",
             ""]
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
              f"Recommended for {host}:", f"  {rec.command}"]
    if rec.reason:
        lines += _wrap(f"({rec.reason})", "  ")
    for alt in rec.alternatives:
        lines += _wrap("or: " + alt, "  ")
    for extra in after:
        lines += ["", *_wrap(extra, "")]
    return "\n".join(escaped(line) for line in lines) + "\n"  # a recording's terminal escapes


# ---------------------------------------------------------------- a collect_env report

# The report's facts a reply quotes, as collect_env labels them (Report field, label).
QUOTED = (("torch", "PyTorch version"), ("cuda_built", "CUDA used to build PyTorch"),
          ("os", "OS"), ("platform", "Python platform"), ("cuda_available", "Is CUDA available"),
          ("gpus", "GPU models and configuration"), ("driver", "Nvidia driver version"),
          ("cudnn", "cuDNN version"), ("hip", "HIP runtime version"))


def report_facts(report: Report) -> list[str]:
    """The report's lines the judgement used, as collect_env printed them (one value a line)."""
    out = []
    for field, label in QUOTED:
        value = getattr(report, field)
        if value is None or value == "" or value == ():
            continue
        if isinstance(value, bool):
            value = str(value)
        if isinstance(value, tuple):
            value = "; ".join(value[:8]) + (f"; ... ({len(value)} in all)" if len(value) > 8
                                            else "")
        out.append(f"{label}: {value}")
    for w, text in ((report.driver_cuda, f"(torch's warning) the driver's CUDA: "
                     f"{report.driver_cuda}"),
                    (report.no_driver_warning, "(torch's warning) Found no NVIDIA driver on "
                     "your system"),
                    (report.incompatible_ccs, "(torch's warning) not compatible: "
                     + " ".join(f"sm_{c.replace('.', '')}" for c in report.incompatible_ccs))):
        if w:
            out.append(text)
    out += [f"[{p.manager}] {p.name} {p.version} {p.build}".rstrip() for p in report.packages
            if p.name.lower() in _QUOTED_PACKAGES or p.name.lower().startswith("nvidia-")][:12]
    return out


_QUOTED_PACKAGES = ("torch", "pytorch", "torch-nightly", "torchvision", "torchaudio",
                    "cudatoolkit", "pytorch-cuda", "cpuonly")


def report_heading(report: Report, facts: HostFacts, source: str) -> str:
    torch = f"torch {report.torch}" if report.torch else "no importable torch"
    where = report.os or f"{facts.system} {facts.machine}".strip()
    return (f"envbuild doctor --collect-env: the report in {source} ({torch} on {where}"
            + (f", Python {facts.python.get('version')}" if facts.python.get("version") else "")
            + ")")


def report_after(report: Report, unjudged: tuple[str, ...], pip: str) -> tuple[str, ...]:
    out = []
    if pip:
        out.append(f"Without envbuild, on that host: {pip}")
    if unjudged:
        out.append("Not judged from the report: " + "; ".join(unjudged) + ".")
    if report.notes:
        out.append("Note: " + "; ".join(report.notes) + ".")
    return tuple(out)


def report_json(findings: list[Finding], rec: Recommendation, facts: HostFacts, report: Report,
                unjudged: tuple[str, ...], pip: str, source: str, size: int) -> dict[str, Any]:
    """doctor's JSON (the same keys and findings), plus the report's facts, what it could not
    judge, the pip line, and the leading cause."""
    out = to_json(findings, rec, facts)
    out["source"] = {"kind": "collect_env", "name": source, "bytes": size,
                     "truncated": report.truncated}
    out["report"] = {"torch": report.torch, "cuda_built": report.cuda_built,
                     "rocm_built": report.rocm_built, "os": report.os,
                     "platform": report.platform, "python": report.python,
                     "cuda_available": report.cuda_available, "gpus": list(report.gpus),
                     "driver": report.driver, "driver_cuda": report.driver_cuda,
                     "cudnn": list(report.cudnn), "hip": report.hip,
                     "packages": [f"[{p.manager}] {p.name}=={p.version}" for p in
                                  report.packages[:64]],
                     "uncollected": list(report.uncollected)}
    out["cause"] = next((f.cause for f in findings if f.cause), "")
    out["unjudged"] = list(unjudged)
    out["pip_install"] = pip
    return out


_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]<>#|!~"})


def _md(text: str) -> str:
    """Prose from a paste, safe in a Markdown reply: no links, images, HTML, code or emphasis
    it did not mean (every Markdown character escaped), no terminal escapes."""
    return escaped(text).translate(_MD_SPECIAL)


def _code(text: str) -> str:
    """A line inside a fenced block: no backticks (a fence cannot be closed from inside)."""
    return escaped(text).replace("`", "'")


def markdown(findings: list[Finding], rec: Recommendation, report: Report,
             unjudged: tuple[str, ...], pip: str) -> str:
    """A reply to paste into the issue: the cause first, the facts it used quoted, the command
    that works on that host, and what the report could not tell."""
    lines = ["**envbuild doctor** on this `collect_env` report", ""]
    problems = [f for f in findings if f.severity in (Severity.ERROR, Severity.WARN)]
    if problems:
        lead = problems[0]
        cause = f" (`{lead.cause}`)" if lead.cause else ""
        lines += [f"**Cause{cause}:** {_md(lead.message)}", "",
                  f"**Fix:** {_md(lead.remediation)}", ""]
        if len(problems) > 1:
            lines += ["Also:"]
            lines += [f"- {_md(f.message)}" + (f" (`{f.cause}`)" if f.cause else "")
                      for f in problems[1:6]]
            lines += [""]
    else:
        lines += ["No problem found in the report.", ""]
    lines += ["From the report:", "", "```text", *(_code(x) for x in report_facts(report)),
              "```", "", "What runs on that host (resolved by envbuild):", "", "```sh",
              _code(rec.command), "```"]
    if rec.reason:
        lines += [f"({_md(rec.reason)})"]
    for alt in rec.alternatives:
        lines += ["", "or:", "", "```sh", _code(alt.split("  (")[0]), "```",
                  f"({_md(alt.partition('  (')[2].rstrip(')'))})" if "  (" in alt else ""]
    if pip:
        lines += ["", "Without envbuild:", "", "```sh", _code(pip), "```"]
    if unjudged:
        lines += ["", "<sub>Not judged from the report: " + _md("; ".join(unjudged))
                  + ".</sub>"]
    return "\n".join(lines).replace("\n\n\n", "\n\n") + "\n"
