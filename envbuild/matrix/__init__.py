"""The version matrix: TOML files in `matrix/` loaded into typed, frozen rows.

Loading is pure (files in, dataclasses out). `check()` returns every problem with its file
and row instead of stopping at the first, so a maintainer fixes a broken matrix in one pass.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tomllib
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any

from envbuild.common.echo import shown
from envbuild.common.errors import MatrixError
from envbuild.common.versions import parse_version, version_key


@dataclass(frozen=True)
class Problem:
    file: str
    row: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.row}: {self.message}"


@dataclass(frozen=True)
class CudaCompat:
    major: int
    min_driver_linux: str
    min_driver_windows: str = ""
    verified: bool = False
    source: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class CompatPackage:
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
    verified: bool = False
    source: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class CudaRelease:
    version: str
    latest: str
    ga_driver_linux: str
    ga_driver_windows: str = ""
    driver_linux: str = ""
    driver_windows: str = ""
    image: str = ""
    eol: bool = False
    verified: bool = False
    source: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class CudaImage:
    cuda: str
    os: str
    flavors: tuple[str, ...]
    verified: bool = False
    source: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class TorchRelease:
    version: str
    released: str
    python: tuple[str, ...]
    default_variant: str
    mps_min_macos: str = ""
    macos_arm64: bool = True
    verified: bool = False
    source: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class TorchPatch:
    torch: str
    torchvision: str
    torchaudio: str = ""
    torchaudio_pinned: bool = True
    verified: bool = False
    source: tuple[str, ...] = ()
    note: str = ""

    @property
    def release(self) -> str:
        return ".".join(self.torch.split(".")[:2])


@dataclass(frozen=True)
class Variant:
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
    verified: bool = False
    source: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class Arch:
    cc: str
    name: str
    min_cuda: str
    last_cuda: str = ""
    last_driver_branch: str = ""
    verified: bool = False
    source: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class Gpu:
    name: str
    vendor: str
    aliases: tuple[str, ...] = ()
    cc: str = ""
    gfx: str = ""
    memory_gb: float = 0.0
    verified: bool = False
    source: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class RocmRelease:
    version: str
    base_image: str
    os: tuple[str, ...] = ()
    gfx: tuple[str, ...] = ()
    verified: bool = False
    source: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class OsInfo:
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
    verified: bool = False
    source: tuple[str, ...] = ()
    note: str = ""

    def ships_python(self, version: str) -> bool:
        """The OS's own packages have this Python (its python3, or another it carries)."""
        return version == self.python or version in self.extra_python


@dataclass(frozen=True)
class Matrix:
    cuda_compat: tuple[CudaCompat, ...]
    cuda: tuple[CudaRelease, ...]
    images: tuple[CudaImage, ...]
    compat_packages: tuple[CompatPackage, ...]
    torch: tuple[TorchRelease, ...]
    patches: tuple[TorchPatch, ...]
    variants: tuple[Variant, ...]
    archs: tuple[Arch, ...]
    gpus: tuple[Gpu, ...]
    rocm: tuple[RocmRelease, ...]
    oses: tuple[OsInfo, ...]
    sources: Mapping[str, Mapping[str, Any]]
    meta: Mapping[str, Mapping[str, Any]]
    extra: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    # Lookups used by the resolver; all small linear scans over tuples kept in version order.
    def cuda_release(self, minor: str) -> CudaRelease | None:
        return next((r for r in self.cuda if r.version == minor), None)

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

    def os_info(self, os_id: str) -> OsInfo | None:
        return next((o for o in self.oses if o.id == os_id), None)

    def rocm_release(self, version: str) -> RocmRelease | None:
        return next((r for r in self.rocm if r.version == version), None)

    def arch(self, cc: str) -> Arch | None:
        return next((a for a in self.archs if a.cc == cc), None)

    def images_for(self, cuda_image: str) -> list[CudaImage]:
        return [i for i in self.images if i.cuda == cuda_image]


