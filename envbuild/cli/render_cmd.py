"""`envbuild render`: write the build context (Dockerfile, conda spec, pins, validator)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from envbuild.cli import _options as o
from envbuild.cli._app import app, emit_json, say
from envbuild.common.errors import UsageError


@app.command()
@o.request_options()
def render(
    out: Annotated[Path, typer.Option(
        "--out", help="Directory to write: new or empty (or a previous render, with --force).")],
    request: o.RequestMaker, cuda_redist_url: o.CudaRedist = None,
    pip: o.Pip = None, apt: o.Apt = None, conda: o.Conda = None, allow_url: o.AllowUrl = False,
    user: o.User = "envbuild", pip_index_url: o.PipIndex = None,
    pip_extra_index_url: o.PipExtraIndex = None, torch_index_url: o.TorchIndex = None,
    torch_index_kind: o.TorchIndexKind = None,
    ca_cert: o.CaCert = None, wheelhouse: o.Wheelhouse = None, base_image: o.BaseImage = None,
    build_base_image: o.BuildBaseImage = None, python_source: o.PythonSource = None,
    build_extension: o.BuildExtension = None,
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
    from envbuild.core import targets
    from envbuild.core.size import describe
    from envbuild.features.resolve_render import render as do_render
    from envbuild.features.resolve_render import render_all

    formats = set(fmt or ())
    if formats - {"apptainer"}:
        raise UsageError(f"--format {sorted(formats - {'apptainer'})[0]!r} is unknown",
                         "available: apptainer")
    req = request()
    ci = o.context_inputs(pip, apt, conda, allow_url, user, pip_index_url, pip_extra_index_url,
                          torch_index_url, ca_cert, wheelhouse, base_image, python_source,
                          apptainer="apptainer" in formats, torch_index_kind=torch_index_kind,
                          cuda_redist_url=cuda_redist_url, build_base_image=build_base_image,
                          build_extension=build_extension)
    if all_:
        names = render_all(out, req, ci, force=force)
        if json:
            emit_json({"out": str(out), "count": len(names), "directories": names})
        else:
            say(f"rendered {len(names)} environments into {out}")
        return
    r = do_render(out, req, ci, force=force, size=size)
    if json:
        emit_json(r.to_json(out))
        return
    spec = r.spec
    say(f"rendered {spec.target} torch {spec.torch} ({spec.variant}) Python {spec.python} "
        f"into {out} (spec {spec.hash})")
    for name in sorted(r.prepared.files):
        say(f"  {name}")
    for line in r.duplicates:
        say(f"note: {line}")
    if r.size is not None:
        say("estimated size:")
        say("\n".join(describe(r.size)))
    if not targets.get(spec.target).container:  # mps: a native macOS environment
        say(f"next, on the Mac: {out}/setup-macos.sh")
    else:
        say(f"next: envbuild build {out}")
