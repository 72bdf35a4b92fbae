"""`envbuild run IMAGE [-- CMD ...]`: parsing and printing only (envbuild/features/run.py)."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, BinaryIO

import typer

from envbuild.cli import _options as o
from envbuild.cli._app import app, emit_json, say, warn
from envbuild.common import signals
from envbuild.common.errors import EXIT_FAILED, EXIT_INTERRUPTED, ConflictError, UsageError

if TYPE_CHECKING:
    from envbuild.features.run import Outcome, Preflight

Volume = Annotated[list[str] | None, typer.Option(
    "--volume", "-v", metavar="SRC:DST[:ro]",
    help="Bind-mount a host path (it must exist) at an absolute container path. Repeatable.")]
Env = Annotated[list[str] | None, typer.Option(
    "--env", "-e", metavar="NAME[=VALUE]",
    help="Set a variable in the container (NAME alone: its value here). Values are never "
         "printed. Repeatable.")]
ShmSize = Annotated[str | None, typer.Option(
    "--shm-size", metavar="SIZE", help="The container's /dev/shm (default: the preflight's, "
    "when the engine's default is too small for DataLoader workers).")]
Ipc = Annotated[str | None, typer.Option(
    "--ipc", metavar="host", help="host: share this host's IPC namespace and /dev/shm "
    "(instead of --shm-size).")]
NoGpu = Annotated[bool, typer.Option("--no-gpu", help="Start a GPU image without its GPUs.")]
Check = Annotated[bool, typer.Option(
    "--check", "--dry-run", help="Only print the preflight and the docker command; start "
    "nothing (exit 1 when the image cannot run here).")]
Fit = Annotated[Path | None, typer.Option(
    "--fit", metavar="REPORT.json", help="Warn before the start when the job `envbuild fit "
    "--json` reported (saved to REPORT.json) would not fit this host's GPUs.")]
Facts = Annotated[Path | None, typer.Option(
    "--facts", metavar="DIR", help="With --check: judge host facts recorded by `envbuild "
    "doctor --save DIR` instead of this host.")]


@app.command(help="Check an image against this host, then start it with the flags it needs; "
                  "the command's exit code passes through. CMD goes after --.",
             context_settings={"allow_interspersed_args": False})
def run(
    image: Annotated[str, typer.Argument(metavar="IMAGE", help="A local image envbuild built.")],
    command: Annotated[list[str] | None, typer.Argument(
        metavar="[-- CMD ...]", help="The command (default: the image's).")] = None,
    volume: Volume = None, env: Env = None, shm_size: ShmSize = None, ipc: Ipc = None,
    no_gpu: NoGpu = False, check: Check = False, facts: Facts = None, fit: Fit = None,
    json: o.Json = False,
    matrix_dir: Annotated[Path | None, typer.Option("--matrix", hidden=True)] = None,
) -> None:
    """0..255: the command's exit code once it started; before that envbuild's own (1 the image
    cannot run here, 2 bad input, 3 no engine or one that lost the exit code, 130 Ctrl-C, 143
    SIGTERM, 129 SIGHUP). --json tells them apart."""
    from envbuild.features import run as use

    if facts is not None and not check:
        raise UsageError("--facts judges a recorded host: nothing can start there",
                         "add --check")
    if ipc not in (None, "host"):
        raise UsageError(f"--ipc {ipc[:40]!r}: only `--ipc host` is taken",
                         "leave it out for a private /dev/shm of --shm-size")
    if ipc and shm_size:
        raise UsageError("--ipc host shares this host's /dev/shm: --shm-size does not apply",
                         "give one of them")
    cmd = list(command or ())
    req = use.RunRequest(
        command=tuple(cmd[1:] if cmd[:1] == ["--"] else cmd), shm_size=_size(shm_size),
        ipc_host=ipc == "host",
        mounts=tuple(use.parse_mount(x) for x in volume or ()),
        env=tuple(use.parse_env(x, os.environ) for x in env or ()), no_gpu=no_gpu,
        fit=use.read_fit(fit, matrix_dir) if fit is not None else None)
    ctx = use.Context(facts_dir=facts, matrix_dir=matrix_dir)
    pre, m, view = use.check(image, req, ctx, run_id="" if check else os.urandom(6).hex())
    _preflight(pre, json, to_stdout=check)
    if pre.blocked:
        _refuse(pre, json, shown=check)
    if check:
        return
    out = sys.stderr.buffer if json else sys.stdout.buffer
    try:
        with signals.raised():  # SIGTERM and SIGHUP unwind as Ctrl-C does: nothing is left
            outcome = use.start(pre, m, view, lambda b: _write(out, b),
                                lambda b: _write(sys.stderr.buffer, b))
    except KeyboardInterrupt as exc:
        how = f"terminated ({exc.name})" if isinstance(exc, signals.Terminated) else "interrupted"
        warn(f"envbuild run: {how}; the container is stopped and removed")
        raise typer.Exit(exc.exit_code if isinstance(exc, signals.Terminated)
                         else EXIT_INTERRUPTED) from None
    _after(outcome, json)
    if outcome.exit_code:
        raise typer.Exit(outcome.exit_code)


def _size(text: str | None) -> str | None:
    from envbuild.common.sizes import size_bytes

    if text is not None:
        size_bytes(text, "--shm-size")
    return text


def _write(stream: BinaryIO, chunk: bytes) -> None:
    stream.write(chunk)
    stream.flush()


def _preflight(pre: Preflight, as_json: bool, to_stdout: bool) -> None:
    if as_json:
        if to_stdout:
            emit_json({"preflight": pre.to_json(), "started": False})
        return
    show = say if to_stdout else warn
    show(f"preflight  {pre.image.ref}: {pre.image.describe()}")
    for f in pre.findings:
        show(f"  {f.severity!s:<5} {f.message}")
        if f.remediation and f.severity.rank >= 2:
            show(f"        fix: {f.remediation}")
    for a in pre.added:
        show(f"adds       {a.flag}  ({a.why})")
    show("docker     " + shlex.join(pre.plan.argv()))


def _refuse(pre: Preflight, as_json: bool, shown: bool) -> None:
    first = next(f for f in pre.findings if f.severity.rank == 3)
    if as_json:
        if not shown:
            emit_json({"preflight": pre.to_json(), "started": False})
        raise typer.Exit(EXIT_FAILED)
    alts = [f"{pre.nearest}  (the nearest variant of this image's spec that runs here)"] \
        if pre.nearest else []
    raise ConflictError(f"{pre.image.ref} cannot run on this host: {first.message}",
                        first.remediation or "fix what the preflight names, then run again",
                        alts)


def _after(outcome: Outcome, as_json: bool) -> None:
    if as_json:
        emit_json(outcome.to_json())
        return
    if not outcome.exit_code:
        return
    warn(f"envbuild run: the command exited {outcome.exit_code}")
    for c in outcome.causes:
        warn(f"  cause  {c['id']}: {c['cause']}")
        warn(f"  fix    {c['fix']}")
    if outcome.nearest:
        warn(f"  nearest variant that runs here: {outcome.nearest}")
    if outcome.nearest_note:
        warn(f"  ({outcome.nearest_note})")
