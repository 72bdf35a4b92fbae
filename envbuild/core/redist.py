"""NVIDIA's redistributable manifests (redistrib_<ver>.json): the forward-compatibility archive a
spec's image gets. Pure, except `from_mirror`, which reads a mirror's manifest through
envbuild.common.http."""

from __future__ import annotations

import re
from typing import Any

from envbuild.common.errors import ConflictError, EnvironmentProblem
from envbuild.common.record import record
from envbuild.core.refs import is_sha256
from envbuild.matrix import CompatPackage, Matrix

_PATH = re.compile(r"cuda_compat/[A-Za-z0-9_-]+/[A-Za-z0-9._-]+\.tar\.xz")


@record
class CompatArchive:
    url: str
    sha256: str
    size: int
    version: str  # the driver libraries' version
    cuda: str  # the CUDA minor they bring
    where: str  # where the checksum came from, for the trace and messages


def package(m: Matrix, version: str, arch: str = "linux-x86_64") -> CompatPackage:
    pkg = next((c for c in m.compat_packages if c.version == version and c.arch == arch), None)
    if pkg is None:
        raise ConflictError(f"no forward-compatibility package {version} for {arch} in the matrix",
                            "resolve again (matrix/cuda.toml [[compat_package]])")
    return pkg


def root(m: Matrix, mirror: str | None) -> str:
    base = mirror or str(m.meta.get("cuda", {}).get("forward_compat", {}).get("redist_root", ""))
    return base if base.endswith("/") else base + "/"


def from_matrix(m: Matrix, version: str, mirror: str | None = None) -> CompatArchive:
    pkg = package(m, version)
    return CompatArchive(root(m, mirror) + pkg.path, pkg.sha256, pkg.size, pkg.version, pkg.cuda,
                         f"redistrib_{pkg.redist}.json, recorded in matrix/cuda.toml")


def entry(manifest: Any, arch: str = "linux-x86_64") -> dict[str, Any]:
    """The cuda_compat entry of a redistrib JSON for one platform: {version, relative_path,
    sha256, size}. Both layouts NVIDIA used: platform -> entry, and (13.1.1 on) platform ->
    cuda variant ('cuda13.x') -> entry."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("cuda_compat"), dict):
        raise ValueError("no cuda_compat entry")
    comp = manifest["cuda_compat"]
    plat = comp.get(arch)
    if isinstance(plat, dict) and "relative_path" not in plat:
        plat = next((v for v in plat.values() if isinstance(v, dict)), None)
    if not isinstance(plat, dict):
        raise ValueError(f"cuda_compat has no {arch} archive")
    out = {"version": str(comp.get("version", "")), "relative_path": plat.get("relative_path"),
           "sha256": plat.get("sha256"), "size": plat.get("size")}
    if not (isinstance(out["relative_path"], str) and _PATH.fullmatch(out["relative_path"])
            and isinstance(out["sha256"], str) and is_sha256(out["sha256"])
            and str(out["size"]).isdigit()):
        raise ValueError("cuda_compat's relative_path, sha256 or size is malformed")
    out["size"] = int(str(out["size"]))
    return out


def from_mirror(m: Matrix, version: str, mirror: str) -> CompatArchive:
    """The archive where a mirror of NVIDIA's redist root has it (its redistrib_<ver>.json
    names the path). The mirror's version, sha256 and size must be NVIDIA's, as recorded in the
    matrix: a mirror relocates the archive, it never vouches for other bytes."""
    from envbuild.common.http import Http

    pkg = package(m, version)
    url = root(m, mirror) + f"redistrib_{pkg.redist}.json"
    reply = Http(timeout=20, retries=2,
                 status_hint="--cuda-redist-url must be a mirror of NVIDIA's redist root"
                 ).get(url, limit=4 << 20)
    try:
        e = entry(reply.json())
    except ValueError as exc:
        raise EnvironmentProblem(f"{url}: {exc}",
                                 "--cuda-redist-url must be a mirror of NVIDIA's redist root") \
            from None
    said = (e["version"], e["sha256"], e["size"])
    if said != (pkg.version, pkg.sha256, pkg.size):
        raise ConflictError(f"{url} lists cuda_compat {e['version'] or '?'} with sha256 "
                            f"{e['sha256'][:12]}... and {e['size']} bytes; NVIDIA's "
                            f"redistrib_{pkg.redist}.json (matrix/cuda.toml) says {pkg.version}, "
                            f"{pkg.sha256[:12]}..., {pkg.size} bytes",
                            "a mirror must hold NVIDIA's archive byte for byte; refresh it")
    return CompatArchive(root(m, mirror) + e["relative_path"], pkg.sha256, pkg.size,
                         pkg.version, pkg.cuda, f"{url}, equal to matrix/cuda.toml")
