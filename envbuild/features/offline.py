"""The two use cases of an offline build: `collect` (`envbuild bundle`, on a connected machine)
gathers what an air-gapped build needs; `make_from_bundle` (`envbuild make --from-bundle DIR`)
builds and validates from it with no network. The pure parts (Dockerfile surgery, wheel hashes,
the OCI archive) live in envbuild.features.bundle; nothing here prints."""

from __future__ import annotations

import dataclasses
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable
from os import environ, getgid, getuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild.common.errors import EnvbuildError, UsageError
from envbuild.common.record import record

if TYPE_CHECKING:
    from envbuild.core.request import Request
    from envbuild.core.spec import Spec
    from envbuild.features.bundle import CollectPlan, OciImage
    from envbuild.matrix import Matrix
    from envbuild.render.pipeline import ContextInputs, Prepared

COLLECT_TIMEOUT = 1800.0


def check_out(out: Path) -> None:
    """--out must be new or an empty directory (checked before anything else is looked at)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {out}: exists and is not an empty directory",
                         "give a new directory")


@record
class Collected:
    """What `collect` put into the bundle directory."""

    out: Path
    spec: Spec
    system_ref: str
    system_id: str
    system_oci: OciImage
    base: dict[str, Any] | None
    torch_wheels: dict[str, str]
    torch_source: dict[str, Any]
    user_wheels: dict[str, str]
    with_pip: bool  # --pip packages were collected
    size: int  # bytes in the bundle

    def to_json(self) -> dict[str, Any]:
        return {"out": str(self.out), "spec_hash": self.spec.hash, "system_ref": self.system_ref,
                "system_id": self.system_id, "system_oci": self.system_oci.to_json(),
                "base": self.base, "wheels": sorted(self.torch_wheels),
                "torch_source": self.torch_source, "user_wheels": sorted(self.user_wheels),
                "bytes": self.size}


def collect(out: Path, req: Request, ci: ContextInputs, proxy: str | None = None) -> Collected:
    """Collect an offline build into `out`: the system image (base + OS packages) as an OCI image
    layout, the wheelhouse (the torch stack from the torch index, or ci.wheelhouse; the --pip
    packages' closure) with sha256 hashes, the offline context and the matrix snapshot. All or
    nothing: `out` appears only when everything is in it."""
    from envbuild.common.proxy import build_proxy_env
    from envbuild.features import bundle as b
    from envbuild.matrix import load
    from envbuild.render.context import render
    from envbuild.render.pipeline import prepare

    check_out(out)
    m = load()
    prepared = prepare(req, ci, m)
    spec = prepared.spec
    if spec.target == "mps":
        raise UsageError("bundle builds container images; --target mps is a native macOS "
                         "environment", "use --target cuda/rocm/cpu")
    from envbuild.core import platforms

    if platforms.foreign(spec.platform):  # its torch stage runs on the build machine's pip
        raise UsageError(f"bundle does not collect {spec.platform} images yet: their torch stack "
                         "is installed by the build machine's own pip in a stage of its own",
                         "bundle a linux/amd64 image (--platform linux/amd64), or build the "
                         f"{spec.platform} image with `envbuild make --platform {spec.platform}` "
                         "where the indexes are reachable")
    if "ext-build.json" in prepared.files:  # its builder stage installs nvcc from PyPI
        raise UsageError("bundle does not collect --build-extension(s) images yet: their "
                         "builder stage downloads nvcc while it builds",
                         "build the extension's wheel once (`envbuild make --build-extension "
                         "...` where PyPI is reachable) and bundle with it as --pip or in "
                         "--wheelhouse")
    proxies = build_proxy_env(environ, proxy)
    torch_plan = None  # no --wheelhouse: the torch stack is downloaded as the build would
    if ci.wheelhouse is None:
        torch_plan = b.torch_plan(str(prepared.files["Dockerfile"].content))
        opts = b.with_wheelhouse(prepared.options)
        prepared = dataclasses.replace(prepared, options=opts, files=render(spec, opts, m))
    return _collect_into(out, prepared, ci, m, proxies, torch_plan)


def _collect_into(out: Path, prepared: Prepared, ci: ContextInputs, m: Matrix,
                  proxies: dict[str, str], torch_plan: CollectPlan | None) -> Collected:
    """Build, collect and write the bundle in a temporary sibling of `out`, then rename it."""
    from envbuild.common.boundedio import read_bytes
    from envbuild.common.resources import matrix_dir
    from envbuild.core.torch_index import index_kind
    from envbuild.engine import docker
    from envbuild.engine.build import build as do_build
    from envbuild.features import bundle as b
    from envbuild.render.context import RenderedFile, render, write_tree

    spec, wheelhouse = prepared.spec, ci.wheelhouse
    full = str(prepared.files["Dockerfile"].content)
    system_part, _ = b.split_dockerfile(full)
    plan = b.collect_plan(full)  # None: no --pip packages
    # The offline context: rendered without the build secrets (no CA, no index login: it has no
    # network to use them on); its pip installs are made offline by offline_dockerfile.
    offline = render(spec, b.offline_options(prepared.options), m)
    _, rest = b.split_dockerfile(str(offline["Dockerfile"].content))
    if wheelhouse is not None:
        torch_wheels = b.wheels_in(wheelhouse, "--wheelhouse", strict=False)
        source: dict[str, Any] = {"from": "wheelhouse", "wheelhouse": str(wheelhouse)}
    else:
        assert torch_plan is not None
        args = torch_plan.pip_args
        kind, _ = index_kind(ci.torch_index_url, m, ci.torch_index_kind)
        source = {"from": "index", "index_url": args[args.index("--index-url") + 1],
                  "index_kind": kind}
    # Tagged by what goes into it (the system part and its files: OS packages, user, CA mount),
    # not only the spec: two bundles of one spec with other --apt or --user never share a tag.
    files = b.system_files(dict(prepared.files), system_part)
    files["Dockerfile"] = RenderedFile(system_part)
    system_ref = f"envbuild-bundle/system:{spec.hash}-{b.files_hash(files)}"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".envbuild-bundle-", dir=out.parent))
    work = Path(tempfile.mkdtemp(prefix="envbuild-bundle-collect-"))  # 0700, never in --out
    try:
        # 1. the system image: base + OS packages + user, built here (needs the network)
        sys_ctx = tmp / "system-context"
        write_tree(files, sys_ctx)
        result = do_build(sys_ctx, tag=system_ref, secrets=prepared.secrets, proxies=proxies)
        shutil.rmtree(sys_ctx)
        # 2. the torch stack as wheels (unless --wheelhouse gave them), then the --pip
        #    packages' closure, both for the system image's Python and platform
        torch_dir = wheelhouse
        if torch_plan is not None:
            torch_wheels = run_collect(torch_plan, system_ref, prepared, proxies, None,
                                       work / "torch")
            torch_dir = work / "torch" / "out"
        assert torch_dir is not None
        user_wheels: dict[str, str] = {}
        if plan is not None:
            user_wheels = run_collect(plan, system_ref, prepared, proxies, torch_dir,
                                      work / "user")
        new_wheels = b.merge_wheels(torch_wheels, user_wheels)
        # the system image as an OCI image layout that `docker load` still takes
        saved = tmp / ".docker-save.tar"
        docker.save_image(system_ref, saved)
        oci = b.to_oci_archive(saved, tmp / b.SYSTEM_ARCHIVE, system_ref)
        saved.unlink()
        if oci.config != result.image_id:
            raise EnvbuildError(f"docker save {system_ref} wrote image {oci.config[:19]}, not the "
                                f"one just built ({result.image_id[:19]})",
                                "the tag moved while bundle ran: run bundle again")
        base_ref = ci.base_image or spec.base_image
        base = b.base_digest(base_ref, docker.local_image(base_ref)) if base_ref else None
        # 3. the offline context: every wheel pinned with its hash
        files = dict(offline)
        files["Dockerfile"] = RenderedFile(b.offline_dockerfile(rest, system_ref))
        files["requirements.txt"] = RenderedFile(b.hashed_requirements(
            torch_wheels, "the torch stack: every wheel of "
            + ("--wheelhouse" if wheelhouse else f"{source['index_url']} it needs")))
        if plan is not None:
            files["user-requirements.txt"] = RenderedFile(b.hashed_requirements(
                user_wheels, "the --pip packages and all they need, as wheels"))
        write_tree(files, tmp / "context")
        b.copy_wheels(torch_dir, tmp / "context" / "wheelhouse", torch_wheels)
        b.copy_wheels(work / "user" / "out", tmp / "context" / "wheelhouse", new_wheels)
        # 4. the matrix the spec was resolved with
        (tmp / "matrix").mkdir()
        for f in sorted(matrix_dir().glob("*.toml")):  # bounded: no FIFO or device copied
            (tmp / "matrix" / f.name).write_bytes(read_bytes(f, "matrix file"))
        b.write_meta(tmp, {"spec_hash": spec.hash, "spec": spec.to_json(),
                           "system_ref": system_ref, "system_id": result.image_id,
                           "base_image": base_ref, "base": base, "system_oci": oci.to_json(),
                           "pip": list(prepared.options.pip), "torch_wheels": torch_wheels,
                           "torch_source": source,
                           "user_wheels": user_wheels})
        if out.exists():
            out.rmdir()
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    return Collected(out, spec, system_ref, result.image_id, oci, base, torch_wheels, source,
                     user_wheels, plan is not None, size)


def run_collect(plan: CollectPlan, image: str, prepared: Prepared, proxies: dict[str, str],
                wheelhouse: Path | None, work: Path) -> dict[str, str]:
    """Run the plan (`pip wheel` of the user requirements under the build's constraints, or
    `pip download` of the torch pins) in a container of the system image (its Python, its
    platform), with the layer's index options, proxies, CA bundle and index login (mounted files,
    read-only) and `wheelhouse` (if any) where the rendered --find-links expects it; returns file
    name -> sha256 of the wheels it wrote to work/out. A failure is exit 1 with pip's reason; the
    full output goes to a log."""
    from envbuild.common.redact import redact
    from envbuild.engine import docker
    from envbuild.engine.build import default_log_dir, open_log
    from envbuild.features import bundle as b
    from envbuild.render.context import WHEELHOUSE_MOUNT

    spec_hash = prepared.spec.hash
    inputs, home, wheels = work / "in", work / "home", work / "out"
    work.mkdir(mode=0o700, parents=True, exist_ok=True)
    for d in (inputs, home, wheels):
        d.mkdir(mode=0o700)
    for name in plan.inputs:
        (inputs / name).write_text(str(prepared.files[name].content))
    secret_files = {".netrc": prepared.secrets.contents.get("netrc", ""),
                    "proxy.env": b.proxy_env_file(proxies) if proxies else ""}
    for name, content in secret_files.items():
        if content:
            (home / name).touch(mode=0o600)
            (home / name).write_text(content)
    mounts = {b.COLLECT_IN: (inputs, False), b.COLLECT_HOME: (home, False),
              b.COLLECT_OUT: (wheels, True)}
    if wheelhouse is not None:
        mounts[WHEELHOUSE_MOUNT] = (wheelhouse.resolve(), False)
    env = {"HOME": b.COLLECT_HOME, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    ca = prepared.secrets.files.get("ca")
    if ca is not None:
        mounts[b.COLLECT_CA] = (ca, False)
        env["PIP_CERT"] = b.COLLECT_CA
    run = docker.run_with_mounts(
        image, plan.command(), mounts=mounts, user=f"{getuid()}:{getgid()}",
        labels={docker.LABEL_ROLE: "bundle-collect", docker.LABEL_SPEC_HASH: spec_hash},
        environment=env, timeout=COLLECT_TIMEOUT)
    output = redact(prepared.secrets.redact(run.output))
    log_path, log = open_log(default_log_dir(),
                             f"bundle-collect-{plan.layer}-{spec_hash}-"
                             f"{time.strftime('%Y%m%d-%H%M%S')}")
    with log:
        log.write(f"# {shlex.join(plan.command())}\n{output}")
    hint = b.collect_hint(output, plan.layer)
    lines = [ln for ln in output.splitlines() if ln.strip()]
    tail = [*lines[-15:], f"full log: {log_path}"]
    if run.timed_out:
        raise EnvbuildError(f"collecting {plan.what} as wheels took over "
                            f"{COLLECT_TIMEOUT:.0f} s and was stopped", hint, tail)
    if run.exit_code != 0:
        raise EnvbuildError(f"collecting {plan.what} as wheels failed: "
                            f"{b.collect_failure(output)}", hint, tail)
    return b.wheels_in(wheels, f"pip {plan.command()[4]}", strict=True)


@record
class FromBundle:
    """The outcome of an offline build: `summary` is its JSON, `exit_code` the validation's."""

    tag: str
    validated: bool
    exit_code: int
    summary: dict[str, Any]


