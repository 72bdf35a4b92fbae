"""The matrix's typed model: one frozen dataclass per row kind, the Matrix that holds them, and
where each kind lives in the TOML files (TABLES). Data only, no I/O."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import field
from functools import cached_property
from typing import Any, Generic, TypeVar

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
    """cuda.toml [[compat]]: a CUDA major's minor-version-compatibility floor, the oldest driver
    that runs every minor of it (CUDA 11 and later)."""

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
    """cuda.toml [[release]]: a CUDA minor, its newest patch, the driver it shipped with (GA) and
    that of its newest patch, the nvidia/cuda image patch it is built on, and whether it is EOL."""

    version: str  # the minor: 12.4
    latest: str  # its newest patch: 12.4.1
    # The minimum driver of the minor's GA release, then of its newest patch ("" = N/A).
    ga_driver_linux: str
    ga_driver_windows: str = ""
    driver_linux: str = ""
    driver_windows: str = ""
    image: str = ""  # the nvidia/cuda image patch for this minor ("" = none)
    eol: bool = False


@record
class CudaImage(Row):
    """cuda.toml [[image]]: the nvidia/cuda image flavors (base, runtime, cudnn-devel, ...) that
    exist for a CUDA image patch on one OS."""

    cuda: str
    os: str
    flavors: tuple[str, ...]
    # Docker's arch names of the tag's multi-arch manifest (every flavor, but amd64_only's)
    platforms: tuple[str, ...] = ("amd64",)
    amd64_only: tuple[str, ...] = ()  # flavors NVIDIA published for amd64 alone


@record
class TorchRelease(Row):
    """torch.toml [[release]]: a torch minor, its date, the Pythons it has wheels for, the variant
    PyPI serves, and its macOS (MPS) floor."""

    version: str
    released: str
    python: tuple[str, ...]
    default_variant: str
    mps_min_macos: str = ""
    macos_arm64: bool = True


@record
class TorchPatch(Row):
    """torch.toml [[patch]]: a torch patch and the torchvision / torchaudio that pin it."""

    torch: str
    torchvision: str
    torchaudio: str = ""
    torchaudio_pinned: bool = True

    @property
    def release(self) -> str:
        return minor_of(self.torch)


@record
class Variant(Row):
    """torch.toml [[variant]]: one wheel index of a torch minor (cu124, rocm6.2, cpu): the CUDA or
    ROCm it carries, its cuDNN and NCCL, and the GPU code in it (SASS, PTX, gfx)."""

    release: str  # the torch minor: 2.5
    tag: str  # the index's tag: cu124
    kind: str  # cuda | rocm | cpu
    # What the wheels carry: the CUDA or ROCm version, cuDNN, NCCL ("" = none or unknown).
    version: str = ""
    cudnn: str = ""
    nccl: str = ""
    # The GPU code compiled in: SASS and PTX by compute capability (9.0), ROCm gfx targets (gfx942).
    sass: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()
    gfx: tuple[str, ...] = ()
    status: str = "stable"


@record
class WheelPlatform(Row):
    """torch.toml [[platform]]: where a torch release's wheel variant has wheels for a platform
    other than linux/amd64 (the [[variant]] rows are the x86_64 facts), and the arch list there:
    linux/arm64 (aarch64; NVIDIA's 'sbsa') wheels leave out archs no aarch64 GPU has and add
    Jetson Thor's 11.0."""

    release: str
    tag: str
    platform: str  # linux/arm64
    where: str  # pypi | index | both (index: index_base/<tag>)
    sass: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()


@record
class Arch(Row):
    """gpus.toml [[arch]]: a compute capability, its sm_ name, the first CUDA that builds for it and
    the last CUDA and driver branch that still do."""

    cc: str
    name: str
    min_cuda: str
    last_cuda: str = ""
    last_driver_branch: str = ""


DEVICE_MEMORY_BASES = ("module", "variants")  # gpus.toml device_memory_basis


@record
class Gpu(Row):
    """gpus.toml [[gpu]]: a GPU model by name (and the aliases users type), its vendor, its compute
    capability or gfx target, and its memory."""

    name: str
    vendor: str
    aliases: tuple[str, ...] = ()
    cc: str = ""
    gfx: str = ""
    memory_gb: float = 0.0
    memory_mib: int = 0  # what the driver reports (nvidia-smi's total), 0 = no source gives it
    # What one torch device has where memory_gb is not it (0 = memory_gb), and why
    # (DEVICE_MEMORY_BASES): "module", one device of a module that holds several (an MI250X's
    # 64 GB GCD of its 128 GB); "variants", the smallest size sold under the row's names (an
    # RTX 3060 has 8 or 12 GB). `fit` judges against it (gpus.toml header).
    device_memory_gb: float = 0.0
    device_memory_basis: str = ""
    unified_memory: bool = False  # the GPU's memory is the system's, shared with the CPU
    per_system: int = 0  # 1: one GPU per system (a Jetson, a DGX Spark); 0: not said
    family: str = ""  # "jetson": a Jetson module (forward compatibility has its own package)
    wheels: str = ""  # "jetpack": only NVIDIA's JetPack builds of torch fit (gpus.toml header)
    cpu: str = ""  # the CPU an Arm module pairs it with ("Grace"), and the core name lscpu
    cpu_core: str = ""  # prints for that CPU ("Neoverse-V2")


@record
class RocmRelease(Row):
    """rocm.toml [[release]]: a ROCm release, the ROCm base image for its containers, its OSes
    and the gfx targets it supports."""

    version: str
    base_image: str
    os: tuple[str, ...] = ()
    gfx: tuple[str, ...] = ()


@record
class OsInfo(Row):
    """os.toml [[os]]: a base OS and what the rendered Dockerfile depends on in its stock image."""

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
class Extension(Row):
    """extensions.toml [[extension]]: a CUDA extension users install on top of torch, and how a
    fit of its wheels is judged (`kind`: built | libs | asset | build; the file's header says
    what each means)."""

    name: str  # as `--with` names it: the PyPI distribution name
    import_name: str
    kind: str
    where: str  # pypi | github-release
    sdist: str = ""  # --build-extensions compiles this PyPI sdist; "" = envbuild plans no build
    build_requires: tuple[str, ...] = ()  # what its setup.py imports (built without isolation)
    build_env: tuple[str, ...] = ()  # NAME=VALUE; {archs_nodot} = 80;89;90, {arch_families} = 80;90
    build_min_cc: str = ""  # the oldest GPU its source build has kernels for ("" = any)


@record
class ExtensionRelease(Row):
    """extensions.toml [[release]]: one version of an extension on one platform, with what its
    wheel needs. Empty fields are not published (no arch list: none to judge)."""

    extension: str
    version: str  # as pip names it (a PyTorch index build carries its local tag: 0.0.33+cu130)
    platform: str
    where: str  # pypi | index:<variant> | github-release
    sdist: bool = True  # PyPI has this version's sdist (what --build-extensions compiles)
    torch: str = ""  # a PEP 440 specifier over torch versions (its Requires-Dist), "" = any
    torch_minors: tuple[str, ...] = ()  # asset: the torch major.minor with assets
    python: tuple[str, ...] = ()  # the CPython versions with wheels
    python_min: str = ""  # an abi3 or pure wheel's floor
    variant: str = ""  # built: the torch variant it was compiled against (cu128)
    cuda: tuple[str, ...] = ()  # asset: the cu tags of the asset names; build: core wheels
    cuda_match: str = ""  # libs: exact | nearest-major
    abi: tuple[str, ...] = ()  # asset: cxx11abi values with assets (TRUE, FALSE)
    exclude: tuple[str, ...] = ()  # asset: "torch=2.4 & python=3.13": combinations not built
    asset: str = ""  # asset: the file name template
    tag: str = ""  # asset: the release tag the asset hangs on
    archs: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()


@record
class ExtensionLibrary(Row):
    """extensions.toml [[library]]: a native library inside a `libs` extension's wheel, one per
    CUDA version, and the archs it is built for."""

    extension: str
    version: str
    platform: str
    cuda: str
    archs: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()


_R = TypeVar("_R", bound=Row)
_K = TypeVar("_K")


class _ByKey(Generic[_R, _K]):
    """A Matrix lookup: `matrix.<name>(value)` gives the first row of the table (a Matrix field)
    whose key field equals value, or None. One rule for every table looked up by its key: the
    table is indexed by that key on the first lookup, and the index's `get` is kept on the
    Matrix instance (a non-data descriptor: later lookups never come back here)."""

    def __init__(self, table: str, key: str) -> None:
        self.table, self.key, self.name = table, key, ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, matrix: Matrix | None, owner: type | None = None
                ) -> Callable[[_K], _R | None]:
        if matrix is None:
            return lambda value: None
        index: dict[_K, _R] = {}
        for row in getattr(matrix, self.table):
            index.setdefault(getattr(row, self.key), row)
        matrix.__dict__[self.name] = index.get  # as functools.cached_property does
        return index.get


