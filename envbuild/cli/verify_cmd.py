"""`envbuild verify IMAGE@DIGEST`: parsing and printing only (envbuild/features/attach.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from envbuild.cli import _options as o
from envbuild.cli._app import app, emit_json, say
from envbuild.common.echo import one_line

_MARK = {"pass": "ok  ", "fail": "FAIL", "warn": "warn", "skip": "skip"}


@app.command(help="Check what is attached to a pushed image: its validation report, SBOM and "
                  "provenance are there, about this digest, unchanged since the build (the "
                  "provenance records the other two), signed when --key is given, and the "
                  "SBOM's Python packages are the lock's. Exit 0 all good, 1 something does "
                  "not match (named), 2 bad input, 3 registry unreachable.")
def verify(
    image: Annotated[str, typer.Argument(
        metavar="IMAGE@DIGEST", help="The pushed image, e.g. host:5000/ml/cpu@sha256:<64 hex> "
        "(a tag is resolved to its digest first).")],
    key: Annotated[Path | None, typer.Option(
        "--key", metavar="PUBLIC.pem", help="The signer's PEM public key: the provenance and "
        "the image signature must verify with it.")] = None,
    lock: Annotated[Path | None, typer.Option(
        "--lock", metavar="FILE", help="The team's envbuild.lock (default ./envbuild.lock): "
        "the SBOM's Python packages must be the ones it locks for this digest.")] = None,
    json: o.Json = False,
) -> None:
    from envbuild.features.verify import verify as use

    v = use(image, key, lock)
    if json:
        emit_json(v.to_json())
    else:
        say(f"{v.image}@{v.digest} (attachments found through the {v.via})")
        for c in v.checks:
            where = f"[{c.platform}] " if c.platform else ""
            say(f"  {_MARK.get(c.status, c.status)} {where}{c.id:22} {one_line(c.message)}")
        s = v.to_json()["summary"]
        say(f"{'verified' if v.exit_code == 0 else 'NOT verified'}: {s['pass']} passed, "
            f"{s['fail']} failed, {s['warn']} warnings, {s['skip']} not checked")
    if v.exit_code:
        raise typer.Exit(v.exit_code)
