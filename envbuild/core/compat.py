"""Compatibility rules the core owns, shared by the doctor, `explain` and the engine (pure).

Every version fact comes from the Matrix: CUDA release GA drivers, minor-version compatibility
floors, torch variants with their sass/ptx/gfx lists, MPS macOS floors, GPU names. Host facts that
are not versions (BuildKit client thresholds, /dev nodes a CUDA process opens, shm sizes) come from
the [doctor] table of matrix/signatures.toml as `HostRules`, loaded once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from envbuild.common.errors import MatrixError
from envbuild.common.record import record
from envbuild.common.versions import major_of, version_key
from envbuild.matrix import Matrix, TorchRelease, Variant
from envbuild.validator import rules


def at_least(version: str, floor: str) -> bool:
    """version >= floor for dotted numbers; an empty or non-numeric floor is never met."""
    if not version or not floor or not re.match(r"\d", floor):
        return False
    return version_key(version) >= version_key(floor)


def ga_driver(m: Matrix, cuda: str, windows: bool = False) -> str:
    """The driver CUDA minor `cuda` shipped with: the oldest that runs it natively ('' when
    unknown)."""
    rel = m.cuda_release(cuda) or m.cuda_history_row(cuda)  # history: CUDA of old torch builds
    if rel is None:
        return ""
    return rel.ga_driver_windows if windows else rel.ga_driver_linux


def mvc_floor(m: Matrix, major: int, windows: bool = False) -> str:
    """The minor-version-compatibility driver floor of a CUDA major ('' when unknown)."""
    c = m.compat_floor(major)
    if c is None:
        return ""
    return c.min_driver_windows if windows else c.min_driver_linux


def cuda_for_driver(m: Matrix, driver: str, windows: bool = False) -> str:
    """The newest CUDA minor this driver supports natively ('' if older than every row)."""
    best = ""
    for rel in m.cuda:
        if at_least(driver, ga_driver(m, rel.version, windows)):
            best = rel.version
    return best


def how_runs(m: Matrix, driver: str, cuda: str, windows: bool = False) -> str:
    """'native', 'mvc' (minor-version compatibility) or '' (this driver cannot run CUDA cuda)."""
    if at_least(driver, ga_driver(m, cuda, windows)):
        return "native"
    if at_least(driver, mvc_floor(m, major_of(cuda), windows)):
        return "mvc"
    return ""


def arch_covers(sass: Iterable[str], ptx: Iterable[str], cc: str) -> str | None:
    """Which arch of a wheel (matrix form: sass/ptx compute capabilities) runs on compute
    capability `cc`, or None (the one rule, shared with the validator: rules.arch_covers)."""
    via: str | None = rules.arch_covers(rules.arch_names(tuple(sass), tuple(ptx)), cc)["via"]
    return via


def covers(variant: Variant, cc: str) -> bool:
    """A CUDA wheel runs on compute capability cc (the resolver's rule: cubin or PTX JIT)."""
    return arch_covers(variant.sass, variant.ptx, cc) is not None


def covers_all(variant: Variant, ccs: Iterable[str]) -> bool:
    return all(covers(variant, cc) for cc in ccs)


def newest_torch(m: Matrix) -> TorchRelease | None:
    return m.torch[-1] if m.torch else None


def variant(m: Matrix, release: str, tag: str) -> Variant | None:
    return next((v for v in m.variants_of(release) if v.tag == tag), None)


def covering(m: Matrix, cc: str, native: bool = False) -> list[Variant]:
    """The CUDA wheels (torch release and variant) that run on compute capability cc, oldest
    release first; `native`: only those with its kernels compiled in (no PTX JIT)."""
    return [v for rel in m.torch for v in m.variants_of(rel.version)
            if v.kind == "cuda" and covers(v, cc)
            and (not native or arch_covers(v.sass, (), cc) is not None)]


def newest_release_with(m: Matrix, tag: str, ccs: Iterable[str] = ()) -> TorchRelease | None:
    """The newest torch release that has variant `tag` (covering every cc given)."""
    need = tuple(ccs)
    for rel in reversed(m.torch):
        v = variant(m, rel.version, tag)
        if v is not None and covers_all(v, need):
            return rel
    return None


def wheel_cudas(m: Matrix) -> list[str]:
    """CUDA minors that some torch release has wheels for, oldest first."""
    return sorted({v.version for v in m.variants if v.kind == "cuda" and v.version},
                  key=version_key)


@record
class CudaChoice:
    cuda: str
    torch: str
    how: str  # native | mvc

    @property
    def tag(self) -> str:
        return rules.cuda_tag(self.cuda)


def choose_cuda(m: Matrix, driver: str, ccs: Iterable[str], windows: bool = False,
                only: str = "") -> CudaChoice | None:
    """The newest CUDA minor with torch wheels covering every cc that this driver runs:
    natively first, else through minor-version compatibility."""
    need = tuple(ccs)
    for how in ("native", "mvc"):
        for cuda in reversed(wheel_cudas(m)):
            if only and cuda != only:
                continue
            if how_runs(m, driver, cuda, windows) != how:
                continue
            rel = newest_release_with(m, rules.cuda_tag(cuda), need)
            if rel is not None:
                return CudaChoice(cuda, rel.version, how)
    return None


def newest_torch_choice(m: Matrix, driver: str, ccs: Iterable[str],
                        windows: bool = False) -> CudaChoice | None:
    """The newest torch release with any CUDA wheel covering every cc that runs natively."""
    need = tuple(ccs)
    for rel in reversed(m.torch):
        cudas = sorted((v.version for v in m.variants_of(rel.version)
                        if v.kind == "cuda" and covers_all(v, need)
                        and how_runs(m, driver, v.version, windows) == "native"),
                       key=version_key)
        if cudas:
            return CudaChoice(cudas[-1], rel.version, "native")
    return None


def covering_tags(m: Matrix, release: str, cc: str) -> list[str]:
    return [v.tag for v in m.variants_of(release) if v.kind == "cuda" and covers(v, cc)]


def gfx_of_variant(m: Matrix, v: Variant) -> tuple[str, ...]:
    if v.gfx:
        return v.gfx
    rel = m.rocm_release(v.version)
    return rel.gfx if rel is not None else ()


@record
class RocmChoice:
    rocm: str
    torch: str


def choose_rocm(m: Matrix, gfx: Iterable[str]) -> RocmChoice | None:
    """The newest torch release and its newest ROCm wheel whose gfx list has every target."""
    need = set(gfx)
    for rel in reversed(m.torch):
        rocms = sorted((v.version for v in m.variants_of(rel.version)
                        if v.kind == "rocm" and need <= set(gfx_of_variant(m, v))),
                       key=version_key)
        if rocms:
            return RocmChoice(rocms[-1], rel.version)
    return None


def mps_floor(m: Matrix, torch: str) -> str:
    """The oldest macOS on which torch `torch`'s MPS works ('' when unknown or unparsable): the
    release's matrix/torch.toml mps_min_macos, else the matrix/mps.toml [[macos_floor]] range
    that holds its minor (nightlies such as 2.10.0.dev, releases torch.toml does not list).
    The one owner of the MPS floor: doctor, explain, the resolver and validate --host ask it."""
    found = re.match(r"(\d{1,9})\.(\d{1,9})(?!\d)", torch.strip())
    if found is None:
        return ""
    minor = f"{int(found[1])}.{int(found[2])}"
    rel = m.torch_release(minor)
    if rel is not None and rel.mps_min_macos:
        return rel.mps_min_macos
    for row in (m.extra.get("mps") or {}).get("macos_floor") or ():
        lo, hi = str(row.get("torch_min", "")), str(row.get("torch_max", ""))
        if lo and version_key(minor) >= version_key(lo) and (
                not hi or version_key(minor) <= version_key(hi)):
            return str(row.get("macos", ""))
    return ""


def mps_torch(m: Matrix, macos: str) -> TorchRelease | None:
    """The newest torch release whose MPS backend works on this macOS version."""
    for rel in reversed(m.torch):
        floor = mps_floor(m, rel.version)
        if rel.macos_arm64 and floor and at_least(macos, floor):
            return rel
    return None


@record
class HostRules:
    """Host facts that are not in the version matrix (matrix/signatures.toml [doctor])."""

    buildkit_classic_min: str
    buildx_required_from: str
    docker_default_shm_mb: int
    podman_cdi_min: str
    shm_advice: str
    shm_min_mb: int = 1024  # a container /dev/shm below this is reported
    cuda_device_nodes: tuple[str, ...] = ()  # regexes: the /dev nodes a CUDA process opens
    nvidia_device_mode: str = ""  # the driver's default mode for them (NVreg_DeviceFileMode)
    memlock_advice: str = "-1"  # the container memlock ulimit NCCL over IB needs (-1: unlimited)
    stack_advice: int = 67108864  # the container stack ulimit (bytes) NGC containers ask for

    @classmethod
    def from_table(cls, t: Mapping[str, Any]) -> HostRules:
        try:
            return cls(str(t["buildkit_classic_min"]), str(t["buildx_required_from"]),
                       int(t["docker_default_shm_mb"]), str(t["podman_cdi_min"]),
                       str(t["shm_advice"]), int(t["shm_min_mb"]),
                       tuple(str(x) for x in t["cuda_device_nodes"]),
                       str(t["nvidia_device_mode"]), str(t["memlock_advice"]),
                       int(t["stack_advice"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise MatrixError(f"signatures.toml [doctor]: missing or bad key {exc}") from exc

    def is_cuda_node(self, path: str) -> bool:
        return any(re.fullmatch(rx, path) for rx in self.cuda_device_nodes)


@cache
def host_rules() -> HostRules:
    """The [doctor] table of matrix/signatures.toml, loaded once as typed data."""
    import tomllib

    from envbuild.common.boundedio import load_toml
    from envbuild.common.resources import matrix_dir

    try:
        table = load_toml(matrix_dir() / "signatures.toml", "matrix file").get("doctor", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise MatrixError(f"signatures.toml: cannot read the [doctor] table: {exc}") from exc
    return HostRules.from_table(table)
