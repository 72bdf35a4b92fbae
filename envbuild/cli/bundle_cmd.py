"""`envbuild bundle`: what an air-gapped build needs, collected on a connected machine (the use
case: envbuild.features.offline)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from envbuild.cli import _options as o
from envbuild.cli._app import app, emit_json, say


@app.command()
@o.request_options(forward_compat=False)
def bundle(
    out: Annotated[Path, typer.Option(
        "--out", help="Directory to create (new, or empty) with everything the offline build "
        "needs.")],
    request: o.RequestMaker, pip: o.Pip = None, apt: o.Apt = None,
    allow_url: o.AllowUrl = False, user: o.User = "envbuild",
    pip_index_url: o.PipIndex = None, pip_extra_index_url: o.PipExtraIndex = None,
    torch_index_url: o.TorchIndex = None, torch_index_kind: o.TorchIndexKind = None,
    ca_cert: o.CaCert = None, wheelhouse: o.Wheelhouse = None,
    base_image: o.BaseImage = None, python_source: o.PythonSource = None,
    proxy: o.Proxy = None, json: o.Json = False,
) -> None:
    """Collect an offline build: the system image (base + OS packages) as an OCI image layout
    that `docker load` also takes, with its digests and the base image's; the wheelhouse (the
    torch stack downloaded from the torch index with every wheel it needs, or taken from
    --wheelhouse DIR; the --pip packages with everything they need, built as wheels for the
    image's Python) with sha256 hashes; the rendered context and the matrix snapshot. (--conda
    packages only go to environment.yml, not into the image: not taken.)"""
    from envbuild.features.bundle import torch_source_text
    from envbuild.features.offline import check_out, collect

    check_out(out)
    req = request()
    ci = o.context_inputs(pip, apt, None, allow_url, user, pip_index_url, pip_extra_index_url,
                          torch_index_url, ca_cert, wheelhouse, base_image, python_source,
                          torch_index_kind=torch_index_kind)
    got = collect(out, req, ci, proxy)
    if json:
        emit_json(got.to_json())
        return
    spec = got.spec
    say(f"bundle for torch {spec.torch} ({spec.variant}) Python {spec.python} in {out} "
        f"({got.size / 1e6:.0f} MB): system image {got.system_id[:19]}, "
        f"{len(got.torch_wheels)} torch wheels {torch_source_text(got.torch_source)}"
        + (f", {len(got.user_wheels)} wheels for --pip" if got.with_pip else ""))
    say(f"offline: envbuild make --from-bundle {out}")
