"""`envbuild build`, `validate` and `make` (resolve -> render -> build -> validate)."""

from __future__ import annotations

import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from os import environ as _environ  # `os` is also an option name here
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from envbuild.cli import _options as o
from envbuild.cli._app import app, emit_json, say, warn
from envbuild.errors import EXIT_FAILED, EnvbuildError, UsageError

if TYPE_CHECKING:
    from envbuild.build import BuildResult
    from envbuild.matrix import Matrix
    from envbuild.pipeline import ContextInputs, Secrets
    from envbuild.request import Request
    from envbuild.spec import Spec
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
PushUnvalidated = Annotated[bool, typer.Option(
    "--push-unvalidated", help="With --push: push without validating (or despite a failed "
    "validation). By default only an image that passed validation is pushed.")]
Revalidate = Annotated[bool, typer.Option(
    "--revalidate", help="Run validation even when a passing report for the same image, "
    "validator and host is cached.")]
Quiet = Annotated[bool, typer.Option(
    "--quiet", "-q", help="No progress and no report: print only the image reference (errors "
    "and failed checks still go to stderr).")]
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


@dataclass(frozen=True)
class Checked:
    """A validation outcome, run now or reused from the cache (created: when it ran)."""

    validation: Validation
    cached: bool
    created: datetime

    @property
    def passed(self) -> bool:
        return self.validation.exit_code == 0

    def to_json(self) -> dict[str, Any]:
        return {**self.validation.report, "cached": self.cached,
                "validated_at": self.created.isoformat(timespec="seconds")}


def _validate(ref: str, image_id: str, *, require_gpu: bool, timeout: float, revalidate: bool,
              show: bool) -> Checked:
    """Validate the image, or reuse a passing report for the same image, validator and host."""
    import platform

    from envbuild import engine
    from envbuild import validation_cache as vc
    from envbuild.validate import Validation, validate_image

    validator = vc.validator_version()
    host = vc.host_fingerprint(vc.gpu_files(), platform.release(), engine.runtime_facts())
    options = {"require_gpu": str(require_gpu)}
    key = vc.cache_key(image_id, validator, host, options)
    parts = {"image": image_id, "validator": validator, "host": host, "options": options}
    if not revalidate:
        hit = vc.load(key)
        if hit is not None:
            return Checked(Validation(report=hit.report, exit_code=0,
                                      gpus_passed=hit.gpus_passed, note=hit.note),
                           True, hit.created)
    with _status(f"validating {ref} (up to {timeout:.0f} s)", not show):
        v = validate_image(ref, require_gpu=require_gpu, timeout=timeout)
    now = datetime.now(UTC)
    vc.store(key, v.report, v.exit_code, v.note, v.gpus_passed, parts, now=now)
    return Checked(v, False, now)


def _counts(v: Validation) -> str:
    s = v.report.get("summary", {})
    return (f"{s.get('pass', 0)} passed, {s.get('fail', 0)} failed, {s.get('warn', 0)} warned, "
            f"{s.get('skip', 0)} skipped")


def _gate(push: str | None, checked: Checked | None, push_unvalidated: bool) -> str:
    """Why the image is not pushed ('' = push it): only a validated image leaves this host."""
    if not push or push_unvalidated:
        return ""
    if checked is None:
        return "not validated"
    return "" if checked.passed else "validation failed"


def _say_failed_checks(v: Validation) -> None:
    for c in v.report.get("checks", []):
        if c.get("status") == "fail":
            extra = c.get("reason") or c.get("remediation") or ""
            warn(f"fail  {c.get('id', '?')}  {c.get('title', '')}"
                 + (f"  ({extra})" if extra else ""))