# (file stem, table name, row type, Matrix field, sort key or None)
_TABLES: tuple[tuple[str, str, type, str], ...] = (
    ("cuda", "compat", CudaCompat, "cuda_compat"),
    ("cuda", "release", CudaRelease, "cuda"),
    ("cuda", "image", CudaImage, "images"),
    ("cuda", "compat_package", CompatPackage, "compat_packages"),
    ("torch", "release", TorchRelease, "torch"),
    ("torch", "patch", TorchPatch, "patches"),
    ("torch", "variant", Variant, "variants"),
    ("gpus", "arch", Arch, "archs"),
    ("gpus", "gpu", Gpu, "gpus"),
    ("rocm", "release", RocmRelease, "rocm"),
    ("os", "os", OsInfo, "oses"),
)
_EXTRA_FILES = ("mps", "wsl2", "peaks", "sizes")


def _type_ok(value: Any, hint: Any) -> Any:
    """Coerce a TOML value to the dataclass field type, or raise TypeError."""
    if hint is str:
        if isinstance(value, str):
            return value
        raise TypeError(f"expected a string, got {shown(value)}")
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise TypeError(f"expected true/false, got {shown(value)}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise TypeError(f"expected an integer, got {shown(value)}")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise TypeError(f"expected a number, got {shown(value)}")
    # tuple[str, ...]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise TypeError(f"expected a list of strings, got {shown(value)}")


@cache
def _field_types(cls: type) -> dict[str, tuple[Any, bool]]:
    hints = typing.get_type_hints(cls)
    out: dict[str, tuple[Any, bool]] = {}
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        hint = hints[f.name]
        out[f.name] = (str if hint is str else hint, required)
    return out


def _row_label(raw: Mapping[str, Any], index: int) -> str:
    for key in ("version", "tag", "name", "id", "cc", "torch", "cuda", "major"):
        if key in raw:
            return f"row {index + 1} ({key}={raw[key]!r})"
    return f"row {index + 1}"


def _parse_rows(cls: type, rows: Any, file: str, table: str,
                problems: list[Problem]) -> list[Any]:
    if not isinstance(rows, list):
        problems.append(Problem(file, f"[[{table}]]", "must be an array of tables"))
        return []
    types = _field_types(cls)
    out = []
    for index, raw in enumerate(rows):
        label = f"[[{table}]] {_row_label(raw, index)}"
        kwargs: dict[str, Any] = {}
        ok = True
        for key, value in raw.items():
            if key not in types:
                problems.append(Problem(file, label, f"unknown key {key!r}"))
                ok = False
                continue
            try:
                kwargs[key] = _type_ok(value, types[key][0])
            except TypeError as exc:
                problems.append(Problem(file, label, f"{key}: {exc}"))
                ok = False
        for key, (_, required) in types.items():
            if required and key not in raw:
                problems.append(Problem(file, label, f"missing required key {key!r}"))
                ok = False
        if ok:
            out.append(cls(**kwargs))
    return out


def _read_toml(path: Path, problems: list[Problem]) -> dict[str, Any]:
    """A matrix file through the bounded reader: a FIFO, device, a file over CONFIG_BYTES, one
    nested too deep or not UTF-8 is refused (UsageError, exit 2), not listed as a problem."""
    from envbuild.common.boundedio import load_toml

    try:
        return load_toml(path, "matrix file")
    except FileNotFoundError:
        problems.append(Problem(path.name, "-", "file is missing"))
    except tomllib.TOMLDecodeError as exc:
        problems.append(Problem(path.name, "-", f"not valid TOML: {exc}"))
    except OSError as exc:
        problems.append(Problem(path.name, "-", f"cannot read: {exc.strerror}"))
    return {}


def _read_docs(directory: Path, problems: list[Problem]) -> dict[str, dict[str, Any]]:
    return {stem: _read_toml(directory / f"{stem}.toml", problems)
            for stem in sorted({t[0] for t in _TABLES} | {"sources", *_EXTRA_FILES})}


def _from_docs(docs: Mapping[str, Any], problems: list[Problem]) -> Matrix:
    built: dict[str, Any] = {}
    meta: dict[str, Mapping[str, Any]] = {}
    for stem, table, cls, attr in _TABLES:
        doc = docs[stem]
        built[attr] = tuple(_parse_rows(cls, doc.get(table, []), f"{stem}.toml", table, problems))
        meta[stem] = doc.get("meta", {})
    sources = docs["sources"].get("source", {})
    extra = {stem: docs[stem] for stem in _EXTRA_FILES}
    return Matrix(sources=sources, meta=meta, extra=extra, **built)


def parse(directory: Path) -> tuple[Matrix, list[Problem]]:
    """Read every matrix file; return the matrix (bad rows dropped) and the schema problems."""
    problems: list[Problem] = []
    docs = _read_docs(directory, problems)
    return _from_docs(docs, problems), problems


def check(directory: Path) -> list[Problem]:
    """Every schema and cross-reference problem of the matrix in `directory`."""
    matrix, problems = parse(directory)
    return problems + cross_check(matrix)


def _sorted_unique(rows: Iterable[Any], key: Callable[[Any], Any], file: str, table: str,
                   label: Callable[[Any], str]) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[Any] = set()
    previous: Any = None
    for row in rows:
        k = key(row)
        if k in seen:
            problems.append(Problem(file, f"[[{table}]] {label(row)}", "duplicate row"))
        elif previous is not None and k < previous:
            problems.append(Problem(file, f"[[{table}]] {label(row)}",
                                    "out of order (rows are sorted oldest first)"))
        seen.add(k)
        previous = k
    return problems


def _versions_ok(values: Iterable[tuple[str, str]], file: str, label: str) -> list[Problem]:
    out = []
    for name, value in values:
        if value and parse_version(value) is None:
            out.append(Problem(file, label, f"{name}: {shown(value)} is not a version"))
    return out


def cross_check(m: Matrix) -> list[Problem]:
    p: list[Problem] = []
    known_sources = set(m.sources)
    for stem, table, _cls, attr in _TABLES:
        for row in getattr(m, attr):
            for sid in row.source:
                if sid not in known_sources:
                    p.append(Problem(f"{stem}.toml", f"[[{table}]] {_label(row)}",
                                     f"source {sid!r} is not defined in sources.toml"))
            if not row.source:
                p.append(Problem(f"{stem}.toml", f"[[{table}]] {_label(row)}", "no source given"))

    def vk(attr: str) -> Callable[[Any], Any]:
        return lambda r: version_key(getattr(r, attr))

    p += _sorted_unique(m.cuda_compat, lambda r: r.major, "cuda.toml", "compat", _label)
    p += _sorted_unique(m.cuda, vk("version"), "cuda.toml", "release", _label)
    p += _sorted_unique(m.images, lambda r: (version_key(r.cuda), r.os), "cuda.toml", "image",
                        _label)
    p += _sorted_unique(m.compat_packages, lambda r: (version_key(r.cuda), r.arch),
                        "cuda.toml", "compat_package", _label)
    p += _sorted_unique(m.torch, vk("version"), "torch.toml", "release", _label)
    p += _sorted_unique(m.patches, vk("torch"), "torch.toml", "patch", _label)
    p += _sorted_unique(m.variants, lambda r: (version_key(r.release), r.kind, r.tag),
                        "torch.toml", "variant", _label)
    p += _sorted_unique(m.archs, vk("cc"), "gpus.toml", "arch", _label)
    p += _sorted_unique(m.rocm, vk("version"), "rocm.toml", "release", _label)

    names: dict[str, str] = {}
    for g in m.gpus:
        for n in (g.name, *g.aliases):
            k = n.casefold()
            if k in names:
                p.append(Problem("gpus.toml", f"[[gpu]] {_label(g)}",
                                 f"name {n!r} also used by {names[k]!r}"))
            names[k] = g.name

    majors = {c.major for c in m.cuda_compat}
    cuda_minors = {r.version for r in m.cuda}
    os_ids = {o.id for o in m.oses}
    arch_ccs = {a.cc for a in m.archs}
    rocm_versions = {r.version for r in m.rocm}
    torch_minors = {r.version for r in m.torch}

    for r in m.cuda:
        lab = f"[[release]] {_label(r)}"
        p += _versions_ok([("version", r.version), ("latest", r.latest),
                           ("ga_driver_linux", r.ga_driver_linux)], "cuda.toml", lab)
        if r.latest and not r.latest.startswith(r.version + "."):
            p.append(Problem("cuda.toml", lab, f"latest {r.latest!r} is not a {r.version} update"))
        if int(r.version.split(".")[0]) not in majors:
            p.append(Problem("cuda.toml", lab, "no [[compat]] floor for this CUDA major"))
        if r.image and not m.images_for(r.image):
            p.append(Problem("cuda.toml", lab, f"image {r.image!r} has no [[image]] rows"))
    for i in m.images:
        lab = f"[[image]] {_label(i)}"
        if ".".join(i.cuda.split(".")[:2]) not in cuda_minors:
            p.append(Problem("cuda.toml", lab, f"CUDA {i.cuda} is not a known [[release]]"))
        if i.os not in os_ids:
            p.append(Problem("cuda.toml", lab, f"os {i.os!r} is not defined in os.toml"))
        if not i.flavors:
            p.append(Problem("cuda.toml", lab, "no flavors"))

    for t in m.torch:
        lab = f"[[release]] {_label(t)}"
        tags = {v.tag for v in m.variants_of(t.version)}
        if t.default_variant not in tags:
            p.append(Problem("torch.toml", lab,
                             f"default_variant {t.default_variant!r} is not one of its variants"))
        if not m.patches_of(t.version):
            p.append(Problem("torch.toml", lab, "no [[patch]] rows for this release"))
        if "cpu" not in tags:
            p.append(Problem("torch.toml", lab, "no cpu variant"))
        if not t.python:
            p.append(Problem("torch.toml", lab, "no Python versions"))
    for pt in m.patches:
        lab = f"[[patch]] {_label(pt)}"
        if pt.release not in torch_minors:
            p.append(Problem("torch.toml", lab, f"torch {pt.release} is not a [[release]]"))
        p += _versions_ok([("torch", pt.torch), ("torchvision", pt.torchvision),
                           ("torchaudio", pt.torchaudio)], "torch.toml", lab)
    for v in m.variants:
        lab = f"[[variant]] {_label(v)}"
        if v.release not in torch_minors:
            p.append(Problem("torch.toml", lab, f"torch {v.release} is not a [[release]]"))
        if v.kind == "cuda":
            if v.version not in cuda_minors:
                p.append(Problem("torch.toml", lab,
                                 f"CUDA {v.version!r} is not a [[release]] in cuda.toml"))
            if v.tag != "cu" + v.version.replace(".", ""):
                p.append(Problem("torch.toml", lab,
                                 f"tag {v.tag!r} does not match CUDA {v.version}"))
            if not v.sass:
                p.append(Problem("torch.toml", lab, "a CUDA variant needs its sass arch list"))
            for cc in (*v.sass, *v.ptx):
                if cc not in arch_ccs:
                    p.append(Problem("torch.toml", lab, f"arch {cc!r} is not in gpus.toml"))
        elif v.kind == "rocm":
            if v.version not in rocm_versions:
                p.append(Problem("torch.toml", lab,
                                 f"ROCm {v.version!r} is not a [[release]] in rocm.toml"))
            if v.tag != "rocm" + v.version:
                p.append(Problem("torch.toml", lab,
                                 f"tag {v.tag!r} does not match ROCm {v.version}"))
        elif v.kind == "cpu":
            if v.tag != "cpu":
                p.append(Problem("torch.toml", lab, "a cpu variant has tag 'cpu'"))
        else:
            p.append(Problem("torch.toml", lab, f"kind {v.kind!r} is not cuda, rocm or cpu"))

    for g in m.gpus:
        lab = f"[[gpu]] {_label(g)}"
        if g.vendor == "nvidia" and g.cc not in arch_ccs:
            p.append(Problem("gpus.toml", lab, f"compute capability {g.cc!r} is not an [[arch]]"))
        if g.vendor == "amd" and not g.gfx.startswith("gfx"):
            p.append(Problem("gpus.toml", lab, "an AMD GPU needs its gfx target"))
        if g.vendor not in ("nvidia", "amd"):
            p.append(Problem("gpus.toml", lab, f"vendor {g.vendor!r} is not nvidia or amd"))
    for r2 in m.rocm:
        for os_id in r2.os:
            if os_id not in os_ids:
                p.append(Problem("rocm.toml", f"[[release]] {_label(r2)}",
                                 f"os {os_id!r} is not defined in os.toml"))
    for o in m.oses:
        p += _versions_ok([("python", o.python)] + [("extra_python", x) for x in o.extra_python],
                          "os.toml", f"[[os]] {_label(o)}")
    from envbuild.matrix.rules import semantic_check

    return p + semantic_check(m)


def _label(row: Any) -> str:
    if isinstance(row, Variant):
        return f"(release={row.release!r}, tag={row.tag!r})"
    if isinstance(row, CudaImage):
        return f"(cuda={row.cuda!r}, os={row.os!r})"
    for key in ("version", "name", "id", "cc", "torch", "major"):
        if hasattr(row, key):
            return f"({key}={getattr(row, key)!r})"
    return repr(row)


# The cache holds the parsed TOML documents as JSON, never a pickle: a cache file that is
# corrupt, truncated, of the wrong shape, not owned by this user or writable by others is
# ignored (and replaced), so the worst a bad cache can do is cost one TOML parse.
_CACHE_FORMAT = 1


def _cache_path(d: Path) -> Path | None:
    """A per-user cache of the checked matrix, keyed by every file's name, size and mtime."""
    import hashlib
    import os

    from envbuild import __version__

    try:
        stats = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in d.glob("*.toml"))
    except OSError:
        return None
    key = hashlib.sha256(repr((__version__, str(d.resolve()), stats)).encode()).hexdigest()[:20]
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "envbuild"
    return base / f"matrix-{key}.json"


