"""The `make` use case: resolve -> render -> build -> validate (-> attest) -> push (-> attach).

`envbuild make` and `envbuild team build` both run `make()`; the CLI only parses and prints.
Progress goes through hooks (a line sink for the build log, a status context for long waits), so
this module never prints. Heavy modules (jinja2, docker) load only when a stage runs.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild.common.errors import EXIT_FAILED, EnvbuildError, UsageError
from envbuild.common.record import record

if TYPE_CHECKING:
    from envbuild.core.base_facts import BaseFacts
    from envbuild.core.request import Request
    from envbuild.core.signing import Signer
    from envbuild.core.spec import Spec
    from envbuild.doctor.model import Recommendation
    from envbuild.engine.build import BuildResult
    from envbuild.engine.registry import Attached
    from envbuild.engine.validate import Validation
    from envbuild.features.attest import Attestation, BaseDigest
    from envbuild.matrix import Matrix
    from envbuild.render.pipeline import ContextInputs, Prepared, Secrets

StatusHook = Callable[[str], AbstractContextManager[None]]
ProgressHook = Callable[[], AbstractContextManager[Callable[[str], None]]]


def _no_status(_text: str) -> AbstractContextManager[None]:
    return nullcontext()


@contextmanager
def _no_progress() -> Iterator[Callable[[str], None]]:
    yield lambda _line: None


@record
class Hooks:
    """How the caller shows progress: a status (spinner) around waits, a sink for build lines."""

    status: StatusHook = _no_status
    progress: ProgressHook = _no_progress


@record
class MakeRequest:
    request: Request
    inputs: ContextInputs
    tag: str | None = None
    rebuild: bool = False
    push: str | None = None  # registry, e.g. 127.0.0.1:5000
    push_unvalidated: bool = False
    validate: bool = True
    revalidate: bool = False
    require_gpu: bool = False
    timeout: float = 600.0
    out: Path | None = None
    attach_report: bool = False  # push the validation report next to the image (team build)
    recommend: bool = True  # no hardware asked for: build what the doctor recommends
    proxy: str | None = None  # --proxy; None: HTTP(S)_PROXY / NO_PROXY from the environment
    estimate_size: bool = True  # the size estimate beside the real size (make's summary)
    push_requires_gpu: bool = False  # a team file's push_requires = "gpu"
    engine: str | None = None  # the Docker engine (a DOCKER_HOST address); None: the default
    cache_from: tuple[str, ...] = ()  # registry images whose layers the build may reuse
    ext_wheels: str | None = None  # a registry of compiled extension wheels: taken, pushed
    inline_cache: bool = False  # the image carries its build cache (for other engines)
    sbom: Path | None = None  # --sbom DIR: the SBOM, provenance and validation report go there
    signer: Signer | None = None  # with attach_report: sign the provenance and the image


@record
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


@record(frozen=False)
class MakeResult:
    spec: Spec
    target_reason: str = ""
    build: BuildResult | None = None
    mps_dir: Path | None = None
    context: Path | None = None
    checked: Checked | None = None
    pushed: str | None = None  # the remote reference
    digest: str | None = None  # its manifest digest in the registry
    report_ref: str | None = None  # the attached validation report, when attached
    push_skipped: str = ""  # why an image was not pushed ('' = pushed or no push asked)
    size: int = 0
    sized: dict[str, Any] | None = None  # the size estimate beside the real size
    seconds: dict[str, float] = field(default_factory=dict)
    compiled: dict[str, Any] | None = None  # the compiled extensions: key, where they came from
    attestation: Attestation | None = None  # the SBOM, provenance and report (with --sbom)
    attested: dict[str, Path] = field(default_factory=dict)  # the files written: kind -> path
    attached: dict[str, str] = field(default_factory=dict)  # pushed artifacts: kind -> reference
    base: BaseDigest | None = None  # the base image's digest, as the attestation names it

    @property
    def failed(self) -> bool:
        return bool(self.checked and not self.checked.passed)

    def to_json(self) -> dict[str, Any]:
        if self.mps_dir is not None:
            return {"spec": self.spec.to_json(), "out": str(self.mps_dir),
                    "next": f"{self.mps_dir}/setup-macos.sh",
                    "target_reason": self.target_reason or None}
        assert self.build is not None
        return {
            "spec": self.spec.to_json(), "target_reason": self.target_reason or None,
            "image": {**build_json(self.build), "size_bytes": self.size},
            "context": str(self.context) if self.context is not None else None,
            "pushed": self.pushed, "push_skipped": self.push_skipped or None,
            "seconds": {k: round(v, 2) for k, v in self.seconds.items()},
            "validation": self.checked.to_json() if self.checked else None,
            "size": self.sized,
            **({"compiled_extensions": self.compiled} if self.compiled else {}),
            **({"attestation": attestation_json(self)} if self.attestation else {}),
        }


def attestation_json(r: MakeResult) -> dict[str, Any]:
    """Where the attestation files went, and what they say in numbers."""
    a = r.attestation
    assert a is not None
    return {**{k: str(v) for k, v in r.attested.items()}, "components": a.components,
            "base_digest": r.base.digest if r.base else None}


def build_json(r: BuildResult) -> dict[str, Any]:
    return {"tag": r.tag, "image_id": r.image_id, "cached": r.cached,
            "seconds": round(r.seconds, 2), "log": str(r.log_path) if r.log_path else None,
            "builder": r.builder, "emulated": r.emulated or None}


def build_secrets(ca_cert: Path | None, netrc: Path | None) -> Secrets:
    """The BuildKit secrets of `envbuild build`: files checked to be readable, never copied."""
    from envbuild.render.pipeline import Secrets, secret_file

    s = Secrets()
    for sid, path, flag in (("ca", ca_cert, "--ca-cert"), ("netrc", netrc, "--netrc")):
        if path is not None:
            s.files[sid] = secret_file(path, flag)
    return s


def push(ref: str, registry: str) -> tuple[str, str]:
    """Tag ref under registry and push it: (the remote reference, its manifest digest)."""
    from envbuild.engine import docker
    from envbuild.render.context import image_reference

    remote = image_reference(f"{registry.rstrip('/')}/{ref}", "--push")
    had_tag = docker.image_id(remote) is not None
    docker.tag(ref, remote)
    try:
        digest = docker.push(remote)
    except BaseException:  # a failed or interrupted push leaves no tag of its own behind
        if not had_tag:
            docker.untag(remote)
        raise
    return remote, digest


def validate(ref: str, image_id: str, *, require_gpu: bool, timeout: float, revalidate: bool,
             status: StatusHook = _no_status) -> Checked:
    """Validate the image, or reuse a passing report for the same image, validator and host."""
    import platform

    from envbuild.engine import docker
    from envbuild.engine import validation_cache as vc
    from envbuild.engine.validate import Validation, validate_image

    validator = vc.validator_version()
    host = vc.host_fingerprint(vc.gpu_files(), platform.release(), docker.runtime_facts())
    options = {"require_gpu": str(require_gpu)}
    key = vc.cache_key(image_id, validator, host, options)
    parts = {"image": image_id, "validator": validator, "host": host, "options": options}
    if not revalidate:
        hit = vc.load(key)
        if hit is not None:
            return Checked(Validation(report=hit.report, exit_code=0,
                                      gpus_passed=hit.gpus_passed, note=hit.note),
                           True, hit.created)
    with status(f"validating {ref} (up to {timeout:.0f} s)"):
        v = validate_image(ref, require_gpu=require_gpu, timeout=timeout)
    now = datetime.now(UTC)
    vc.store(key, v.report, v.exit_code, v.note, v.gpus_passed, parts, now=now)
    return Checked(v, False, now)


def gate(push_to: str | None, checked: Checked | None, push_unvalidated: bool,
         requires_gpu: bool = False) -> str:
    """Why the image is not pushed ('' = push it): only a validated image leaves this host, and
    with requires_gpu only a GPU image validated on a GPU."""
    if not push_to or push_unvalidated:
        return ""
    if checked is None:
        return "not validated"
    if not checked.passed:
        return "validation failed"
    if requires_gpu:
        from envbuild.engine.validate import gpu_verdict

        verdict = gpu_verdict(checked.validation.report)
        if verdict is not None and not verdict["on_gpu"]:
            return ("checked without a GPU only (push_requires = \"gpu\"): validate it on a GPU "
                    "host first")
    return ""


@record
class Shipping:
    """What happens to a built image: validated (or a cached pass reused), then pushed only when
    gate() lets it through."""

    validate: bool = True
    push: str | None = None  # registry
    push_unvalidated: bool = False
    require_gpu: bool = False
    timeout: float = 600.0
    revalidate: bool = False
    push_requires_gpu: bool = False
    attach_report: bool = False  # with an attestation: its SBOM and provenance too
    signer: Signer | None = None


@record(frozen=False)
class Shipped:
    checked: Checked | None = None
    push_skipped: str = ""  # why the image was not pushed ('' = pushed or no push asked)
    pushed: str | None = None
    digest: str | None = None
    report_ref: str | None = None
    attestation: Attestation | None = None  # made after validation, before the push
    attached: dict[str, str] = field(default_factory=dict)  # kind -> the artifact's reference


# Makes the image's attestation from the validation outcome (None: not validated)
Attest = Callable[["Checked | None"], "Attestation"]


_VALIDATING: dict[str, threading.Lock] = {}
_VALIDATING_LOCK = threading.Lock()


def _validation_lock(engine: str) -> threading.Lock:
    with _VALIDATING_LOCK:
        return _VALIDATING.setdefault(engine, threading.Lock())


def ship(result: BuildResult, how: Shipping, status: StatusHook = _no_status,
         times: dict[str, float] | None = None, attest: Attest | None = None) -> Shipped:
    """Validate -> attest -> gate -> push (-> attach the report): the one composition after a
    build, for `envbuild make`, `envbuild build --push` and `envbuild team build`. `attest`
    makes the SBOM and provenance once the validation is known and before anything is pushed
    (Shipped.attestation: what the push may attach)."""
    from envbuild.common.proc import check_cancelled
    from envbuild.engine import docker

    times = {} if times is None else times
    out = Shipped()
    if how.validate:
        check_cancelled()  # a parallel team build interrupted: no step starts after it
        t0 = time.monotonic()
        # one validation at a time per engine: images built at once (team build --jobs) would
        # otherwise share its GPU, and each would measure a fraction of the GPU's peak
        with _validation_lock(docker.current_endpoint()):
            out.checked = validate(result.tag, result.image_id, require_gpu=how.require_gpu,
                                   timeout=how.timeout, revalidate=how.revalidate,
                                   status=status)
        times["validate"] = time.monotonic() - t0
    if attest is not None:
        check_cancelled()
        t2 = time.monotonic()
        with status(f"listing what {result.tag} holds (SBOM, provenance)"):
            out.attestation = attest(out.checked)
        times["attest"] = time.monotonic() - t2
    out.push_skipped = gate(how.push, out.checked, how.push_unvalidated, how.push_requires_gpu)
    if how.push and not out.push_skipped:
        check_cancelled()
        t1 = time.monotonic()
        with status(f"pushing {result.tag} to {how.push}"):
            out.pushed, out.digest = push(result.tag, how.push)
            check_cancelled()  # pushed as Ctrl-C came: no report, no lock entry follows
            if how.attach_report and out.digest and out.attestation is not None:
                from envbuild.features.attach import attach_all

                a = out.attestation
                out.attached = attach_all(
                    out.pushed, out.digest,
                    a.report_text.encode() if a.report_text is not None else None,
                    a.sbom_text.encode(), a.provenance, how.signer)
                out.report_ref = out.attached.get("report")
            elif how.attach_report and out.checked is not None and out.digest:
                from envbuild.engine import registry

                out.report_ref = registry.attach_report(out.pushed, out.digest,
                                                        out.checked.to_json())
        times["push"] = time.monotonic() - t1
    return out


@record
class BuildRequest:
    """`envbuild build`: a rendered context, built; with a push, validated first."""

    context: Path
    tag: str | None = None
    rebuild: bool = False
    push: str | None = None
    push_unvalidated: bool = False
    revalidate: bool = False
    ca_cert: Path | None = None
    netrc: Path | None = None
    proxy: str | None = None


@record(frozen=False)
class ContextBuild:
    build: BuildResult
    shipped: Shipped

    @property
    def exit_code(self) -> int:
        """1 (or the validation's own code) when a push was asked and held back."""
        if not self.shipped.push_skipped:
            return 0
        checked = self.shipped.checked
        return checked.validation.exit_code or EXIT_FAILED if checked else EXIT_FAILED

    def to_json(self) -> dict[str, Any]:
        s = self.shipped
        return {**build_json(self.build), "pushed": s.pushed,
                "push_skipped": s.push_skipped or None,
                "validation": s.checked.to_json() if s.checked else None}


def build_context(br: BuildRequest, hooks: Hooks | None = None) -> ContextBuild:
    """Build a rendered context with its secrets and proxies; with a push, validate (a cached
    pass reused) and push only an image that passed (or --push-unvalidated)."""
    from envbuild.common.proxy import build_proxy_env
    from envbuild.engine.build import build as do_build

    hooks = hooks or Hooks()
    secrets = build_secrets(br.ca_cert, br.netrc)
    proxies = build_proxy_env(os.environ, br.proxy)
    with hooks.progress() as sink:
        result = do_build(br.context, tag=br.tag, rebuild=br.rebuild, secrets=secrets,
                          on_line=sink, proxies=proxies)
    how = Shipping(validate=bool(br.push and not br.push_unvalidated), push=br.push,
                   push_unvalidated=br.push_unvalidated, revalidate=br.revalidate)
    return ContextBuild(result, ship(result, how, hooks.status))


def context_parent(wheelhouse: Path | None) -> str | None:
    """Next to the wheelhouse when possible: the context hard-links the wheels, and a /tmp on
    another file system (often tmpfs) would mean copying gigabytes into memory."""
    if wheelhouse is not None and os.access(wheelhouse.resolve().parent, os.W_OK):
        return str(wheelhouse.resolve().parent)
    return None


def context_dir(wheelhouse: Path | None) -> AbstractContextManager[Path]:
    """Where make writes a build context, removed after the build. With a wheelhouse, the same
    path for every build from it (`envbuild-ctx-<hash of the wheelhouse's path>`): BuildKit then
    sends only what changed since the last build from that path, not the whole wheelhouse
    again (common/stabledir.py). Otherwise, and while another build holds that path, a fresh
    temporary directory."""
    from envbuild.common.digest import sha256_hex
    from envbuild.common.stabledir import stable_dir

    parent = Path(context_parent(wheelhouse) or tempfile.gettempdir())
    if wheelhouse is None:
        return _temporary(parent)
    key = sha256_hex(str(wheelhouse.resolve()).encode())[:12]
    return stable_dir(parent, "envbuild-ctx-", key)


@contextmanager
def _temporary(parent: Path) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="envbuild-ctx-", dir=parent) as tmp:
        yield Path(tmp)


