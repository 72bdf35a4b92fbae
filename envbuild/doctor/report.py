"""Text and JSON renderings of a doctor run (pure: data in, text out)."""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from envbuild.common.echo import escaped
from envbuild.doctor.model import Finding, HostFacts, Recommendation, Severity

if TYPE_CHECKING:
    from envbuild.doctor.collect_env import Report

WIDTH = 100
_LABEL = {Severity.OK: "ok", Severity.INFO: "info", Severity.WARN: "WARN", Severity.ERROR: "ERROR"}


def host_summary(facts: HostFacts) -> dict[str, Any]:
    return {"system": facts.system, "machine": facts.machine,
            "python": facts.python.get("version", ""),
            "executable": facts.python.get("executable", ""),
            "container": facts.container}


def to_json(findings: list[Finding], rec: Recommendation, facts: HostFacts,
            host: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """doctor --json; `host` adds data to the host summary (doctor's driver and GPUs)."""
    counts = Counter(str(f.severity) for f in findings)
    return {"schema": 1, "host": {**host_summary(facts), **(host or {})},
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
    for extra in after:  # a command stays on one line: it is copied and pasted
        lines += ["", *(extra.split("\n") if extra.startswith(PIP_LEAD) else _wrap(extra, ""))]
    return "\n".join(escaped(line) for line in lines) + "\n"  # a recording's terminal escapes


# ---------------------------------------------------------------- a collect_env report

# The report's facts a reply quotes, as collect_env labels them (Report field, label).
QUOTED = (("torch", "PyTorch version"), ("cuda_built", "CUDA used to build PyTorch"),
          ("os", "OS"), ("platform", "Python platform"), ("cuda_available", "Is CUDA available"),
          ("gpus", "GPU models and configuration"), ("driver", "Nvidia driver version"),
          ("cudnn", "cuDNN version"), ("hip", "HIP runtime version"))


def report_facts(report: Report) -> list[str]:
    """The report's lines the judgement used, as they were pasted, and torch's warnings."""
    from envbuild.doctor.from_report import TORCHES

    fields = {f for f, _ in QUOTED}
    out = [line for f, line in report.lines if f in fields]
    for w, text in ((report.driver_cuda, "(torch's warning) the driver's CUDA: "
                     f"{report.driver_cuda}"),
                    (report.no_driver_warning, "(torch's warning) Found no NVIDIA driver on "
                     "your system"),
                    (report.incompatible_ccs, "(torch's warning) not compatible: "
                     + " ".join(f"sm_{c.replace('.', '')}" for c in report.incompatible_ccs))):
        if w:
            out.append(text)
    wanted = (*TORCHES, "torchvision", "torchaudio", "cudatoolkit", "pytorch-cuda", "cpuonly")
    out += [line for f, line in report.lines if f == "libraries" and (
        any(f"] {n}" in line.lower().replace("_", "-") for n in wanted) or "nvidia-" in line
    )][:12]
    return out[:40]


def report_heading(report: Report, facts: HostFacts, source: str) -> str:
    torch = (f"torch {report.torch}" if report.torch else "no importable torch"
             if "torch" in report.labels else "torch not shown: the report is cut above it")
    where = report.os or f"{facts.system} {facts.machine}".strip()
    return (f"envbuild doctor --collect-env: the report in {source} ({torch} on {where}"
            + (f", Python {facts.python.get('version')}" if facts.python.get("version") else "")
            + ")")


PIP_LEAD = "Without envbuild, in that Python:\n  "


def report_after(report: Report, unjudged: tuple[str, ...], pip: str,
                 facts: HostFacts | None = None) -> tuple[str, ...]:
    out = []
    python = facts.python.get("version", "") if facts is not None else ""
    if pip:
        out.append(PIP_LEAD + pip)
    elif python:
        out.append(f"Without envbuild: no torch release envbuild knows installs in that Python "
                   f"({python}) for that command; a newer Python, or the image, is the way")
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
                     "cudnn": list(report.cudnn), "hip": report.hip, "miopen": report.miopen,
                     "libc": report.libc, "debug": report.debug,
                     "packages": [f"[{p.manager}] {p.name}=={p.version}" for p in
                                  report.packages[:64]],
                     "uncollected": list(report.uncollected)}
    out["report"]["notes"] = list(report.notes)
    out["cause"] = next((f.cause for f in findings if f.cause), "")
    out["unjudged"] = list(unjudged)
    out["pip_install"] = pip
    return out


_MD_SPECIAL = str.maketrans({**{c: "\\" + c for c in "\\`*_[]<>#|!~"}, "@": "&#64;"})


def _md(text: str) -> str:
    """Prose from a paste, safe in a Markdown reply: no links, images, HTML, code or emphasis
    it did not mean (every Markdown character escaped), no terminal escapes."""
    return escaped(text).translate(_MD_SPECIAL)


def _code(text: str) -> str:
    """A line inside a fenced block: no backticks (a fence cannot be closed from inside)."""
    return escaped(text).replace("`", "'")


def markdown(findings: list[Finding], rec: Recommendation, report: Report,
             unjudged: tuple[str, ...], pip: str, python: str = "") -> str:
    """A reply to paste into the issue: the cause first, the facts it used quoted, the command
    that works on that host, and what the report could not tell."""
    lines = ["**envbuild doctor** on this `collect_env` report", ""]
    problems = [f for f in findings if f.severity in (Severity.ERROR, Severity.WARN)]
    caused = [f for f in problems if f.cause]
    if caused:
        lead = caused[0]
        lines += [f"**Cause (`{lead.cause}`):** {_md(lead.message)}", "",
                  f"**Fix:** {_md(lead.remediation)}", ""]
    else:
        lead = None
        lines += ["No cause of a failure found in the report.", ""]
    rest = [f for f in problems if f is not lead]
    if rest:
        lines += ["Also:" if lead else "Notes:"]
        lines += [f"- {_md(f.message)}" + (f" (`{f.cause}`)" if f.cause else "")
                  for f in rest[:6]]
        lines += [""]
    lines += ["From the report:", "", "```text", *(_code(x) for x in report_facts(report)),
              "```", "", "What runs on that host (resolved by envbuild):", "", "```sh",
              _code(rec.command), "```"]
    if rec.reason:
        lines += [f"({_md(rec.reason)})"]
    for alt in rec.alternatives:
        command, _, why = alt.partition("  (")
        lines += ["", "or:", "", "```sh", _code(command), "```"]
        if why:
            lines += [f"({_md(why[:-1] if why.endswith(')') else why)})"]
    if pip:
        lines += ["", "Without envbuild, in that Python:", "", "```sh", _code(pip), "```"]
    elif python:
        lines += ["", f"Without envbuild: no torch release envbuild knows installs in that "
                  f"Python ({_md(python)}) for that command."]
    if unjudged:
        lines += ["", "<sub>Not judged from the report: " + _md("; ".join(unjudged))
                  + ".</sub>"]
    return "\n".join(lines).replace("\n\n\n", "\n\n") + "\n"
