"""Helpers shared by the corp_mirror tests and others (moved out of test_corp_mirror.py)."""

from __future__ import annotations

import hashlib
import html
import ipaddress
import re
from pathlib import Path

from tests.support.docker_helpers import docker


def simple_index(wheelhouse: Path, root: Path) -> None:
    """A PEP 503 simple index of every wheel in `wheelhouse` under root/simple, the files
    under root/files (a symlink to the wheelhouse), each link with its #sha256=."""
    (root / "files").symlink_to(wheelhouse.resolve())
    projects: dict[str, list[Path]] = {}
    for whl in sorted(wheelhouse.glob("*.whl")):
        name = re.sub(r"[-_.]+", "-", whl.name.split("-", 1)[0]).lower()
        projects.setdefault(name, []).append(whl)
    (root / "simple").mkdir()
    links = "".join(f'<a href="{n}/">{n}</a>\n' for n in sorted(projects))
    (root / "simple" / "index.html").write_text(
        f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    for name, files in projects.items():
        (root / "simple" / name).mkdir()
        rows = ""
        for f in files:
            digest = hashlib.sha256(f.read_bytes()).hexdigest()
            href = html.escape(f"../../files/{f.name}#sha256={digest}", quote=True)
            rows += f'<a href="{href}">{html.escape(f.name)}</a>\n'
        (root / "simple" / name / "index.html").write_text(
            f"<!DOCTYPE html><html><body>\n{rows}</body></html>\n")


def _gateway() -> str:
    """The host's address on docker's default bridge (its gateway; dockerd 20.10 may record only
    the subnet, whose first host the bridge then takes)."""
    out = docker("network", "inspect", "bridge", "--format",
                 "{{range .IPAM.Config}}{{.Gateway}} {{.Subnet}}{{end}}").stdout.split()
    if out and re.fullmatch(r"[0-9.]+", out[0]):
        return out[0]
    nets = [ipaddress.ip_network(x) for x in out if "/" in x]
    assert nets and nets[0].version == 4, f"no IPv4 subnet on docker's bridge network: {out}"
    return str(next(nets[0].hosts()))