def recommended(req: Request, m: Matrix, status: StatusHook = _no_status) -> tuple[Request, str]:
    """What `envbuild doctor` recommends for this host, when make was not told the hardware."""
    from envbuild.doctor import probes
    from envbuild.doctor.model import Request as Ask
    from envbuild.doctor.recommend import recommend
    from envbuild.doctor.view import build_view

    with status("no --target: asking the doctor what this host runs"):
        facts = probes.collect()
    rec = recommend(build_view(facts, m), m, Ask())
    return apply_recommendation(req, rec), rec.reason


def size_beside(spec: Spec, m: Matrix, ci: ContextInputs, real: int,
                local_tag: bool = True) -> dict[str, Any]:
    """The size estimate (envbuild/core/size.py) next to the real size: one call, for make."""
    from envbuild.common.errors import EnvbuildError
    from envbuild.engine import docker
    from envbuild.engine.sizefetch import for_make

    base = ci.base_image or spec.base_image or ""
    try:
        on_disk: int | None = docker.image_size(base)
    except EnvbuildError:
        on_disk = None  # not pulled here: the registry manifest says
    wheelhouse = Path(ci.wheelhouse).resolve() if ci.wheelhouse else ci.wheelhouse
    try:
        return for_make(spec, m.extra.get("sizes", {}), real, base_image=base,
                        base_on_disk=on_disk, wheelhouse=wheelhouse,
                        torch_index=ci.torch_index_url, user_index=ci.pip_index_url, pip=ci.pip,
                        local_tag=local_tag)
    except (OSError, ValueError) as exc:  # an estimate is never worth failing a built image
        return {"error": f"no size estimate: {exc}", "real_bytes": real}