def _private(path: Path, want_dir: bool) -> bool:
    """This user's own directory / regular file (not a symlink), writable by nobody else."""
    import os
    import stat

    try:
        st = os.lstat(path)
    except OSError:
        return False
    kind_ok = stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)
    uid = os.geteuid() if hasattr(os, "geteuid") else st.st_uid
    return kind_ok and not st.st_mode & 0o022 and st.st_uid == uid


def _trusted(path: Path) -> bool:
    """A world-writable XDG_CACHE_HOME must not let another user feed us a matrix."""
    return _private(path.parent, True) and _private(path, False)


def _read_cache(cache: Path) -> Matrix | None:
    from envbuild.common.boundedio import CACHE_BYTES, load_json
    from envbuild.common.errors import UsageError

    if not _trusted(cache):
        return None
    try:
        doc = load_json(cache, "matrix cache", cap=CACHE_BYTES)
    except (OSError, ValueError, UsageError):
        return None  # missing, damaged or hostile: rebuilt from the TOML
    if not isinstance(doc, dict) or doc.get("format") != _CACHE_FORMAT \
            or doc.get("key") != cache.stem:
        return None
    docs = doc.get("docs")
    stems = {t[0] for t in _TABLES} | {"sources", *_EXTRA_FILES}
    if not isinstance(docs, dict) or set(docs) != stems \
            or not all(isinstance(v, dict) for v in docs.values()):
        return None
    if doc.get("sha256") != _digest(docs):
        return None  # edited or damaged after a clean check: rebuild (cross_check is not re-run)
    problems: list[Problem] = []
    try:
        matrix = _from_docs(docs, problems)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError):
        return None
    return None if problems else matrix