@app.command()
def build(
    context: Annotated[Path, typer.Argument(help="A directory made by `envbuild render`.")],
    tag: Tag = None, rebuild: Rebuild = False, progress: Progress = "auto", push: Push = None,
    push_unvalidated: PushUnvalidated = False, revalidate: Revalidate = False,
    ca_cert: o.CaCert = None, netrc: Netrc = None, json: o.Json = False, quiet: Quiet = False,
    proxy: o.Proxy = None,
) -> None:
    """Build a rendered context with BuildKit; tag only on success. With --push, the image is
    validated first (or a cached pass reused) and pushed only if it passes."""
    from envbuild.build import build as do_build
    from envbuild.proxy import build_proxy_env

    secrets = _secrets(ca_cert, netrc)
    proxies = build_proxy_env(_environ, proxy)
    with _progress(progress, json or quiet) as sink:
        result = do_build(context, tag=tag, rebuild=rebuild, secrets=secrets, on_line=sink,
                          proxies=proxies)
    checked = None
    if push and not push_unvalidated:
        checked = _validate(result.tag, result.image_id, require_gpu=False, timeout=600,
                            revalidate=revalidate, show=not (json or quiet))
    held = _gate(push, checked, push_unvalidated)
    pushed = _push(result.tag, push) if push and not held else None
    if json:
        emit_json({**_build_json(result), "pushed": pushed,
                   "push_skipped": held or None,
                   "validation": checked.to_json() if checked else None})
    elif quiet:
        say(pushed or result.tag)
    else:
        if result.cached:
            say(f"{result.tag}: an image with this spec and context exists; skipped "
                "(--rebuild forces a build)")
        else:
            say(f"built {result.tag} in {result.seconds:.1f} s ({result.builder}); log: "
                f"{result.log_path}")
        if checked is not None:
            say(f"validation  {_validation_line(checked)}")
        if pushed:
            say(f"pushed {pushed}" + (" (unvalidated: --push-unvalidated)"
                                      if push_unvalidated else " (validated)"))
    if held:
        if checked is not None:
            _say_failed_checks(checked.validation)
        warn(f"not pushed: {held} (only a validated image is pushed; --push-unvalidated "
             "pushes anyway)")
        raise typer.Exit(checked.validation.exit_code or EXIT_FAILED if checked else EXIT_FAILED)


def _size_beside(spec: Spec, m: Matrix, ci: ContextInputs, real: int) -> dict[str, Any]:
    """The size estimate (envbuild/size.py) next to the real size: one call, for make."""
    from envbuild import engine
    from envbuild.sizefetch import for_make

    base = ci.base_image or spec.base_image or ""
    try:
        on_disk: int | None = engine.image_size(base)
    except EnvbuildError:
        on_disk = None  # not pulled here: the registry manifest says
    return for_make(spec, m.extra.get("sizes", {}), real, base_image=base, base_on_disk=on_disk,
                    wheelhouse=ci.wheelhouse, torch_index=ci.torch_index_url,
                    user_index=ci.pip_index_url, pip=ci.pip)


def _validation_line(c: Checked) -> str:
    if c.cached:
        local = c.created.astimezone().strftime("%Y-%m-%d %H:%M")
        return (f"cached pass ({local}, same image and host); {_counts(c.validation)}; "
                "--revalidate runs it again")
    return ("pass" if c.passed else "FAIL") + f"; {_counts(c.validation)}"


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
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="Print only failed checks (stderr); the exit code says the rest.")
    ] = False,
) -> None:
    """Run the validator in a container (or with --host here). 0 pass, 1 a check failed, 3 could
    not run."""
    from envbuild.validate import validate_host, validate_image

    if host == (image is not None):
        raise UsageError("give an IMAGE or --host (one of them)")
    with _status(f"validating {image or 'this host'} (up to {timeout:.0f} s)", json or quiet):
        if image is not None:
            v = validate_image(image, require_gpu=require_gpu, timeout=timeout)
        else:
            v = validate_host(spec=spec, require_gpu=require_gpu, timeout=timeout)
    if json:
        emit_json(v.report)
    elif quiet:
        _say_failed_checks(v)
    else:
        _print_report(v)
    if v.exit_code:
        raise typer.Exit(v.exit_code)


def _recommended(req: Request, m: Matrix, quiet: bool) -> tuple[Request, str]:
    """What `envbuild doctor` recommends for this host, when make was not told the hardware."""
    from envbuild.doctor import probes
    from envbuild.doctor.model import Request as Ask
    from envbuild.doctor.recommend import recommend
    from envbuild.doctor.view import build_view
    from envbuild.pipeline import apply_recommendation

    with _status("no --target: asking the doctor what this host runs", quiet):
        facts = probes.collect()
    rec = recommend(build_view(facts, m), m, Ask())
    return apply_recommendation(req, rec), rec.reason