def inspect_base(ref: str, m: Matrix, status: StatusHook = _no_status) -> BaseFacts:
    """Read what a --base-image really is (OS, Python, glibc, users, NVIDIA settings) through
    the engine, once, before anything is rendered for it."""
    from envbuild.core import base_facts
    from envbuild.engine import docker
    from envbuild.render.context import image_reference

    image_reference(ref)  # refused (exit 2) before any engine call
    with status(f"reading the base image {ref}"):
        image_id, env, output = docker.probe_base(ref, base_facts.PROBE)
    return base_facts.parse(ref, image_id, output, env, m)


def check(mr: MakeRequest) -> None:
    """Refuse contradictory options before anything runs."""
    check_push(mr.push, mr.validate, mr.push_unvalidated)
    if mr.sbom is not None:
        from envbuild.features.attest import out_dir

        out_dir(mr.sbom, "--sbom")
    if mr.ext_wheels is not None:
        from envbuild.common.redact import shown
        from envbuild.render.context import image_reference

        try:
            image_reference(ext_wheels_ref(mr.ext_wheels, "0" * 16), "--ext-wheels")
        except UsageError:
            raise UsageError(f"--ext-wheels {shown(mr.ext_wheels)} is not a registry",
                             "e.g. 127.0.0.1:5000 or registry.example.com/team") from None
        if mr.inputs.wheelhouse is None:
            raise UsageError("--ext-wheels keeps the wheels it takes and makes in the "
                             "wheelhouse; none is given", "add --wheelhouse DIR (the team's "
                             "wheelhouse)")


