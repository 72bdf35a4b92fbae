"""The matrix's typed model: one frozen dataclass per row kind, the Matrix that holds them, and
where each kind lives in the TOML files (TABLES). Data only, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from functools import cached_property
from typing import Any

from envbuild.common.record import record
from envbuild.common.versions import minor_of


@record
class Problem:
    file: str
    row: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.row}: {self.message}"


@record(kw_only=True)
class Row:
    """What every matrix row carries: whether a primary source confirmed it, its sources
    (ids in sources.toml) and a free note."""

    verified: bool = False
    source: tuple[str, ...] = ()
    note: str = ""


@record
class CudaCompat(Row):
    major: int
    min_driver_linux: str
    min_driver_windows: str = ""


@record
class CudaHistory(Row):
    """A CUDA minor older than every [[release]] row: only its GA driver, to judge old torch
    builds in collect_env reports (no images, no wheels; nothing resolves to it)."""

    version: str
    ga_driver_linux: str
    ga_driver_windows: str = ""


@record
class CompatPackage(Row):
    """NVIDIA's forward-compatibility libraries (cuda_compat in redistrib_<latest>.json): a newer
    libcuda that lets an older driver branch run CUDA `cuda` (and older minors of its major)
    applications, on the GPUs NVIDIA supports."""

    cuda: str  # the CUDA minor it brings: 13.2
    version: str  # its driver libraries' version: 595.71.05
    redist: str  # the redistrib release it is listed in: 13.2.2
    arch: str  # linux-x86_64 | linux-sbsa
    path: str  # relative_path under the redist root
    sha256: str
    size: int
    host_branches: tuple[str, ...]  # driver branches it runs on


@record
class CudaRelease(Row):
    version: str
    latest: str
    ga_driver_linux: str
    ga_driver_windows: str = ""
    driver_linux: str = ""
    driver_windows: str = ""
    image: str = ""
    eol: bool = False


@record
class CudaImage(Row):
    cuda: str
    os: str
    flavors: tuple[str, ...]
    # Docker's arch names of the tag's multi-arch manifest (every flavor, but amd64_only's)
    platforms: tuple[str, ...] = ("amd64",)
    amd64_only: tuple[str, ...] = ()  # flavors NVIDIA published for amd64 alone


@record
class TorchRelease(Row):
    version: str
    released: str
    python: tuple[str, ...]
    default_variant: str
    mps_min_macos: str = ""
    macos_arm64: bool = True


@record
class TorchPatch(Row):
    torch: str
    torchvision: str
    torchaudio: str = ""
    torchaudio_pinned: bool = True

    @property
    def release(self) -> str:
        return minor_of(self.torch)


@record
class Variant(Row):
    release: str
    tag: str
    kind: str
    version: str = ""
    cudnn: str = ""
    nccl: str = ""
    sass: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()
    gfx: tuple[str, ...] = ()
    status: str = "stable"


@record
class WheelPlatform(Row):
    """Where a torch release's wheel variant has wheels for a platform other than linux/amd64 (the
    [[variant]] rows are the x86_64 facts), and the arch list there: linux/arm64 (aarch64;
    NVIDIA's 'sbsa') wheels leave out archs no aarch64 GPU has and add Jetson Thor's 11.0."""

    release: str
    tag: str
    platform: str  # linux/arm64
    where: str  # pypi | index | both (index: index_base/<tag>)
    sass: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()


@record
class Arch(Row):
    cc: str
    name: str
    min_cuda: str
    last_cuda: str = ""
    last_driver_branch: str = ""


@record
class Gpu(Row):
    name: str
    vendor: str
    aliases: tuple[str, ...] = ()
    cc: str = ""
    gfx: str = ""
    memory_gb: float = 0.0
    wheels: str = ""  # "jetpack": only NVIDIA's JetPack builds of torch fit (gpus.toml header)
    cpu: str = ""  # the CPU an Arm module pairs it with ("Grace"), and the core name lscpu
    cpu_core: str = ""  # prints for that CPU ("Neoverse-V2")


@record
class RocmRelease(Row):
    version: str
    base_image: str
    os: tuple[str, ...] = ()
    gfx: tuple[str, ...] = ()


@record
class OsInfo(Row):
    id: str
    family: str
    package_manager: str
    python: str
    image: str
    # What the rendered Dockerfile depends on in the stock image (see os.toml's header).
    shell: str
    uid_1000: str
    gid_1000: str
    python_in_base: bool
    venv_suffix: str
    headers_suffix: str
    compiler_packages: tuple[str, ...]
    extra_python: tuple[str, ...] = ()
    glibc: str = ""
    # /etc/os-release's ID and VERSION_ID (a major matches any X.Y of it): how an inspected
    # --base-image is told to be this OS
    os_release: tuple[str, ...] = ()

    def ships_python(self, version: str) -> bool:
        """The OS's own packages have this Python (its python3, or another it carries)."""
        return version == self.python or version in self.extra_python


@record
class Matrix:
    cuda_compat: tuple[CudaCompat, ...]
    cuda: tuple[CudaRelease, ...]
    images: tuple[CudaImage, ...]
    compat_packages: tuple[CompatPackage, ...]
    torch: tuple[TorchRelease, ...]
    patches: tuple[TorchPatch, ...]
    variants: tuple[Variant, ...]
    platforms: tuple[WheelPlatform, ...]
    archs: tuple[Arch, ...]
    gpus: tuple[Gpu, ...]
    rocm: tuple[RocmRelease, ...]
    oses: tuple[OsInfo, ...]
    cuda_history: tuple[CudaHistory, ...]
    sources: Mapping[str, Mapping[str, Any]]
    meta: Mapping[str, Mapping[str, Any]]
    extra: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    # Lookups used by the resolver; all small linear scans over tuples kept in version order.
    def cuda_release(self, minor: str) -> CudaRelease | None:
        return next((r for r in self.cuda if r.version == minor), None)

    def cuda_history_row(self, minor: str) -> CudaHistory | None:
        return next((r for r in self.cuda_history if r.version == minor), None)

    def compat_floor(self, major: int) -> CudaCompat | None:
        return next((c for c in self.cuda_compat if c.major == major), None)

    def torch_release(self, minor: str) -> TorchRelease | None:
        return next((r for r in self.torch if r.version == minor), None)

    @cached_property
    def _by_release(self) -> dict[str, tuple[list[Variant], list[TorchPatch]]]:
        index: dict[str, tuple[list[Variant], list[TorchPatch]]] = {}
        for v in self.variants:
            index.setdefault(v.release, ([], []))[0].append(v)
        for pt in self.patches:
            index.setdefault(pt.release, ([], []))[1].append(pt)
        return index

    def variants_of(self, release: str) -> list[Variant]:
        return list(self._by_release.get(release, ([], []))[0])

    def patches_of(self, release: str) -> list[TorchPatch]:
        return list(self._by_release.get(release, ([], []))[1])

    def platform_wheel(self, release: str, tag: str, platform: str) -> WheelPlatform | None:
        """The [[platform]] row of a release variant on a platform (None: no wheels known)."""
        return next((w for w in self.platforms if (w.release, w.tag, w.platform)
                     == (release, tag, platform)), None)

    def os_info(self, os_id: str) -> OsInfo | None:
        return next((o for o in self.oses if o.id == os_id), None)

    def rocm_release(self, version: str) -> RocmRelease | None:
        return next((r for r in self.rocm if r.version == version), None)

    def arch(self, cc: str) -> Arch | None:
        return next((a for a in self.archs if a.cc == cc), None)

    def images_for(self, cuda_image: str) -> list[CudaImage]:
        return [i for i in self.images if i.cuda == cuda_image]


# (file stem, table name, row type, Matrix field)
TABLES: tuple[tuple[str, str, type[Row], str], ...] = (
    ("cuda", "compat", CudaCompat, "cuda_compat"),
    ("cuda", "release", CudaRelease, "cuda"),
    ("cuda", "image", CudaImage, "images"),
    ("cuda", "compat_package", CompatPackage, "compat_packages"),
    ("cuda", "history", CudaHistory, "cuda_history"),
    ("torch", "release", TorchRelease, "torch"),
    ("torch", "patch", TorchPatch, "patches"),
    ("torch", "variant", Variant, "variants"),
    ("torch", "platform", WheelPlatform, "platforms"),
    ("gpus", "arch", Arch, "archs"),
    ("gpus", "gpu", Gpu, "gpus"),
    ("rocm", "release", RocmRelease, "rocm"),
    ("os", "os", OsInfo, "oses"),
)
EXTRA_FILES = ("mps", "wsl2", "peaks", "sizes")  # read whole into Matrix.extra
# Every matrix file (by stem) a Matrix is read from.
FILES: tuple[str, ...] = tuple(sorted({t[0] for t in TABLES} | {"sources", *EXTRA_FILES}))


def label(row: Any) -> str:
    """How a problem names a row: its key fields, e.g. (release='2.5', tag='cu124')."""
    if isinstance(row, Variant):
        return f"(release={row.release!r}, tag={row.tag!r})"
    if isinstance(row, WheelPlatform):
        return f"(release={row.release!r}, tag={row.tag!r}, platform={row.platform!r})"
    if isinstance(row, CudaImage):
        return f"(cuda={row.cuda!r}, os={row.os!r})"
    for key in ("version", "name", "id", "cc", "torch", "major"):
        if hasattr(row, key):
            return f"({key}={getattr(row, key)!r})"
    return repr(row)


def where(table: str, row: Any) -> str:
    """A row as a problem names it: [[table]] (its key fields)."""
    return f"[[{table}]] {label(row)}"