def make_from_bundle(root: Path, *, tag: str | None, require_gpu: bool, timeout: float,
                     no_validate: bool, rebuild: bool = False,
                     on_line: Callable[[str], None] | None = None) -> FromBundle:
    """The offline build: check every file's sha256, load the system image if it is not here
    (its id must match), build with --network none, validate (unless no_validate)."""
    from envbuild.engine import docker
    from envbuild.engine.build import build as do_build
    from envbuild.engine.validate import validate_image
    from envbuild.features.bundle import SYSTEM_ARCHIVE, read_bundle

    bnd = read_bundle(root)
    if docker.image_id(bnd.system_ref) != bnd.system_id:
        docker.load_image(root / SYSTEM_ARCHIVE)
        if docker.image_id(bnd.system_ref) != bnd.system_id:
            raise UsageError(f"--from-bundle {root}: the system image does not have its "
                             f"recorded id {bnd.system_id[:19]}", "copy the bundle again")
    result = do_build(root / "context", tag=tag, network="none", rebuild=rebuild,
                      on_line=on_line)
    summary: dict[str, Any] = {"bundle": str(root), "tag": result.tag,
                               "image_id": result.image_id, "cached": result.cached,
                               "network": "none", "validation": None,
                               "log": str(result.log_path) if result.log_path else None}
    code = 0
    if not no_validate:
        v = validate_image(result.tag, require_gpu=require_gpu, timeout=timeout)
        summary["validation"] = v.report
        code = v.exit_code
    return FromBundle(result.tag, not no_validate, code, summary)