def check_push(push: str | None, validate: bool, push_unvalidated: bool) -> None:
    if push and not validate and not push_unvalidated:
        raise UsageError("--push with --no-validate would push an image nobody validated",
                         "drop --no-validate (the image is pushed only if it passes), or add "
                         "--push-unvalidated")


def make(mr: MakeRequest, m: Matrix | None = None, hooks: Hooks | None = None) -> MakeResult:
    """Resolve, render, build, validate and push one image; the summary of what happened. Every
    engine call goes to mr.engine (None: the default one)."""
    from envbuild.engine import docker

    with docker.endpoint(mr.engine):
        return _make(mr, m, hooks)


def _make(mr: MakeRequest, m: Matrix | None = None, hooks: Hooks | None = None) -> MakeResult:
    from envbuild.common.proxy import build_proxy_env
    from envbuild.engine import docker
    from envbuild.engine.build import build as do_build
    from envbuild.matrix import load
    from envbuild.render.context import write_tree
    from envbuild.render.pipeline import prepare, wheelhouse_links

    check(mr)
    hooks = hooks or Hooks()
    m = m or load()
    times: dict[str, float] = {}
    t0 = time.monotonic()
    started = datetime.now(UTC)
    req = mr.request
    chosen = ""
    if mr.inputs.base_image and req.base is None and req.target != "mps":
        base = inspect_base(mr.inputs.base_image, m, hooks.status)
        req = dataclasses.replace(req, base=base)
        if base.nvidia and wants_recommendation(req):
            req = dataclasses.replace(req, target="cuda")
            chosen = (f"target cuda: --base-image {base.ref} is an nvidia/cuda base "
                      f"(NVIDIA_REQUIRE_CUDA=cuda>={base.require_cuda} in its environment)")
    if mr.recommend and wants_recommendation(req):
        req, chosen = recommended(req, m, hooks.status)
    prepared = prepare(req, mr.inputs, m)
    proxies = build_proxy_env(os.environ, mr.proxy)  # before any build: a bad proxy is exit 2
    compiled = compiled_plan(prepared)
    for registry in dict.fromkeys(r for r in (mr.ext_wheels, mr.push) if r):
        if compiled is None or compiled["prebuilt"] or not prepared.wheelhouse:
            break
        # a teammate compiled this key and pushed it: its wheels into the wheelhouse, no compile
        ref = ext_wheels_ref(registry, compiled["key"])
        with hooks.status(f"looking for the compiled extensions {ref}"):
            try:
                found = fetch_wheels(ref, prepared.wheelhouse / f"ext-{compiled['key']}")
            except (EnvbuildError, OSError) as exc:  # compiled here instead: said, not fatal
                compiled["not_fetched"] = f"{ref}: {_why(exc)}"
                continue
            if found:
                prepared = prepare(req, mr.inputs, m)
                compiled = {**(compiled_plan(prepared) or compiled), "from": ref}
    spec = prepared.spec
    times["resolve+render"] = time.monotonic() - t0
    from envbuild.core import targets

    if not targets.get(spec.target).container:  # e.g. mps: macOS GPUs are not reachable
        # from containers, a native environment instead of an image
        if mr.sbom is not None:
            raise UsageError(f"--sbom describes an image; target {spec.target} makes a native "
                             "environment, no image", "drop --sbom, or choose a container "
                             "target (--target cpu, --cuda, --rocm)")
        mps_dir = mr.out or Path(f"envbuild-mps-{spec.hash}")
        write_tree(prepared.files, mps_dir)
        return MakeResult(spec, chosen, mps_dir=mps_dir, seconds=times)
    links = wheelhouse_links(prepared.wheelhouse, prepared.files)
    with context_dir(prepared.wheelhouse) as tmp:
        ctx = mr.out if mr.out is not None else tmp / "context"
        write_tree(prepared.files, ctx, links=links)
        context_digest = ""
        if mr.sbom is not None:  # of the files BuildKit gets (the directory goes after the build)
            from envbuild.common.digest import tree_digest
            from envbuild.features.attest import CONTEXT_EXCLUDES

            context_digest = tree_digest(ctx, exclude=CONTEXT_EXCLUDES)
        t1 = time.monotonic()
        with hooks.progress() as sink:
            result = do_build(ctx, tag=mr.tag, rebuild=mr.rebuild, secrets=prepared.secrets,
                              on_line=sink, proxies=proxies, cache_from=mr.cache_from,
                              inline_cache=mr.inline_cache)
        times["build"] = time.monotonic() - t1
        wheels_image = None
        if compiled is not None and not compiled["prebuilt"]:
            t2 = time.monotonic()
            wheels_image = _keep_compiled(ctx, compiled, prepared, mr, proxies, hooks.status)
            times["compiled-wheels"] = time.monotonic() - t2
    out = MakeResult(spec, chosen, build=result, context=mr.out, compiled=compiled)

    def attest(checked: Checked | None) -> Attestation:
        """The SBOM, provenance and report, written to --sbom DIR before any push."""
        from envbuild.features.attest import attest as make_attestation
        from envbuild.features.attest import base_digest

        assert mr.sbom is not None
        out.base = base_digest(prepared.options.base_image or spec.base_image or "")
        a = make_attestation(result, spec, context_digest, out.base,
                             checked.to_json() if checked is not None else None,
                             options=prepared.options, wheelhouse=prepared.wheelhouse,
                             started=started, matrix_snapshot=m.snapshot)
        out.attested = a.write(mr.sbom)
        return a

    try:
        shipped = ship(result, Shipping(
            validate=mr.validate, push=mr.push, push_unvalidated=mr.push_unvalidated,
            require_gpu=mr.require_gpu, timeout=mr.timeout, revalidate=mr.revalidate,
            push_requires_gpu=mr.push_requires_gpu, attach_report=mr.attach_report,
            signer=mr.signer),
            hooks.status, times, attest if mr.sbom is not None else None)
        out.attestation = shipped.attestation
        out.checked, out.push_skipped = shipped.checked, shipped.push_skipped
        out.pushed, out.digest, out.report_ref = (shipped.pushed, shipped.digest,
                                                  shipped.report_ref)
        out.attached = shipped.attached
        # the compiled wheels go beside the image they were compiled for, never ahead of it;
        # to --ext-wheels alone, once the image passed its validation
        to = mr.ext_wheels or mr.push
        ready = bool(out.pushed) if mr.push else bool(out.checked and out.checked.passed)
        if wheels_image is not None and compiled is not None and to and not ready:
            compiled["not_pushed"] = ("the image was not pushed" if mr.push else
                                      "the image was not validated (only a validated image's "
                                      "wheels are pushed)")
        if wheels_image is not None and compiled is not None and to and ready:
            ref = ext_wheels_ref(to, compiled["key"])
            with hooks.status(f"pushing the compiled extensions {ref}"):
                docker.tag(wheels_image, ref)
                try:
                    compiled["pushed"] = f"{ref}@{docker.push(ref)}"
                finally:
                    docker.untag(ref)
    finally:  # pushed, held back, failed or interrupted: no dangling image of the wheels stays
        if wheels_image is not None:
            docker.untag(wheels_image)
    out.size = docker.image_size(result.tag)
    if mr.estimate_size:
        out.sized = size_beside(spec, m, mr.inputs, out.size,
                                local_tag=prepared.options.torch_local_tag)
    times["total"] = time.monotonic() - t0
    out.seconds = times
    return out