def _digest(docs: Any) -> str:
    import hashlib
    import json

    blob = json.dumps(docs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def load(directory: Path | None = None) -> Matrix:
    """Load and fully check the matrix; raise MatrixError naming the first problems.

    A matrix that checked clean is cached (its TOML documents as JSON, keyed by the files'
    sizes and mtimes): parsing TOML is most of the start-up time of `envbuild resolve`.
    """
    from envbuild.common.resources import matrix_dir

    d = directory or matrix_dir()
    cache = _cache_path(d)
    if cache is not None:
        cached = _read_cache(cache)
        if cached is not None:
            return cached
    problems: list[Problem] = []
    docs = _read_docs(d, problems)
    matrix = _from_docs(docs, problems)
    problems += cross_check(matrix)
    if problems:
        listed = "; ".join(str(x) for x in problems[:3])
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        raise MatrixError(f"the version matrix in {d} is broken: {listed}{more}")
    if cache is not None:
        _write_cache(cache, docs)
    return matrix


def _write_cache(cache: Path, docs: Mapping[str, Any]) -> None:
    import json
    import os
    import tempfile

    try:
        text = json.dumps({"format": _CACHE_FORMAT, "key": cache.stem, "docs": docs,
                           "sha256": _digest(docs)})
    except (TypeError, ValueError):
        return  # a TOML date or time has no JSON form: no cache, same result
    try:
        cache.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(cache.parent, True):
            return
        fd, tmp = tempfile.mkstemp(dir=cache.parent, prefix=".matrix-")
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
            os.replace(tmp, cache)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError:
        pass  # a read-only home: no cache, same result

