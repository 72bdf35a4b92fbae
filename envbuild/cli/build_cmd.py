"""`envbuild build`, `validate` and `make` (resolve -> render -> build -> validate)."""

from __future__ import annotations

import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from envbuild.cli import _options as o
from envbuild.cli._app import app, emit_json, say, warn
from envbuild.errors import EXIT_FAILED, UsageError

if TYPE_CHECKING:
    from envbuild.build import BuildResult
    from envbuild.pipeline import Secrets
    from envbuild.validate import Validation

Tag = Annotated[str | None, typer.Option(
    "--tag", help="Image tag (default envbuild/<target>:<torch>-<variant>-py<ver>-<spec hash>).")]
Rebuild = Annotated[bool, typer.Option(
    "--rebuild", help="Build even if an image with the same spec and context exists.")]
Progress = Annotated[str, typer.Option(
    "--progress", help="auto (a live status line on a terminal) | plain (every log line).")]
Push = Annotated[str | None, typer.Option(
    "--push", help="Registry to push to after the build, e.g. 127.0.0.1:5000.")]
RequireGpu = Annotated[bool, typer.Option(
    "--require-gpu", help="Fail (not skip) the device checks when no GPU is visible.")]
Timeout = Annotated[float, typer.Option("--timeout", help="Validation time limit, seconds.")]
Netrc = Annotated[Path | None, typer.Option(
    "--netrc", help="netrc file with index credentials (a BuildKit secret).")]


@contextmanager
def _progress(mode: str, as_json: bool) -> Iterator[Callable[[str], None]]:
    """A line sink: a live rich status on a terminal, plain stderr lines otherwise."""
    if mode not in ("auto", "plain"):
        raise UsageError(f"--progress {mode!r} is not auto or plain")
    if mode == "plain" or not sys.stderr.isatty():
        def plain(line: str) -> None:
            if not as_json:
                sys.stderr.write(line + "\n")

        yield plain
        return
    from rich.console import Console

    console = Console(stderr=True)
    start = time.monotonic()
    with console.status("starting build") as status:
        def sink(line: str) -> None:
            m = re.match(r"^#\d+ (\[[^\]]+\] .*)", line)
            if m:
                status.update(f"[{time.monotonic() - start:4.0f} s] {m.group(1)[:100]}")
        yield sink


@contextmanager
def _status(text: str, as_json: bool) -> Iterator[None]:
    """A spinner with the elapsed time on a terminal; nothing otherwise."""
    if as_json or not sys.stderr.isatty():
        yield
        return
    from rich.console import Console

    with Console(stderr=True).status(text):
        yield


def _context_parent(wheelhouse: Path | None) -> str | None:
    """Next to the wheelhouse when possible: the context hard-links the wheels, and a /tmp on
    another file system (often tmpfs) would mean copying gigabytes into memory."""
    import os

    if wheelhouse is not None and os.access(wheelhouse.resolve().parent, os.W_OK):
        return str(wheelhouse.resolve().parent)
    return None


def _secrets(ca_cert: Path | None, netrc: Path | None) -> Secrets:
    from envbuild.pipeline import Secrets, secret_file

    s = Secrets()
    for sid, path, flag in (("ca", ca_cert, "--ca-cert"), ("netrc", netrc, "--netrc")):
        if path is not None:
            s.files[sid] = secret_file(path, flag)
    return s


def _push(ref: str, registry: str) -> str:
    from envbuild import engine
    from envbuild.render import image_reference

    remote = image_reference(f"{registry.rstrip('/')}/{ref}", "--push")
    engine.tag(ref, remote)
    engine.push(remote)
    return remote


def _build_json(r: BuildResult) -> dict[str, Any]:
    return {"tag": r.tag, "image_id": r.image_id, "cached": r.cached,
            "seconds": round(r.seconds, 2), "log": str(r.log_path) if r.log_path else None,
            "builder": r.builder}


@app.command()
def build(
    context: Annotated[Path, typer.Argument(help="A directory made by `envbuild render`.")],
    tag: Tag = None, rebuild: Rebuild = False, progress: Progress = "auto", push: Push = None,
    ca_cert: o.CaCert = None, netrc: Netrc = None, json: o.Json = False,
) -> None:
    """Build a rendered context with BuildKit; tag only on success."""
    from envbuild.build import build as do_build

    secrets = _secrets(ca_cert, netrc)
    with _progress(progress, json) as sink:
        result = do_build(context, tag=tag, rebuild=rebuild, secrets=secrets, on_line=sink)
    pushed = _push(result.tag, push) if push else None
    if json:
        emit_json({**_build_json(result), "pushed": pushed})
        return
    if result.cached:
        say(f"{result.tag}: an image with this spec and context exists; skipped "
            "(--rebuild forces a build)")
    else:
        say(f"built {result.tag} in {result.seconds:.1f} s ({result.builder}); log: "
            f"{result.log_path}")
    if pushed:
        say(f"pushed {pushed}")


def _print_report(v: Validation) -> None:
    for c in v.report["checks"]:
        extra = c.get("reason") or c.get("remediation") or ""
        say(f"{c['status']:<5} {c['id']:<32} {c.get('title', '')}"
            + (f"  ({extra})" if extra and c["status"] != "pass" else ""))
    s = v.report["summary"]
    say(f"{s.get('pass', 0)} passed, {s.get('fail', 0)} failed, {s.get('warn', 0)} warned, "
        f"{s.get('skip', 0)} skipped")
    if v.note:
        warn(f"note: {v.note}")


