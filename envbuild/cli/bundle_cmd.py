"""`envbuild bundle`: what an air-gapped build needs, collected on a connected machine; and the
offline side of `envbuild make --from-bundle DIR`."""

from __future__ import annotations

import shutil
import tempfile
from os import environ as _environ  # `os` is also an option name here
from pathlib import Path
from typing import Annotated, Any

import typer

from envbuild.cli import _options as o
from envbuild.cli._app import app, emit_json, say
from envbuild.errors import UsageError


@app.command()
def bundle(
    out: Annotated[Path, typer.Option(
        "--out", help="Directory to create (new, or empty) with everything the offline build "
        "needs.")],
    target: o.Target = None, cuda: o.Cuda = None, rocm: o.Rocm = None, torch: o.Torch = None,
    python: o.Python = None, driver: o.Driver = None, gpu: o.Gpu = None, os: o.Os = None,
    flavor: o.Flavor = None, without: o.Without = None, apt: o.Apt = None,
    user: o.User = "envbuild", ca_cert: o.CaCert = None, wheelhouse: o.Wheelhouse = None,
    base_image: o.BaseImage = None, proxy: o.Proxy = None, json: o.Json = False,
) -> None:
    """Collect an offline build: the system image (base + OS packages) as a docker archive with
    its id, the wheelhouse with sha256 hashes, the rendered context and the matrix snapshot."""
    from envbuild import bundle as b
    from envbuild import engine
    from envbuild.build import build as do_build
    from envbuild.matrix import load
    from envbuild.pipeline import prepare
    from envbuild.proxy import build_proxy_env
    from envbuild.render import RenderedFile, write_tree
    from envbuild.resources import matrix_dir

    if wheelhouse is None:
        raise UsageError("bundle needs --wheelhouse DIR (torch and its dependencies as wheels)",
                         "fill it on this machine: pip download -d DIR torch==X.Y.Z ...")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {out}: exists and is not an empty directory",
                         "give a new directory")
    req = o.make_request(target, cuda, rocm, torch, python, driver, gpu, os, flavor, without)
    ci = o.context_inputs(None, apt, None, False, user, None, None, None, ca_cert, wheelhouse,
                          base_image, None)
    m = load()
    prepared = prepare(req, ci, m)
    spec = prepared.spec
    if spec.target == "mps" or spec.python_source != "os":
        raise UsageError("bundle builds container images whose Python comes from the OS "
                         "packages", "use --target cuda/rocm/cpu without --python-source "
                         "standalone")
    proxies = build_proxy_env(_environ, proxy)
    system_part, rest = b.split_dockerfile(str(prepared.files["Dockerfile"].content))
    system_ref = f"envbuild-bundle/system:{spec.hash}"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".envbuild-bundle-", dir=out.parent))
    try:
        # 1. the system image: base + OS packages + user, built here (needs the network)
        sys_ctx = tmp / "system-context"
        files = dict(prepared.files)
        files["Dockerfile"] = RenderedFile(system_part)
        write_tree(files, sys_ctx)
        result = do_build(sys_ctx, tag=system_ref, secrets=prepared.secrets, proxies=proxies)
        shutil.rmtree(sys_ctx)
        engine.save_image(system_ref, tmp / b.SYSTEM_ARCHIVE)
        # 2. the wheels with their hashes, and the offline context
        wheels = {w.name: b.sha256_file(w) for w in sorted(wheelhouse.glob("*.whl"))}
        files = dict(prepared.files)
        files["Dockerfile"] = RenderedFile(b.offline_dockerfile(rest, system_ref))
        files["requirements.txt"] = RenderedFile(b.hashed_requirements(wheels))
        write_tree(files, tmp / "context")
        copied = b.copy_wheels(wheelhouse, tmp / "context" / "wheelhouse")
        if copied != wheels:
            raise UsageError(f"--wheelhouse {wheelhouse} changed while it was copied",
                             "run bundle again")
        # 3. the matrix the spec was resolved with
        (tmp / "matrix").mkdir()
        for f in sorted(matrix_dir().glob("*.toml")):
            shutil.copyfile(f, tmp / "matrix" / f.name)
        b.write_meta(tmp, {"spec_hash": spec.hash, "spec": spec.to_json(),
                           "system_ref": system_ref, "system_id": result.image_id,
                           "base_image": base_image or spec.base_image})
        if out.exists():
            out.rmdir()
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    if json:
        emit_json({"out": str(out), "spec_hash": spec.hash, "system_ref": system_ref,
                   "system_id": result.image_id, "wheels": sorted(wheels), "bytes": size})
    else:
        say(f"bundle for torch {spec.torch} ({spec.variant}) Python {spec.python} in {out} "
            f"({size / 1e6:.0f} MB): system image {result.image_id[:19]}, {len(wheels)} wheels")
        say(f"offline: envbuild make --from-bundle {out}")


def make_from_bundle(root: Path, *, tag: str | None, require_gpu: bool, timeout: float,
                     no_validate: bool, json: bool, quiet: bool, rebuild: bool = False) -> int:
    """The offline build: check every file's sha256, load the system image if it is not here
    (its id must match), build with --network none, validate. Returns the exit code."""
    from envbuild import engine
    from envbuild.build import build as do_build
    from envbuild.bundle import SYSTEM_ARCHIVE, read_bundle
    from envbuild.validate import validate_image

    bnd = read_bundle(root)
    if engine.image_id(bnd.system_ref) != bnd.system_id:
        engine.load_image(root / SYSTEM_ARCHIVE)
        if engine.image_id(bnd.system_ref) != bnd.system_id:
            raise UsageError(f"--from-bundle {root}: the system image does not have its "
                             f"recorded id {bnd.system_id[:19]}", "copy the bundle again")
    result = do_build(root / "context", tag=tag, network="none", rebuild=rebuild,
                      on_line=None if (json or quiet) else say)
    summary: dict[str, Any] = {"bundle": str(root), "tag": result.tag,
                               "image_id": result.image_id, "cached": result.cached,
                               "network": "none", "validation": None,
                               "log": str(result.log_path) if result.log_path else None}
    code = 0
    if not no_validate:
        v = validate_image(result.tag, require_gpu=require_gpu, timeout=timeout)
        summary["validation"] = v.report
        code = v.exit_code
    if json:
        emit_json(summary)
    elif not quiet:
        say(f"built {result.tag} from the bundle with no network"
            + ("" if no_validate else f"; validation {'passed' if code == 0 else 'FAILED'}"))
    return code
