"""`envbuild render`: write the build context (Dockerfile, conda spec, pins, validator)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from envbuild.cli import _options as o
from envbuild.cli._app import app, emit_json, say
from envbuild.common.errors import UsageError


@app.command()
def render(
    out: Annotated[Path, typer.Option(
        "--out", help="Directory to write: new or empty (or a previous render, with --force).")],
    target: o.Target = None, cuda: o.Cuda = None, rocm: o.Rocm = None, torch: o.Torch = None,
    python: o.Python = None, driver: o.Driver = None, gpu: o.Gpu = None, os: o.Os = None,
    flavor: o.Flavor = None, without: o.Without = None,
    forward_compat: o.ForwardCompat = False, cuda_redist_url: o.CudaRedist = None,
    pip: o.Pip = None, apt: o.Apt = None, conda: o.Conda = None, allow_url: o.AllowUrl = False,
    user: o.User = "envbuild", pip_index_url: o.PipIndex = None,
    pip_extra_index_url: o.PipExtraIndex = None, torch_index_url: o.TorchIndex = None,
    torch_index_kind: o.TorchIndexKind = None,
    ca_cert: o.CaCert = None, wheelhouse: o.Wheelhouse = None, base_image: o.BaseImage = None,
    python_source: o.PythonSource = None,
    fmt: Annotated[list[str] | None, typer.Option(
        "--format", help="Extra output format: apptainer. Repeatable.")] = None,
    all_: Annotated[bool, typer.Option(
        "--all", help="One directory per valid torch x variant x Python x OS combination.")]
    = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace a previous render in --out: only the files its "
        ".envbuild-manifest.json lists, unchanged since; other files are never touched.")]
    = False,
    json: o.Json = False, size: o.Size = False,
) -> None:
    """Render Dockerfile, environment.yml, pinned requirements, spec.json and the validator."""
    from envbuild.matrix import load
    from envbuild.render.context import write_tree
    from envbuild.render.pipeline import prepare, prepare_all

    formats = set(fmt or ())
    if formats - {"apptainer"}:
        raise UsageError(f"--format {sorted(formats - {'apptainer'})[0]!r} is unknown",
                         "available: apptainer")
    req = o.make_request(target, cuda, rocm, torch, python, driver, gpu, os, flavor, without,
                         forward_compat)
    ci = o.context_inputs(pip, apt, conda, allow_url, user, pip_index_url, pip_extra_index_url,
                          torch_index_url, ca_cert, wheelhouse, base_image, python_source,
                          apptainer="apptainer" in formats, torch_index_kind=torch_index_kind,
                          cuda_redist_url=cuda_redist_url)
    m = load()
    if all_:
        rendered = prepare_all(req, ci, m)
        if not rendered:
            raise UsageError("no valid combination matches these filters",
                             "loosen a filter (--torch, --python, --os, --target); "
                             "`envbuild matrix show torch` lists what exists")
        tree = {f"{name}/{rel}": f for name, p in rendered for rel, f in p.files.items()}
        write_tree(tree, out, force)
        if json:
            emit_json({"out": str(out), "count": len(rendered),
                       "directories": [name for name, _ in rendered]})
        else:
            say(f"rendered {len(rendered)} environments into {out}")
        return
    prepared = prepare(req, ci, m)
    links = {"wheelhouse": wheelhouse} if wheelhouse else {}
    write_tree(prepared.files, out, force, links)
    spec = prepared.spec
    from envbuild.core.size import describe, duplicates
    dup = duplicates(spec, m.extra.get("sizes", {}))
    est = None
    if size and spec.target != "mps":
        from envbuild.engine.sizefetch import gather
        est = gather(spec, m.extra.get("sizes", {}), base_image=ci.base_image,
                     wheelhouse=ci.wheelhouse, torch_index=ci.torch_index_url,
                     user_index=ci.pip_index_url, pip=ci.pip)
    if json:
        emit_json({"out": str(out), "spec_hash": spec.hash, "files": sorted(prepared.files),
                   "spec": spec.to_json(), "duplicates": dup,
                   **({"size": est.to_json()} if est else {})})
        return
    say(f"rendered {spec.target} torch {spec.torch} ({spec.variant}) Python {spec.python} "
        f"into {out} (spec {spec.hash})")
    for name in sorted(prepared.files):
        say(f"  {name}")
    for line in dup:
        say(f"note: {line}")
    if est is not None:
        say("estimated size:")
        say("\n".join(describe(est)))
    from envbuild.core import targets

    if not targets.get(spec.target).container:  # mps: a native macOS environment
        say(f"next, on the Mac: {out}/setup-macos.sh")
    else:
        say(f"next: envbuild build {out}")