# -- compiled extensions: compiled once per key, kept in the wheelhouse and the registry ---------

EXT_WHEELS_REPO = "envbuild-ext-wheels"  # <registry>/envbuild-ext-wheels:<key>


def compiled_plan(prepared: Prepared) -> dict[str, Any] | None:
    """The key of the extensions the context compiles (ext-build.json), and whether the
    wheelhouse already holds their wheels (then no builder stage was rendered); None: none."""
    from envbuild.render.pipeline import compiled_extension

    got = compiled_extension(prepared.files)
    if got is None:
        return None
    key, prebuilt = got
    return {"key": key, "prebuilt": prebuilt,
            **({"wheelhouse": str(prepared.wheelhouse / f"ext-{key}")}
               if prepared.wheelhouse else {})}


def ext_wheels_ref(registry: str, key: str) -> str:
    return f"{registry.rstrip('/')}/{EXT_WHEELS_REPO}:{key}"


def fetch_wheels(ref: str, dest: Path) -> bool:
    """The wheels of a pushed ext-wheels image into dest (written beside it, renamed whole);
    False when the registry has none under that key."""
    import shutil
    import tempfile

    from envbuild.engine import docker

    if not docker.pull(ref):
        return False
    partial = None
    try:
        partial = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}-"))
        if docker.copy_wheels_out(ref, partial) == 0:
            return False
        try:
            partial.rename(dest)
        except OSError:
            if not dest.is_dir():  # else another build of the key fetched it first
                raise
        return True
    finally:
        if partial is not None:
            shutil.rmtree(partial, ignore_errors=True)
        docker.untag(ref)