@app.command()
def make(
    target: o.Target = None, cuda: o.Cuda = None, rocm: o.Rocm = None, torch: o.Torch = None,
    python: o.Python = None, driver: o.Driver = None, gpu: o.Gpu = None, os: o.Os = None,
    flavor: o.Flavor = None, without: o.Without = None,
    pip: o.Pip = None, apt: o.Apt = None, conda: o.Conda = None, allow_url: o.AllowUrl = False,
    user: o.User = "envbuild", pip_index_url: o.PipIndex = None,
    pip_extra_index_url: o.PipExtraIndex = None, torch_index_url: o.TorchIndex = None,
    torch_index_kind: o.TorchIndexKind = None, proxy: o.Proxy = None,
    ca_cert: o.CaCert = None, wheelhouse: o.Wheelhouse = None, base_image: o.BaseImage = None,
    python_source: o.PythonSource = None,
    tag: Tag = None, rebuild: Rebuild = False, progress: Progress = "auto", push: Push = None,
    push_unvalidated: PushUnvalidated = False,
    no_validate: Annotated[bool, typer.Option("--no-validate", help="Skip validation.")] = False,
    revalidate: Revalidate = False,
    require_gpu: RequireGpu = False, timeout: Timeout = 600, json: o.Json = False,
    quiet: Quiet = False,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Keep the rendered build context in DIR (a new or empty directory); with "
        "--target mps, where the native macOS environment goes.")] = None,
    from_bundle: Annotated[Path | None, typer.Option(
        "--from-bundle", help="Build and validate offline from `envbuild bundle` output: every "
        "RUN step with --network none, pip with hashes. Other build options are in the bundle.")]
    = None,
) -> None:
    """Resolve, render, build and validate in one go, with one summary at the end.

    Without --target/--cuda/--rocm/--driver/--gpu it builds what `envbuild doctor` recommends for
    this host. A passing validation of the same image on the same host is reused
    (--revalidate runs it again). --push pushes only an image that passed validation.
    --target mps writes the native macOS environment instead of an image."""
    from envbuild import engine
    from envbuild.build import build as do_build
    from envbuild.matrix import load
    from envbuild.pipeline import prepare, wants_recommendation
    from envbuild.proxy import build_proxy_env
    from envbuild.render import write_tree

    if push and no_validate and not push_unvalidated:
        raise UsageError("--push with --no-validate would push an image nobody validated",
                         "drop --no-validate (the image is pushed only if it passes), or add "
                         "--push-unvalidated")
    if from_bundle is not None:
        from envbuild.cli.bundle_cmd import make_from_bundle

        code = make_from_bundle(from_bundle, tag=tag, require_gpu=require_gpu, timeout=timeout,
                                no_validate=no_validate, json=json, quiet=quiet,
                                rebuild=rebuild)
        if code:
            raise typer.Exit(code)
        return
    show = not (json or quiet)
    times: dict[str, float] = {}
    t0 = time.monotonic()
    req = o.make_request(target, cuda, rocm, torch, python, driver, gpu, os, flavor, without)
    ci = o.context_inputs(pip, apt, conda, allow_url, user, pip_index_url, pip_extra_index_url,
                          torch_index_url, ca_cert, wheelhouse, base_image, python_source,
                          torch_index_kind=torch_index_kind)
    m = load()
    chosen = ""
    if wants_recommendation(req):
        req, chosen = _recommended(req, m, not show)
    prepared = prepare(req, ci, m)
    proxies = build_proxy_env(_environ, proxy)  # before any build: a bad proxy is exit 2
    spec = prepared.spec
    times["resolve+render"] = time.monotonic() - t0
    why = (f"{spec.target}: {chosen} (what `envbuild doctor` recommends here; "
           "--target chooses)") if chosen else ""
    if spec.target == "mps":  # macOS GPUs are not reachable from containers: a native env
        mps_dir = out or Path(f"envbuild-mps-{spec.hash}")
        write_tree(prepared.files, mps_dir)
        if json:
            emit_json({"spec": spec.to_json(), "out": str(mps_dir),
                       "next": f"{mps_dir}/setup-macos.sh", "target_reason": chosen or None})
        elif quiet:
            say(str(mps_dir))
        else:
            if why:
                say(f"target    {why}")
            say(f"spec      torch {spec.torch} (MPS), Python {spec.python}, macOS >= "
                f"{spec.min_macos}, hash {spec.hash}")
            say(f"rendered  {mps_dir} (no image: macOS GPUs cannot be reached from a container)")
            say(f"next      {mps_dir}/setup-macos.sh   (on the Mac: checks arm64, Rosetta and "
                "the macOS floor, creates the venv, runs the validator)")
        return
    links = {"wheelhouse": prepared.wheelhouse} if prepared.wheelhouse else {}
    with tempfile.TemporaryDirectory(prefix="envbuild-ctx-",
                                     dir=_context_parent(prepared.wheelhouse)) as tmp:
        ctx = out if out is not None else Path(tmp) / "context"
        write_tree(prepared.files, ctx, links=links)
        t1 = time.monotonic()
        with _progress(progress, not show) as sink:
            result = do_build(ctx, tag=tag, rebuild=rebuild, secrets=prepared.secrets,
                              on_line=sink, proxies=proxies)
        times["build"] = time.monotonic() - t1
    checked = None
    if not no_validate:
        t3 = time.monotonic()
        checked = _validate(result.tag, result.image_id, require_gpu=require_gpu,
                            timeout=timeout, revalidate=revalidate, show=show)
        times["validate"] = time.monotonic() - t3
    held = _gate(push, checked, push_unvalidated)
    pushed = None
    if push and not held:
        t2 = time.monotonic()
        pushed = _push(result.tag, push)
        times["push"] = time.monotonic() - t2
    size = engine.image_size(result.tag)
    sized = _size_beside(spec, m, ci, size)
    times["total"] = time.monotonic() - t0
    summary = {
        "spec": spec.to_json(), "target_reason": chosen or None,
        "image": {**_build_json(result), "size_bytes": size},
        "context": str(out) if out is not None else None,
        "pushed": pushed, "push_skipped": held or None,
        "seconds": {k: round(v, 2) for k, v in times.items()},
        "validation": checked.to_json() if checked else None,
        "size": sized,
    }
    failed = bool(checked and not checked.passed)
    if json:
        emit_json(summary)
    elif quiet:
        if failed and checked is not None:
            _say_failed_checks(checked.validation)
        say(pushed or result.tag)
    else:
        if why:
            say(f"target    {why}")
        say(f"spec      torch {spec.torch} ({spec.variant}), Python {spec.python}, {spec.os}, "
            f"hash {spec.hash}")
        say(f"image     {result.tag}  {size / 1e6:.0f} MB"
            + ("  (cache hit: nothing changed)" if result.cached else ""))
        say(f"size      estimated {sized['estimate']['total_bytes'] / 1e6:.0f} MB before the "
            f"build, real {size / 1e6:.0f} MB ({sized.get('error_pct', 0):+.1f}%)"
            + ("" if sized["estimate"]["complete"] else "; estimate incomplete: "
               + ", ".join(sized["estimate"]["unknown"]) + " unknown"))
        if not result.cached:
            say(f"builder   {result.builder}")
            say(f"log       {result.log_path}")
        if out is not None:
            say(f"context   {out} (kept)")
        say("time      " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))
        if checked is None:
            say("validation  skipped (--no-validate)")
        elif checked.cached:
            say(f"validation  {_validation_line(checked)}")
        else:
            _print_report(checked.validation)
        if pushed:
            say(f"pushed    {pushed}" + ("  (unvalidated: --push-unvalidated)"
                                         if push_unvalidated else "  (validation passed)"))
    if held:
        warn(f"not pushed: {held} (only a validated image is pushed; --push-unvalidated "
             "pushes anyway)")
    if failed and checked is not None:
        raise typer.Exit(checked.validation.exit_code or EXIT_FAILED)
