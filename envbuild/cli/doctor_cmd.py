"""`envbuild doctor` and `envbuild explain`: parsing and dispatch only."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from envbuild import matrix as matrix_mod
from envbuild.cli._app import app, emit_json, say, warn
from envbuild.common.errors import EXIT_FAILED, UsageError

if TYPE_CHECKING:
    from envbuild.features.explain import LogText


def _matrix(directory: Path | None) -> matrix_mod.Matrix:
    return matrix_mod.load(directory)


@app.command(help="Check this host for GPU/ML problems and print the `envbuild make` command "
                  "it should run.")
def doctor(
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON report.")] = False,
    cuda: Annotated[str, typer.Option("--cuda", metavar="X.Y",
                                      help="Ask: can this host run CUDA X.Y?")] = "",
    facts_dir: Annotated[Path | None, typer.Option(
        "--facts", metavar="DIR",
        help="Evaluate raw facts recorded with --save instead of probing this host.")] = None,
    save: Annotated[Path | None, typer.Option(
        "--save", metavar="DIR", help="Also record the raw probe outputs into DIR.")] = None,
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help="Show all evidence.")] = False,
    collect_env: Annotated[str | None, typer.Option(
        "--collect-env", metavar="FILE",
        help="Judge a pasted `python -m torch.utils.collect_env` report (FILE, or - for stdin) "
             "instead of this host: the same findings, with cause codes, and the command that "
             "works there.")] = None,
    markdown: Annotated[bool, typer.Option(
        "--markdown", help="With --collect-env: print a reply to paste into the issue.")] = False,
    matrix_dir: Annotated[Path | None, typer.Option("--matrix", hidden=True)] = None,
) -> None:
    from envbuild.doctor import report
    from envbuild.features.checkup import doctor as diagnose

    if collect_env is not None:
        if cuda or facts_dir is not None or save is not None:
            raise UsageError("--collect-env judges a report: --cuda, --facts and --save are for "
                             "this host", "drop them, or drop --collect-env")
        _report(collect_env, json_out, markdown, verbose, matrix_dir)
        return
    if markdown:
        raise UsageError("--markdown goes with --collect-env FILE",
                         "e.g. envbuild doctor --collect-env env.txt --markdown")
    d = diagnose(cuda=cuda, facts_dir=facts_dir, save=save, matrix_dir=matrix_dir)
    if json_out:
        emit_json(report.to_json(d.findings, d.recommendation, d.facts, d.host))
    else:
        sys.stdout.write(report.render(d.findings, d.recommendation, d.facts, verbose))
    if d.failed:
        raise typer.Exit(EXIT_FAILED)


def _report(source: str, json_out: bool, markdown: bool, verbose: bool,
            matrix_dir: Path | None) -> None:
    from envbuild.doctor import report
    from envbuild.features.checkup import doctor_report

    if json_out and markdown:
        raise UsageError("--json and --markdown are two outputs: give one",
                         "e.g. envbuild doctor --collect-env env.txt --markdown")
    c = doctor_report(source, matrix_dir=matrix_dir)
    if json_out:
        emit_json(report.report_json(c.findings, c.recommendation, c.facts, c.report,
                                     c.unjudged, c.pip_install, c.source, c.size))
    elif markdown:
        sys.stdout.write(report.markdown(c.findings, c.recommendation, c.report, c.unjudged,
                                         c.pip_install, c.facts.python.get("version", "")))
    else:
        sys.stdout.write(report.render(
            c.findings, c.recommendation, c.facts, verbose,
            heading=report.report_heading(c.report, c.facts, c.source), host="that host",
            after=report.report_after(c.report, c.unjudged, c.pip_install, c.facts)))
    if c.failed:
        raise typer.Exit(EXIT_FAILED)


def _read_input(text: str | None, file: Path | None) -> LogText:
    from envbuild.common.boundedio import open_log, path_text
    from envbuild.features.explain import LogText, read_log

    if text is not None and file is not None:
        raise UsageError("give the error text or --file, not both",
                         "e.g. envbuild explain --file train.log, or envbuild explain 'TEXT'")
    if file is not None:  # a regular file, or a pipe/FIFO (never waited on); no device
        with open_log(file) as fh:
            try:
                return read_log(fh, name=str(file))
            except OSError as exc:
                raise UsageError(f"cannot read {path_text(file)}: {exc.strerror}",
                                 "give a readable log file") from exc
    if text is not None:
        return LogText(text, len(text.encode("utf-8", errors="replace")))
    if sys.stdin.isatty():
        raise UsageError("no error text given",
                         "pass it as an argument, with --file LOG, or on stdin")
    return read_log(sys.stdin.buffer)


@app.command(help="Name the cause and the fix of an error message or log (TEXT, --file, or stdin).")
def explain(
    text: Annotated[str | None, typer.Argument(
        metavar="TEXT", show_default=False,
        help="The error message (or use --file LOG, or pipe it on stdin).")] = None,
    file: Annotated[Path | None, typer.Option("--file", "-f", metavar="LOG",
                                              help="Read the error text from LOG.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    matrix_dir: Annotated[Path | None, typer.Option("--matrix", hidden=True)] = None,
) -> None:
    from envbuild.features.explain import explain as match

    log = _read_input(text, file)
    if not log.text.strip():
        raise UsageError("the error text is empty",
                         "pass the message as an argument, with --file LOG, or on stdin")
    matches = match(log.text, _matrix(matrix_dir))
    if log.cut and not json_out:
        warn("note: " + log.note())
    if json_out:
        emit_json({"matches": [m.to_json() for m in matches], "input": log.to_json()})
    elif matches:
        for i, m in enumerate(matches, 1):
            harmless = "harmless, " if m.harmless else ""
            say(f"{i}. {m.id}: {m.title} ({harmless}confidence {m.confidence:.2f})")
            say(f"   matched: {m.line}")
            say(f"   cause:   {m.cause}")
            say(f"   fix:     {m.fix}")
            if i < len(matches):
                say()
        if all(m.harmless for m in matches):
            warn("note: only harmless messages matched (no error); if something failed, its "
                 "error is elsewhere: include the first error line and the lines around it")
    else:
        warn("no known failure signature matched; run `envbuild doctor` to check this host, "
             "or include the first error line and the lines around it")
    if not matches:
        raise typer.Exit(EXIT_FAILED)