def _keep_compiled(ctx: Path, compiled: dict[str, Any], prepared: Prepared, mr: MakeRequest,
                   proxies: dict[str, str], status: StatusHook) -> str | None:
    """After a build that compiled extensions: their wheels into the wheelhouse's ext-KEY (the
    next image of this key renders no builder stage), and with --push the ext-wheels image to
    push beside the image (its id). Both come from the build's cache: nothing compiles again."""
    from envbuild.engine.build import build_stage

    if prepared.wheelhouse is not None:
        dest = prepared.wheelhouse / f"ext-{compiled['key']}"
        try:
            if not dest.exists():
                with status(f"keeping the compiled extensions in {dest}"):
                    build_stage(ctx, "ext-wheels", dest=dest, secrets=prepared.secrets,
                                proxies=proxies)
            compiled["kept"] = str(dest)
        except (EnvbuildError, OSError) as exc:  # the image is built: said, not fatal
            compiled["not_kept"] = f"{dest}: {_why(exc)}"
    if mr.push or mr.ext_wheels:
        try:
            return build_stage(ctx, "ext-wheels", secrets=prepared.secrets, proxies=proxies)
        except EnvbuildError as exc:
            compiled["not_pushed"] = _why(exc)
    return None


def _why(exc: BaseException) -> str:
    from envbuild.common.redact import shown

    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}"
    return shown(str(getattr(exc, "message", exc)))