class _Lazy(Generic[_R]):
    """A table of a LAZY_STEMS file: built from its rows on the first read, then kept on the
    Matrix instance (a non-data descriptor, as functools.cached_property). Start-up: `resolve`
    without --with never builds the extension rows (about 1,100 records, 5 ms)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, matrix: Matrix | None, owner: type | None = None) -> tuple[_R, ...]:
        if matrix is None:
            raise AttributeError(self.name)
        rows: tuple[_R, ...] = matrix.lazy[self.name]() if self.name in matrix.lazy else ()
        matrix.__dict__[self.name] = rows
        return rows


@record
class Matrix:
    """Every row of the matrix files by kind, in the files' order (TABLES says which file and
    table each kind comes from); sources.toml by id, each file's [meta] by stem, and the
    EXTRA_FILES whole by stem."""

    # Each table looked up by its key stands beside it: `matrix.cuda_release("12.4")` is the
    # first row whose key field equals the value, or None.
    cuda_compat: tuple[CudaCompat, ...]
    compat_floor = _ByKey[CudaCompat, int]("cuda_compat", "major")
    cuda: tuple[CudaRelease, ...]
    cuda_release = _ByKey[CudaRelease, str]("cuda", "version")
    images: tuple[CudaImage, ...]
    compat_packages: tuple[CompatPackage, ...]
    torch: tuple[TorchRelease, ...]
    torch_release = _ByKey[TorchRelease, str]("torch", "version")
    patches: tuple[TorchPatch, ...]
    variants: tuple[Variant, ...]
    platforms: tuple[WheelPlatform, ...]
    archs: tuple[Arch, ...]
    arch = _ByKey[Arch, str]("archs", "cc")
    gpus: tuple[Gpu, ...]
    rocm: tuple[RocmRelease, ...]
    rocm_release = _ByKey[RocmRelease, str]("rocm", "version")
    oses: tuple[OsInfo, ...]
    os_info = _ByKey[OsInfo, str]("oses", "id")
    cuda_history: tuple[CudaHistory, ...]
    cuda_history_row = _ByKey[CudaHistory, str]("cuda_history", "version")
    extensions = _Lazy[Extension]()
    extension = _ByKey[Extension, str]("extensions", "name")
    extension_releases = _Lazy[ExtensionRelease]()
    extension_libraries = _Lazy[ExtensionLibrary]()
    sources: Mapping[str, Mapping[str, Any]]
    meta: Mapping[str, Mapping[str, Any]]
    extra: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # the LAZY_STEMS tables: attribute -> what builds its rows
    lazy: Mapping[str, Callable[[], tuple[Any, ...]]] = field(default_factory=dict, repr=False,
                                                              compare=False)
    # sha256 of the matrix files' documents as loaded (canonical JSON, loader.snapshot): which
    # facts a build was resolved from (provenance); '' for a matrix made in code
    snapshot: str = field(default="", compare=False)

    @property
    def platform_names(self) -> tuple[str, ...]:
        """torch.toml [meta] platforms: the first is what the [[variant]] rows describe (a matrix
        that names none has linux/amd64 alone)."""
        return tuple(str(p) for p in self.meta.get("torch", {}).get("platforms",
                                                                     ("linux/amd64",)))

    # A torch minor's variants and patches, indexed once.
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

    def images_for(self, cuda_image: str) -> list[CudaImage]:
        return [i for i in self.images if i.cuda == cuda_image]


# Where each kind of row lives: file stem -> table name -> (row type, Matrix field).
LOCATIONS: dict[str, dict[str, tuple[type[Row], str]]] = {
    "cuda": {"compat": (CudaCompat, "cuda_compat"), "release": (CudaRelease, "cuda"),
             "image": (CudaImage, "images"),
             "compat_package": (CompatPackage, "compat_packages"),
             "history": (CudaHistory, "cuda_history")},
    "torch": {"release": (TorchRelease, "torch"), "patch": (TorchPatch, "patches"),
              "variant": (Variant, "variants"), "platform": (WheelPlatform, "platforms")},
    "gpus": {"arch": (Arch, "archs"), "gpu": (Gpu, "gpus")},
    "rocm": {"release": (RocmRelease, "rocm")},
    "os": {"os": (OsInfo, "oses")},
    "extensions": {"extension": (Extension, "extensions"),
                   "release": (ExtensionRelease, "extension_releases"),
                   "library": (ExtensionLibrary, "extension_libraries")},
}
# The same, flat: (file stem, table name, row type, Matrix field), in the files' order.
TABLES: tuple[tuple[str, str, type[Row], str], ...] = tuple(
    (stem, table, cls, attr)
    for stem, tables in LOCATIONS.items() for table, (cls, attr) in tables.items())
EXTRA_FILES = ("mps", "wsl2", "peaks", "sizes", "memory")  # read whole into Matrix.extra
# Files a matrix may leave out (no facts of that kind): a matrix copied before they existed, and
# the small matrices of tests and forks, still load.
OPTIONAL_FILES = ("extensions", "memory")
# Files whose tables are built on the first read (Matrix._Lazy), not at load: start-up.
LAZY_STEMS = ("extensions",)
# Every matrix file (by stem) a Matrix is read from.
FILES: tuple[str, ...] = tuple(sorted({t[0] for t in TABLES} | {"sources", *EXTRA_FILES}))


def label(row: Any) -> str:
    """How a problem names a row: its key fields, e.g. (release='2.5', tag='cu124')."""
    if isinstance(row, Variant):
        return f"(release={row.release!r}, tag={row.tag!r})"
    if isinstance(row, WheelPlatform):
        return f"(release={row.release!r}, tag={row.tag!r}, platform={row.platform!r})"
    if isinstance(row, (ExtensionRelease, ExtensionLibrary)):
        return f"(extension={row.extension!r}, version={row.version!r}, platform={row.platform!r})"
    if isinstance(row, CudaImage):
        return f"(cuda={row.cuda!r}, os={row.os!r})"
    for key in ("version", "name", "id", "cc", "torch", "major"):
        if hasattr(row, key):
            return f"({key}={getattr(row, key)!r})"
    return repr(row)


def where(table: str, row: Any) -> str:
    """A row as a problem names it: [[table]] (its key fields)."""
    return f"[[{table}]] {label(row)}"
