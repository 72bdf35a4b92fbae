"""`envbuild build`, `validate` and `make` (resolve -> render -> build -> validate)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from envbuild.cli import _options as o
from envbuild.cli._app import app, emit_json, say, warn
from envbuild.common.buildkit import step_title
from envbuild.common.errors import EXIT_FAILED, UsageError
from envbuild.core.tags import DEFAULT_TAG_FORMAT

if TYPE_CHECKING:
    from envbuild.engine.validate import Validation
    from envbuild.features.make import Checked, Hooks, MakeResult

Tag = Annotated[str | None, typer.Option(
    "--tag", help="Image tag (default: {} tagged {}; the hex names the spec and every file of "
    "the build context, the variant is left out for cpu).".format(*DEFAULT_TAG_FORMAT.split(":")))]
Rebuild = Annotated[bool, typer.Option(
    "--rebuild", help="Build even if an image with the same spec and context exists.")]
Progress = Annotated[str, typer.Option(
    "--progress", help="auto (a live status line on a terminal) | plain (every log line).")]
Push = Annotated[str | None, typer.Option(
    "--push", help="Registry to push to after the build, e.g. 127.0.0.1:5000.")]
ExtWheels = Annotated[str | None, typer.Option(
    "--ext-wheels", help="A registry for compiled extension wheels "
    "(REGISTRY/envbuild-ext-wheels:KEY): taken into --wheelhouse instead of compiling when it "
    "has them, pushed there after a build that compiled them and passed validation. --push "
    "REGISTRY does both with the image's registry.")]
RequireGpu = Annotated[bool, typer.Option(
    "--require-gpu", help="Fail (not skip) the device checks when no GPU is visible.")]
Timeout = Annotated[float, o.seconds("Validation time limit, seconds.")]
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
        raise UsageError(f"--progress {mode[:40]!r} is not auto or plain",
                         "use --progress auto (live on a terminal) or --progress plain")
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
            title = step_title(line)
            if title:
                status.update(f"[{time.monotonic() - start:4.0f} s] {title[:100]}")
        yield sink


def _status_hook(show: bool) -> Callable[[str], AbstractContextManager[None]]:
    return lambda text: _status(text, not show)


def hooks(progress: str, show: bool) -> Hooks:
    """The CLI's progress display as make()'s hooks."""
    from envbuild.features.make import Hooks

    return Hooks(status=_status_hook(show), progress=lambda: _progress(progress, not show))


@contextmanager
def _status(text: str, as_json: bool) -> Iterator[None]:
    """A spinner with the elapsed time on a terminal; nothing otherwise."""
    if as_json or not sys.stderr.isatty():
        yield
        return
    from rich.console import Console

    with Console(stderr=True).status(text):
        yield


def _counts(v: Validation) -> str:
    return _summary_counts(v.report.get("summary", {}))


def _summary_counts(s: dict[str, int]) -> str:
    return (f"{s.get('pass', 0)} passed, {s.get('fail', 0)} failed, {s.get('warn', 0)} warned, "
            f"{s.get('skip', 0)} skipped" + (f", {s['not_run']} not run" if s.get("not_run")
                                              else ""))


def _gpu_line(v: Validation) -> None:
    from envbuild.features.make import gpu_line

    line = gpu_line(v.report)
    if line is not None:
        say(f"gpu         {line}")


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
    from envbuild.features.make import BuildRequest, build_context

    br = BuildRequest(context, tag=tag, rebuild=rebuild, push=push,
                      push_unvalidated=push_unvalidated, revalidate=revalidate, ca_cert=ca_cert,
                      netrc=netrc, proxy=proxy)
    built = build_context(br, hooks(progress, not (json or quiet)))
    result, shipped = built.build, built.shipped
    checked, pushed, held = shipped.checked, shipped.pushed, shipped.push_skipped
    if json:
        emit_json(built.to_json())
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
            _gpu_line(checked.validation)
        if pushed:
            say(f"pushed {pushed}" + (" (unvalidated: --push-unvalidated)"
                                      if push_unvalidated else " (validated)"))
    if held:
        if checked is not None:
            _say_failed_checks(checked.validation)
        warn(f"not pushed: {held} (only a validated image is pushed; --push-unvalidated "
             "pushes anyway)")
        raise typer.Exit(built.exit_code)


def _validation_line(c: Checked) -> str:
    if c.cached:
        local = c.created.astimezone().strftime("%Y-%m-%d %H:%M")
        return (f"cached pass ({local}, same image and host); {_counts(c.validation)}; "
                "--revalidate runs it again")
    return ("pass" if c.passed else "FAIL") + f"; {_counts(c.validation)}"


def _print_report(v: Validation) -> None:
    for c in v.report["checks"]:
        extra = c.get("reason") or c.get("remediation") or ""
        say(f"{c['status'].replace('_', ' '):<7} {c['id']:<27} {c.get('title', '')}"
            + (f"  ({extra})" if extra and c["status"] != "pass" else ""))
    say(_summary_counts(v.report["summary"]))
    _gpu_line(v)
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
    from_registry: Annotated[str | None, typer.Option(
        "--from-registry", help="Print the validation report attached to this image in its "
        "registry (REGISTRY/REPO:TAG or @sha256:...) without running anything.")] = None,
    junit: o.Junit = None,
) -> None:
    """Run the validator in a container (or with --host here). 0 pass, 1 a check failed, 3 could
    not run."""
    from envbuild.features import junit as ju
    from envbuild.features.make import attached_validation, validate_one

    junit = ju.check_path(junit, [spec] if spec else []) if junit is not None else None
    if from_registry is not None:
        if host or image is not None:
            raise UsageError("--from-registry takes the image itself: give no IMAGE or --host",
                             "e.g. envbuild validate --from-registry REGISTRY/REPO:TAG")
        with ju.report(junit, "envbuild validate", warn) as record:
            att, v = attached_validation(from_registry)
            record(ju.validation_suites(att.report, from_registry))
        if json:
            emit_json(att.report)
        elif quiet:
            _say_failed_checks(v)
        else:
            say(f"report    {att.artifact} (attached to {att.image}, found via {att.via})")
            _print_report(v)
        if v.exit_code:
            raise typer.Exit(EXIT_FAILED)
        return
    if host == (image is not None):
        raise UsageError("give an IMAGE or --host (one of them)",
                         "e.g. envbuild validate envbuild/cpu:TAG, or envbuild validate --host")
    with _status(f"validating {image or 'this host'} (up to {timeout:.0f} s)", json or quiet), \
            ju.report(junit, "envbuild validate", warn) as record:
        v = validate_one(image, spec=spec, require_gpu=require_gpu, timeout=timeout)
        record(ju.validation_suites(v.report, image or "host"))
    if json:
        emit_json(v.report)
    elif quiet:
        _say_failed_checks(v)
    else:
        _print_report(v)
    if v.exit_code:
        raise typer.Exit(v.exit_code)


@app.command()
@o.request_options()
def make(
    request: o.RequestMaker, cuda_redist_url: o.CudaRedist = None,
    pip: o.Pip = None, apt: o.Apt = None, conda: o.Conda = None, allow_url: o.AllowUrl = False,
    user: o.User = "envbuild", pip_index_url: o.PipIndex = None,
    pip_extra_index_url: o.PipExtraIndex = None, torch_index_url: o.TorchIndex = None,
    torch_index_kind: o.TorchIndexKind = None, proxy: o.Proxy = None,
    ca_cert: o.CaCert = None, wheelhouse: o.Wheelhouse = None, base_image: o.BaseImage = None,
    build_base_image: o.BuildBaseImage = None, python_source: o.PythonSource = None,
    build_extension: o.BuildExtension = None,
    tag: Tag = None, rebuild: Rebuild = False, progress: Progress = "auto", push: Push = None,
    push_unvalidated: PushUnvalidated = False, ext_wheels: ExtWheels = None,
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
    sbom: Annotated[Path | None, typer.Option(
        "--sbom", metavar="DIR", help="Write the image's SBOM (sbom.cdx.json, CycloneDX 1.6), "
        "build provenance (provenance.intoto.json, in-toto/SLSA v1) and validation report "
        "(validation.json) to DIR, made if missing; before any --push.")] = None,
) -> None:
    """Resolve, render, build and validate in one go, with one summary at the end.

    Without --target/--cuda/--rocm/--driver/--gpu it builds what `envbuild doctor` recommends for
    this host. A passing validation of the same image on the same host is reused
    (--revalidate runs it again). --push pushes only an image that passed validation.
    --target mps writes the native macOS environment instead of an image."""
    from envbuild.features.make import MakeRequest, check_push
    from envbuild.features.make import make as do_make

    check_push(push, not no_validate, push_unvalidated)
    if from_bundle is not None and sbom is not None:
        raise UsageError("--sbom is not made for an image built --from-bundle yet",
                         "build it with `envbuild make --sbom DIR` where the network is, or "
                         "drop --sbom")
    if from_bundle is not None:
        _make_from_bundle(from_bundle, tag=tag, require_gpu=require_gpu, timeout=timeout,
                          no_validate=no_validate, json=json, quiet=quiet, rebuild=rebuild)
        return
    req = request()
    ci = o.context_inputs(pip, apt, conda, allow_url, user, pip_index_url, pip_extra_index_url,
                          torch_index_url, ca_cert, wheelhouse, base_image, python_source,
                          torch_index_kind=torch_index_kind,
                          cuda_redist_url=cuda_redist_url, build_base_image=build_base_image,
                          build_extension=build_extension)
    mr = MakeRequest(req, ci, tag=tag, rebuild=rebuild, push=push, proxy=proxy,
                     push_unvalidated=push_unvalidated, validate=not no_validate,
                     revalidate=revalidate, require_gpu=require_gpu, timeout=timeout, out=out,
                     ext_wheels=ext_wheels, sbom=sbom)
    show = not (json or quiet)
    result = do_make(mr, hooks=hooks(progress, show))
    if json:
        emit_json(result.to_json())
    elif quiet:
        if result.failed and result.checked is not None:
            _say_failed_checks(result.checked.validation)
        say(result.pushed or (str(result.mps_dir) if result.mps_dir else
                              result.build.tag if result.build else ""))
    else:
        _say_make(result, out, push_unvalidated)
        _say_attested(result)
    if result.push_skipped:
        warn(f"not pushed: {result.push_skipped} (only a validated image is pushed; "
             "--push-unvalidated pushes anyway)")
    if result.failed and result.checked is not None:
        raise typer.Exit(result.checked.validation.exit_code or EXIT_FAILED)


def _say_emulated(r: MakeResult) -> None:
    """What ran emulated (qemu) and how long it took."""
    assert r.build is not None
    if r.build.emulated:
        say(f"emulated  the build, {r.build.seconds:.0f} s: {r.build.emulated}")
    note = r.checked.validation.note if r.checked is not None and not r.checked.cached else ""
    if "emulated: " in note:
        say(f"emulated  the check, {r.seconds.get('validate', 0):.0f} s: "
            + note.split("emulated: ", 1)[1])


def _say_make(r: MakeResult, out: Path | None, push_unvalidated: bool) -> None:
    spec = r.spec
    if r.target_reason:
        say(f"target    {spec.target}: {r.target_reason} (what `envbuild doctor` recommends "
            "here; --target chooses)")
    if r.mps_dir is not None:
        say(f"spec      torch {spec.torch} (MPS), Python {spec.python}, macOS >= "
            f"{spec.min_macos}, hash {spec.hash}")
        say(f"rendered  {r.mps_dir} (no image: macOS GPUs cannot be reached from a container)")
        say(f"next      {r.mps_dir}/setup-macos.sh   (on the Mac: checks arm64, Rosetta and "
            "the macOS floor, creates the venv, runs the validator)")
        return
    assert r.build is not None
    result = r.build
    say(f"spec      torch {spec.torch} ({spec.variant}), Python {spec.python}, {spec.os}, "
        f"hash {spec.hash}")
    say(f"image     {result.tag}  {r.size / 1e6:.0f} MB"
        + ("  (cache hit: nothing changed)" if result.cached else ""))
    if r.sized is not None and "error" in r.sized:
        say(f"size      {r.sized['error']}")
    elif r.sized is not None:
        est = r.sized["estimate"]
        say(f"size      estimated {est['total_bytes'] / 1e6:.0f} MB before the "
            f"build, real {r.size / 1e6:.0f} MB ({r.sized.get('error_pct', 0):+.1f}%)"
            + ("" if est["complete"] else "; estimate incomplete: "
               + ", ".join(est["unknown"]) + " unknown"))
    from envbuild.core import platforms

    if platforms.foreign(spec.platform):
        say(f"platform  {spec.platform}")
    if not result.cached:
        say(f"builder   {result.builder}")
        say(f"log       {result.log_path}")
    _say_emulated(r)
    if out is not None:
        say(f"context   {out} (kept)")
    say("time      " + ", ".join(f"{k} {v:.1f} s" for k, v in r.seconds.items()))
    if r.checked is None:
        say("validation  skipped (--no-validate)")
    elif r.checked.cached:
        say(f"validation  {_validation_line(r.checked)}")
        _gpu_line(r.checked.validation)
    else:
        _print_report(r.checked.validation)
    if r.pushed:
        say(f"pushed    {r.pushed}" + ("  (unvalidated: --push-unvalidated)"
                                     if push_unvalidated else "  (validation passed)"))


def _say_attested(r: MakeResult) -> None:
    """Where --sbom wrote the SBOM, the provenance and the validation report."""
    if r.attestation is not None:
        say(f"sbom      {r.attested['sbom']}  ({r.attestation.components} components)")
        say(f"provenance  {r.attested['provenance']}")
        if "validation" in r.attested:
            say(f"report    {r.attested['validation']}")


def _make_from_bundle(root: Path, *, tag: str | None, require_gpu: bool, timeout: float,
                      no_validate: bool, json: bool, quiet: bool, rebuild: bool) -> None:
    from envbuild.features.offline import make_from_bundle

    r = make_from_bundle(root, tag=tag, require_gpu=require_gpu, timeout=timeout,
                         no_validate=no_validate, rebuild=rebuild,
                         on_line=None if (json or quiet) else say)
    if json:
        emit_json(r.summary)
    elif not quiet:
        say(f"built {r.tag} from the bundle with no network"
            + ("" if no_validate else
               f"; validation {'passed' if r.exit_code == 0 else 'FAILED'}"))
    if r.exit_code:
        raise typer.Exit(r.exit_code)