# -- `envbuild validate`: one image, this host, or the report a registry holds -----------------

def validate_one(image: str | None, *, spec: Path | None, require_gpu: bool,
                 timeout: float) -> Validation:
    """Run the validator in a container of `image`, or (image None) with this host's Python."""
    from envbuild.engine.validate import validate_host, validate_image

    if image is not None:
        return validate_image(image, require_gpu=require_gpu, timeout=timeout)
    return validate_host(spec=spec, require_gpu=require_gpu, timeout=timeout)


def attached_validation(ref: str) -> tuple[Attached, Validation]:
    """The validation report attached to `ref` in its registry, as a Validation (exit code 1
    when it failed); nothing runs."""
    from envbuild.common.errors import EnvbuildError
    from envbuild.engine import registry
    from envbuild.engine.validate import Validation

    att = registry.fetch_report(ref)
    if att is None:
        raise EnvbuildError(f"no validation report is attached to {ref}",
                            "`envbuild team build --push` attaches one to every image")
    summary = att.report.get("summary", {})
    failed = not isinstance(summary, dict) or bool(summary.get("fail"))
    return att, Validation(att.report, 1 if failed else 0, False, "")


def gpu_line(report: dict[str, Any]) -> str | None:
    """Where a GPU image was validated, in words; None for a CPU or MPS report."""
    from envbuild.engine.validate import describe_gpu_verdict, gpu_verdict

    verdict = gpu_verdict(report)
    return describe_gpu_verdict(verdict) if verdict is not None else None


def wants_recommendation(req: Request) -> bool:
    """No hardware asked for (no --target, --cuda, --rocm, --driver, --gpu, no variant as in
    --torch 2.5.1+cu121): `make` builds what `envbuild doctor` recommends for this host instead
    of the resolver's CUDA default."""
    from envbuild.core.request import split_torch

    variant = split_torch(req.torch)[1] if req.torch else None
    return not (req.target or req.cuda or req.rocm or req.driver or req.gpus or variant)


def apply_recommendation(req: Request, rec: Recommendation) -> Request:
    """The request with the doctor's hardware choice; the user's other options stay. With a
    --torch of the user's, the resolver picks the CUDA release from the driver and GPUs."""
    return dataclasses.replace(
        req, target=rec.target, rocm=rec.rocm or None, driver=rec.driver or None,
        gpus=tuple(rec.gpus), cuda=(rec.cuda or None) if not req.torch else None,
        torch=req.torch or rec.torch or None)