@app.command()
def validate(
    image: Annotated[str | None, typer.Argument(help="Image to validate.")] = None,
    host: Annotated[bool, typer.Option("--host", help="Validate this host's Python.")] = False,
    spec: Annotated[Path | None, typer.Option("--spec", help="With --host: spec.json.")] = None,
    require_gpu: RequireGpu = False, timeout: Timeout = 600, json: o.Json = False,
) -> None:
    """Run the validator in a container (or with --host here). 0 pass, 1 a check failed, 3 could
    not run."""
    from envbuild.validate import validate_host, validate_image

    if host == (image is not None):
        raise UsageError("give an IMAGE or --host (one of them)")
    with _status(f"validating {image or 'this host'} (up to {timeout:.0f} s)", json):
        if image is not None:
            v = validate_image(image, require_gpu=require_gpu, timeout=timeout)
        else:
            v = validate_host(spec=spec, require_gpu=require_gpu, timeout=timeout)
    if json:
        emit_json(v.report)
    else:
        _print_report(v)
    if v.exit_code:
        raise typer.Exit(v.exit_code)


@app.command()
def make(
    target: o.Target = None, cuda: o.Cuda = None, rocm: o.Rocm = None, torch: o.Torch = None,
    python: o.Python = None, driver: o.Driver = None, gpu: o.Gpu = None, os: o.Os = None,
    flavor: o.Flavor = None, without: o.Without = None,
    pip: o.Pip = None, apt: o.Apt = None, conda: o.Conda = None, allow_url: o.AllowUrl = False,
    user: o.User = "envbuild", pip_index_url: o.PipIndex = None,
    pip_extra_index_url: o.PipExtraIndex = None, torch_index_url: o.TorchIndex = None,
    ca_cert: o.CaCert = None, wheelhouse: o.Wheelhouse = None, base_image: o.BaseImage = None,
    python_source: o.PythonSource = None,
    tag: Tag = None, rebuild: Rebuild = False, progress: Progress = "auto", push: Push = None,
    no_validate: Annotated[bool, typer.Option("--no-validate", help="Skip validation.")] = False,
    require_gpu: RequireGpu = False, timeout: Timeout = 600, json: o.Json = False,
    mps_out: Annotated[Path | None, typer.Option(
        "--out", help="--target mps only: where to write the native macOS environment.")] = None,
) -> None:
    """Resolve, render, build and validate in one go, with one summary at the end.

    --target mps writes the native macOS environment instead of an image."""
    from envbuild import engine
    from envbuild.build import build as do_build
    from envbuild.matrix import load
    from envbuild.pipeline import prepare
    from envbuild.render import write_tree
    from envbuild.validate import validate_image

    times: dict[str, float] = {}
    t0 = time.monotonic()
    req = o.make_request(target, cuda, rocm, torch, python, driver, gpu, os, flavor, without)
    ci = o.context_inputs(pip, apt, conda, allow_url, user, pip_index_url, pip_extra_index_url,
                          torch_index_url, ca_cert, wheelhouse, base_image, python_source)
    prepared = prepare(req, ci, load())
    spec = prepared.spec
    times["resolve+render"] = time.monotonic() - t0
    if spec.target == "mps":  # macOS GPUs are not reachable from containers: a native env
        out = mps_out or Path(f"envbuild-mps-{spec.hash}")
        write_tree(prepared.files, out)
        if json:
            emit_json({"spec": spec.to_json(), "out": str(out),
                       "next": f"{out}/setup-macos.sh"})
        else:
            say(f"spec      torch {spec.torch} (MPS), Python {spec.python}, macOS >= "
                f"{spec.min_macos}, hash {spec.hash}")
            say(f"rendered  {out} (no image: macOS GPUs cannot be reached from a container)")
            say(f"next      {out}/setup-macos.sh   (on the Mac: checks arm64, Rosetta and the "
                "macOS floor, creates the venv, runs the validator)")
        return
    with tempfile.TemporaryDirectory(prefix="envbuild-ctx-",
                                     dir=_context_parent(prepared.wheelhouse)) as tmp:
        ctx = Path(tmp) / "context"
        links = {"wheelhouse": prepared.wheelhouse} if prepared.wheelhouse else {}
        write_tree(prepared.files, ctx, links=links)
        t1 = time.monotonic()
        with _progress(progress, json) as sink:
            result = do_build(ctx, tag=tag, rebuild=rebuild, secrets=prepared.secrets,
                              on_line=sink)
        times["build"] = time.monotonic() - t1
    pushed = None
    if push:
        t2 = time.monotonic()
        pushed = _push(result.tag, push)
        times["push"] = time.monotonic() - t2
    validation = None
    if not no_validate:
        t3 = time.monotonic()
        with _status(f"validating {result.tag}", json):
            validation = validate_image(result.tag, require_gpu=require_gpu, timeout=timeout)
        times["validate"] = time.monotonic() - t3
    size = engine.image_size(result.tag)
    times["total"] = time.monotonic() - t0
    summary = {
        "spec": spec.to_json(), "image": {**_build_json(result), "size_bytes": size},
        "pushed": pushed, "seconds": {k: round(v, 2) for k, v in times.items()},
        "validation": validation.report if validation else None,
    }
    failed = bool(validation and validation.exit_code)
    if json:
        emit_json(summary)
    else:
        say(f"spec      torch {spec.torch} ({spec.variant}), Python {spec.python}, {spec.os}, "
            f"hash {spec.hash}")
        say(f"image     {result.tag}  {size / 1e6:.0f} MB"
            + ("  (cache hit: nothing changed)" if result.cached else ""))
        if not result.cached:
            say(f"builder   {result.builder}")
            say(f"log       {result.log_path}")
        if pushed:
            say(f"pushed    {pushed}")
        say("time      " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))
        if validation:
            _print_report(validation)
        else:
            say("validate  skipped (--no-validate)")
    if failed:
        raise typer.Exit(validation.exit_code if validation else EXIT_FAILED)
