"""A resolve request: what the user asked for, parsed and checked for form (not for fit).

Form errors (malformed versions, unknown names) are UsageError (exit 2) with close matches;
whether the parts fit together is the resolver's business (ConflictError, exit 1).
"""

from __future__ import annotations

import re
from dataclasses import field
from typing import TYPE_CHECKING

from envbuild.common.echo import shown
from envbuild.common.errors import UsageError
from envbuild.common.lazyre import lazy
from envbuild.common.record import record
from envbuild.common.versions import major_of, minor_of, version_key
from envbuild.core import targets
from envbuild.core.gpus import gpu_index, name_key
from envbuild.matrix import Matrix, Variant
from envbuild.validator import rules

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet

    from envbuild.core.base_facts import BaseFacts
    from envbuild.core.extensions import Wanted

TARGETS = targets.NAMES
FLAVORS = ("base", "runtime", "devel")
# The wheels envbuild installs from the spec (render.torch_pins pins exactly these); a user
# package of one of these names would be a second copy (packages.py refuses them).
COMPONENTS = ("torch", "torchvision", "torchaudio")
PYTHON_SOURCES = ("os", "standalone")

# re.ASCII: `\d` would otherwise accept every Unicode digit (full-width ５３５, Arabic-Indic ٥٣٥),
# which str.isdigit() and these patterns take but no NVIDIA tool or URL ever prints.
_CUDA = lazy(r"^\d{1,2}(\.\d{1,2}(\.\d{1,3})?)?$", re.ASCII)
_ROCM = lazy(r"^\d{1,2}\.\d{1,2}(\.\d{1,3})?$", re.ASCII)
_PYTHON = lazy(r"^3\.\d{1,2}$", re.ASCII)
_DRIVER = lazy(r"^\d{3}(\.\d{1,3}){0,2}$", re.ASCII)
_SM = lazy(r"^(?:sm_?|compute_?)(\d{1,2})(\d)$", re.IGNORECASE | re.ASCII)
_CC = lazy(r"^(\d{1,2})\.(\d)$", re.ASCII)
TORCH_BARE = lazy(r"^\d+\.\d+(\.\d+)?$", re.ASCII)  # 2.4 or 2.4.1
# What `pip list` / torch.__version__ print for a wheel of the PyTorch index: 2.5.1+cu121.
_TORCH_LOCAL = lazy(r"^(?:==)?(\d+\.\d+\.\d+)\+([A-Za-z0-9.]+)$", re.ASCII)
_TORCH_HINT = ("examples: --torch 2.4, --torch 2.4.1, --torch '>=2.3,<2.6', --torch 2.5.1+cu121 "
               "(as pip list prints it)")


@record
class GpuRef:
    """A GPU the image must run on: a named product or a bare compute capability / gfx target."""

    label: str
    vendor: str  # nvidia | amd
    cc: str = ""
    gfx: str = ""

    def to_json(self) -> dict[str, str]:
        out = {"name": self.label, "vendor": self.vendor}
        if self.cc:
            out["cc"] = self.cc
        if self.gfx:
            out["gfx"] = self.gfx
        return out


@record
class Request:
    target: str | None = None
    cuda: str | None = None
    rocm: str | None = None
    torch: str | None = None
    python: str | None = None
    driver: str | None = None
    gpus: tuple[str, ...] = ()
    os: str | None = None
    flavor: str | None = None
    components: tuple[str, ...] = COMPONENTS
    base: BaseFacts | None = None  # an inspected --base-image (make): the OS is the base's
    forward_compat: bool = False  # --forward-compat: a newer CUDA on an older driver branch
    platform: str | None = None  # --platform linux/arm64; None: this host's
    extensions: tuple[str, ...] = ()  # --with NAME[==VER], as typed
    build_extensions: bool = False  # --build-extensions: compile a --with with no wheel that fits


@record
class Parsed:
    """A request whose every field is well-formed and known to the matrix."""

    target: str
    target_reason: str
    cuda: str | None
    cuda_minor: str | None
    rocm: str | None
    torch: SpecifierSet | None
    torch_text: str | None
    python: str | None
    driver: str | None
    gpus: tuple[GpuRef, ...]
    os: str | None
    flavor: str
    components: tuple[str, ...]
    given: frozenset[str] = field(default_factory=frozenset)
    cuda_major: int | None = None  # `--cuda 12`: any 12.x, the newest that fits
    notes: tuple[str, ...] = ()  # how a loose input was read, for the trace
    base: BaseFacts | None = None
    forward_compat: bool = False
    variant: str | None = None  # `--torch 2.5.1+cu121`: this wheel variant and no other
    platform: str = "linux/amd64"  # the image's platform (envbuild.core.platforms)
    extensions: tuple[Wanted, ...] = ()  # --with: every one needs a prebuilt wheel that fits
    extension_facts: str = "verified"  # verified: only rows a primary source confirmed; any
    build_extensions: bool = False  # where no prebuilt wheel fits, compile PyPI's sdist


def check_given(**values: str | None) -> None:
    """An option given with an empty value (`--target ''`) is malformed, not absent: `make`
    would otherwise build what the host's doctor recommends instead."""
    for name, value in values.items():
        if value is not None and not value.strip():
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} is empty", f"give {flag} a value, or leave it out")


def check_python_source(value: str | None) -> str | None:
    """`--python-source os|standalone` (None: the resolver's choice)."""
    if value is not None and value not in PYTHON_SOURCES:
        raise UsageError(f"--python-source {value[:40]!r} is not one of "
                         f"{', '.join(PYTHON_SOURCES)}",
                         "os: the OS's own Python packages; standalone: a relocatable CPython "
                         "(python-build-standalone through uv); leave it out to let envbuild "
                         "choose", _close(value, list(PYTHON_SOURCES)))
    return value


def _close(word: str, options: list[str]) -> list[str]:
    import difflib

    return difflib.get_close_matches(word, options, n=3, cutoff=0.5)


def split_torch(text: str) -> tuple[str, str | None]:
    """`2.5.1+cu121` (a local version, as `pip list` prints it) -> ("2.5.1", "cu121"); any other
    text -> (text, None). A local label goes only with one exact version."""
    t = text.strip()
    if "+" not in t:
        return text, None
    m = _TORCH_LOCAL.fullmatch(t)
    if m is None:
        raise UsageError(f"--torch {text[:60]!r}: a variant (+cu121, +rocm6.2, +cpu) goes with "
                         "one exact version", _TORCH_HINT)
    return m.group(1), m.group(2).lower()


def torch_specifier(text: str) -> SpecifierSet:
    """`2.4` -> ==2.4.*, `2.4.1` -> ==2.4.1, `2.5.1+cu121` -> ==2.5.1 (the variant is
    split_torch's), anything else is a PEP 440 specifier set."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    t = text.strip()
    if not t or len(t) > 100:
        raise UsageError(f"--torch {shown(text)} is not a version or specifier", _TORCH_HINT)
    t = split_torch(t)[0]
    if TORCH_BARE.fullmatch(t):
        t = f"=={t}.*" if t.count(".") == 1 else f"=={t}"
    try:
        spec = SpecifierSet(t)
    except InvalidSpecifier:
        raise UsageError(f"--torch {shown(text)} is not a version or specifier",
                         _TORCH_HINT) from None
    if not str(spec):
        raise UsageError(f"--torch {shown(text)} is empty", "examples: --torch 2.4")
    return spec


def parse_gpu(text: str, matrix: Matrix) -> GpuRef:
    raw = text.strip()
    if not raw or len(raw) > 80 or not re.fullmatch(r"[\w .+()/-]+", raw):
        raise UsageError(f"--gpu {shown(text)} is not a GPU name or compute capability",
                         "examples: --gpu H100, --gpu 'RTX 4090', --gpu sm_86, --gpu gfx942")
    m = _SM.fullmatch(raw) or _CC.fullmatch(raw)
    if m:
        cc = f"{int(m.group(1))}.{m.group(2)}"
        if matrix.arch(cc) is None:
            known = [rules.arch_name(a.cc) for a in matrix.archs]
            raise UsageError(f"compute capability {cc} is not a known NVIDIA architecture",
                             "known: " + ", ".join(known))
        return GpuRef(label=rules.arch_name(cc), vendor="nvidia", cc=cc)
    if re.fullmatch(r"gfx[0-9a-f]{3,4}", raw, re.IGNORECASE):
        return GpuRef(label=raw.lower(), vendor="amd", gfx=raw.lower())
    index = gpu_index(matrix)
    g = index.get(raw.casefold()) or index.get(name_key(raw))
    if g is None:
        names = sorted({x.name for x in matrix.gpus})
        close = _close(raw, names) or _close(name_key(raw), [name_key(n) for n in names])
        raise UsageError(f"unknown GPU {shown(raw)}",
                         "give a compute capability instead (e.g. --gpu sm_89) or a known name "
                         "(`envbuild matrix show gpus`)", close)
    return GpuRef(label=g.name, vendor=g.vendor, cc=g.cc, gfx=g.gfx)


def parse(req: Request, matrix: Matrix) -> Parsed:
    given = frozenset(k for k, v in vars(req).items()
                      if v not in (None, (), "", False)
                      and k not in ("components", "base", "forward_compat"))
    if req.target is not None and req.target not in TARGETS:
        raise UsageError(f"--target {shown(req.target)} is not one of {', '.join(TARGETS)}",
                         f"use --target {' | '.join(TARGETS)} (any case), or leave it out: "
                         "--cuda implies cuda, --rocm rocm", _close(req.target, list(TARGETS)))
    if req.flavor is not None and req.flavor not in FLAVORS:
        raise UsageError(f"--flavor {shown(req.flavor)} is not one of {', '.join(FLAVORS)}",
                         "base (the default: runtime libraries come with the wheel), runtime "
                         "(CUDA), devel (nvcc / hipcc)", _close(req.flavor, list(FLAVORS)))
    companions = [c for c in COMPONENTS if c != "torch"]
    for c in req.components:
        if c not in COMPONENTS:
            raise UsageError(f"--without {shown(c)} is not one of {', '.join(companions)}",
                             f"--without takes {' or '.join(companions)} (repeat it for both)",
                             _close(c, companions))
    if "torch" not in req.components:
        raise UsageError("--without torch: the torch component cannot be left out",
                         f"--without takes {' or '.join(companions)}; torch is what the "
                         "environment is built around")

    cuda_minor = None
    cuda_major = None
    notes: list[str] = []
    if req.cuda is not None:
        if not _CUDA.fullmatch(req.cuda):
            raise UsageError(f"--cuda {shown(req.cuda)} is not a CUDA version",
                             "use X, X.Y or X.Y.Z (ASCII digits), e.g. --cuda 12.2")
        known = [r.version for r in matrix.cuda]
        if "." not in req.cuda:
            cuda_major = int(req.cuda)
            if not any(major_of(k) == cuda_major for k in known):
                raise UsageError(f"CUDA {cuda_major} is not a CUDA major envbuild knows",
                                 f"known CUDA releases: {', '.join(known)}")
        else:
            cuda_minor = minor_of(req.cuda)
            if matrix.cuda_release(cuda_minor) is None:
                close = _close_versions(cuda_minor, known)
                hint = (f"did you mean {' or '.join(close)}? " if close else "") + \
                    f"known CUDA releases: {', '.join(known)}"
                raise UsageError(f"CUDA {cuda_minor} is not a CUDA release envbuild knows", hint,
                                 close + [v for v in _nearest_versions(cuda_minor, known)
                                          if v not in close])
    if req.rocm is not None:
        if not _ROCM.fullmatch(req.rocm):
            raise UsageError(f"--rocm {shown(req.rocm)} is not a ROCm version",
                             "use X.Y or X.Y.Z, e.g. --rocm 6.2")
        known_rocm = [r.version for r in matrix.rocm]
        if not any(v == req.rocm or v.startswith(req.rocm + ".") for v in known_rocm):
            raise UsageError(f"ROCm {req.rocm} is not a ROCm release envbuild knows",
                             f"known ROCm releases: {', '.join(known_rocm)}",
                             _nearest_versions(req.rocm, known_rocm))
    spec = torch_specifier(req.torch) if req.torch is not None else None
    variant = _variant_of(req.torch, matrix)
    if variant is not None:
        notes.append(f"variant {variant.tag}: --torch {req.torch} names it (a pip local version)")
    if req.python is not None and not _PYTHON.fullmatch(req.python):
        raise UsageError(f"--python {shown(req.python)} is not a CPython version",
                         "use 3.X (ASCII digits), e.g. --python 3.11")
    driver = req.driver
    if driver is not None:
        if not _DRIVER.fullmatch(driver):
            raise UsageError(f"--driver {shown(driver)} is not an NVIDIA driver version",
                             "use the number nvidia-smi prints (ASCII digits), e.g. "
                             "--driver 535.104.05, or a branch: --driver 535")
        if "." not in driver:
            driver, note = _driver_branch(driver, matrix)
            notes.append(note)
    if req.os is not None and matrix.os_info(req.os) is None:
        ids = [o.id for o in matrix.oses]
        raise UsageError(f"--os {shown(req.os)} is not an operating system envbuild knows",
                         f"known: {', '.join(ids)} (macOS only with --target mps)",
                         _close(req.os, ids))
    gpus = tuple(parse_gpu(g, matrix) for g in req.gpus)
    os_id = req.os
    if req.base is not None:
        from envbuild.core.base_facts import check as check_base

        os_id = check_base(req.base, req.os, matrix)
        if req.flavor not in (None, "base"):
            raise UsageError(f"--flavor {req.flavor} picks an nvidia/cuda or ROCm image; "
                             f"--base-image {req.base.ref} is the base",
                             "drop one of them: the base is used as it is")

    target, why = _infer_target(req, gpus, variant)
    entry = targets.get(target)
    platform = _platform(req, target, matrix)
    if variant is not None:
        _check_variant(req, variant, target, why)
    if req.driver is not None and not entry.takes_driver:
        raise UsageError(f"--driver applies to NVIDIA CUDA targets, not --target {target}",
                         "leave out --driver, or build for --target cuda")
    if not entry.container and (req.os or req.flavor):
        raise UsageError("--os and --flavor do not apply to --target mps (a native macOS "
                         "environment, no container)", "leave out --os and --flavor")
    if target == "rocm" and req.flavor == "runtime":
        raise UsageError("--flavor runtime applies to CUDA images; ROCm has base (the plain OS, "
                         "the wheel brings the ROCm userspace) and devel (AMD's dev image)",
                         "use --flavor devel for hipcc, or leave --flavor out")
    if req.forward_compat:
        if target != "cuda":
            raise UsageError(f"--forward-compat applies to CUDA images, not --target {target}",
                             "leave out --forward-compat, or build for --target cuda")
        if driver is None or not gpus:
            raise UsageError("--forward-compat needs the host's --driver and its --gpu: NVIDIA "
                             "supports forward compatibility on some GPUs and driver branches "
                             "only", "e.g. --forward-compat --driver 535.104.05 --gpu H100")
    vendors = {g.vendor for g in gpus}
    if gpus and not entry.gpu_vendor:
        raise UsageError(f"--gpu does not apply to --target {target}",
                         f"leave out --gpu for --target {target}; GPUs take --target cuda "
                         "(NVIDIA) or rocm (AMD)")
    for vendor in sorted(vendors - {entry.gpu_vendor}):
        other = targets.for_vendor(vendor).name
        raise UsageError(f"{_VENDOR[vendor]} GPUs cannot run a {entry.label} image",
                         f"use --target {other} for {_VENDOR[vendor]} GPUs")
    return Parsed(target=target, target_reason=why, cuda=req.cuda, cuda_minor=cuda_minor,
                  rocm=req.rocm, torch=spec, torch_text=req.torch, python=req.python,
                  driver=driver, gpus=gpus, os=os_id, flavor=req.flavor or "base",
                  components=tuple(c for c in COMPONENTS if c in req.components), given=given,
                  cuda_major=cuda_major, notes=tuple(notes), base=req.base,
                  forward_compat=req.forward_compat,
                  variant=variant.tag if variant is not None else None, platform=platform,
                  extensions=_parse_with(req.extensions, matrix),
                  build_extensions=_build_extensions(req, gpus))


def _platform(req: Request, target: str, matrix: Matrix) -> str:
    """--platform (this host's when left out) for a container; ROCm wheels are linux/amd64
    only; a native MPS environment has no container platform."""
    from envbuild.core import platforms

    if not targets.get(target).container:
        if req.platform is not None:
            raise UsageError(f"--platform does not apply to --target {target} (a native macOS "
                             "environment, no container)", "leave out --platform")
        return platforms.AMD64
    platform = platforms.parse(req.platform, matrix) if req.platform is not None \
        else platforms.host()
    if target == "rocm" and platform != platforms.AMD64:
        raise UsageError(f"ROCm has no {platform} wheels or images: PyTorch's ROCm builds and "
                         "AMD's rocm/dev images are linux/amd64 only",
                         "use --platform linux/amd64 for AMD GPUs, or --target cuda / cpu on "
                         f"{platform}")
    return platform


def _variant_of(torch: str | None, matrix: Matrix) -> Variant | None:
    """The variant a `--torch X.Y.Z+TAG` names (any release's row of that tag: its kind and
    version), or None without a local label."""
    tag = split_torch(torch)[1] if torch is not None else None
    if tag is None:
        return None
    rows = {v.tag: v for v in matrix.variants}
    if tag not in rows:
        known = sorted(rows, key=lambda t: (rows[t].kind, version_key(rows[t].version)))
        raise UsageError(f"--torch {torch!r}: {tag[:20]!r} is not a torch wheel variant envbuild "
                         "knows", f"variants: {', '.join(known)}; or give the version alone",
                         _close(tag, known))
    return rows[tag]


def _check_variant(req: Request, v: Variant, target: str, why: str) -> None:
    """`--torch X+TAG` against the options that also choose the wheel: one stack, and for CUDA
    the rule that the wheel's CUDA has the image's major and is not newer than it."""
    version = split_torch(req.torch or "")[0]
    alone = f"--torch {version} alone lets envbuild pick the variant"
    if not targets.get(target).container:  # macOS: PyPI's wheels, which carry no local tag
        raise UsageError(f"--torch {req.torch} names a {v.tag} wheel of the PyTorch index; "
                         f"--target {target} installs PyPI's macOS wheels, which have no variant",
                         f"give --torch {version}")
    if targets.get(target).wheel_kind != v.kind:
        label = targets.of_wheel_kind(v.kind)[0]
        raise UsageError(f"--torch {req.torch} is a {label.label} wheel, which does not fit "
                         f"({why})", f"{alone} for {target}; a {label.label} wheel needs "
                         f"--target {label.name}")
    if v.kind == "cuda" and req.cuda is not None:
        major = major_of(req.cuda)
        too_new = "." in req.cuda and version_key(v.version) > version_key(req.cuda)
        if major_of(v.version) != major or too_new:
            need = (f"a CUDA {major}.x wheel <= {req.cuda}" if "." in req.cuda
                    else f"a CUDA {major}.x wheel")
            raise UsageError(f"--torch {req.torch} is a CUDA {v.version} wheel; --cuda "
                             f"{req.cuda} needs {need}",
                             f"use --cuda {v.version} (or a newer {major_of(v.version)}.x "
                             f"image), or {alone}")
    if v.kind == "rocm" and req.rocm is not None and not (
            v.version == req.rocm or v.version.startswith(req.rocm + ".")):
        raise UsageError(f"--torch {req.torch} is a ROCm {v.version} wheel; --rocm {req.rocm} "
                         "asks for another", f"use --rocm {v.version}, or {alone}")


_VENDOR = {"nvidia": "NVIDIA", "amd": "AMD"}


def _infer_target(req: Request, gpus: tuple[GpuRef, ...],
                  variant: Variant | None = None) -> tuple[str, str]:
    if req.cuda and req.rocm:
        raise UsageError("--cuda and --rocm cannot be combined", "one image has one GPU stack")
    if req.target:
        if req.cuda and req.target != "cuda":
            raise UsageError(f"--cuda needs --target cuda, not --target {req.target}",
                             "leave out --target (--cuda implies cuda), or leave out --cuda")
        if req.rocm and req.target != "rocm":
            raise UsageError(f"--rocm needs --target rocm, not --target {req.target}",
                             "leave out --target (--rocm implies rocm), or leave out --rocm")
        return req.target, f"target {req.target} as requested"
    if req.cuda:
        return "cuda", f"target cuda because --cuda {req.cuda} was given"
    if req.rocm:
        return "rocm", f"target rocm because --rocm {req.rocm} was given"
    if variant is not None and not gpus:
        t = targets.of_wheel_kind(variant.kind)[0].name
        return t, f"target {t} because --torch {req.torch} names a {variant.tag} wheel"
    if gpus and all(g.vendor == "amd" for g in gpus):
        t = targets.for_vendor("amd").name
        return t, f"target {t} because every --gpu is an AMD GPU"
    if gpus:
        t = targets.for_vendor("nvidia").name
        return t, f"target {t} because the --gpu list names NVIDIA GPUs"
    if req.driver:
        return "cuda", "target cuda because --driver (an NVIDIA driver) was given"
    return "cuda", "target cuda by default (give --target cpu|rocm|mps for others)"


def _nearest_versions(want: str, known: list[str]) -> list[str]:
    wk = version_key(want)
    lower = [k for k in known if version_key(k) < wk]
    higher = [k for k in known if version_key(k) > wk]
    return ([lower[-1]] if lower else []) + ([higher[0]] if higher else [])


def known_drivers(matrix: Matrix) -> list[str]:
    """Every Linux driver version the matrix names (GA, latest, compatibility floors)."""
    found = {d for r in matrix.cuda for d in (r.ga_driver_linux, r.driver_linux) if d}
    found |= {c.min_driver_linux for c in matrix.cuda_compat if c.min_driver_linux}
    return sorted(found, key=version_key)


def _driver_branch(branch: str, matrix: Matrix) -> tuple[str, str]:
    """`--driver 470`: the oldest 470.x the matrix knows (what the branch surely is, at least)."""
    same = [d for d in known_drivers(matrix) if str(major_of(d)) == branch]
    if same:
        return same[0], (f"driver {branch}: a branch, read as {same[0]}, the oldest {branch}.x "
                         "driver envbuild knows (give the full version nvidia-smi prints for an "
                         "exact answer)")
    return branch, (f"driver {branch}: a branch; envbuild knows no {branch}.x release, so the "
                    "branch number alone is compared")


def _close_versions(want: str, known: list[str]) -> list[str]:
    """Likely typos: `12.22` -> 12.2 (a digit too many), `12.21` -> 12.2 (X.Y.Z without a dot)."""
    import difflib

    prefix = [k for k in known if want.startswith(k) and len(want) == len(k) + 1]
    close = difflib.get_close_matches(want, known, n=2, cutoff=0.8)
    return list(dict.fromkeys(prefix + close))


def _parse_with(values: tuple[str, ...], m: Matrix) -> tuple[Wanted, ...]:
    """--with values; the extension rules are imported only for a request that names one
    (start-up)."""
    if not values:
        return ()
    from envbuild.core.extensions import parse_with

    return parse_with(values, m)


def _build_extensions(req: Request, gpus: tuple[GpuRef, ...]) -> bool:
    """--build-extensions: a source build compiles for exactly the --gpu archs, so it needs
    them (and a --with to build)."""
    if not req.build_extensions:
        return False
    if not req.extensions:
        raise UsageError("--build-extensions compiles a --with extension that has no prebuilt "
                         "wheel; none is named", "add --with NAME (e.g. --with flash-attn), or "
                         "leave out --build-extensions")
    if not any(g.vendor == "nvidia" and g.cc for g in gpus):
        raise UsageError("--build-extensions compiles for exactly the GPUs it is for; none is "
                         "named", "add --gpu (e.g. --gpu H100 --gpu A100)")
    return True


def make_argv(r: Request) -> list[str]:
    """The `envbuild make` command line of a request: every Request field make takes, so the
    command printed asks for the same spec (`envbuild resolve` takes the same options but
    --base-image, which make inspects). --target only when the request names one, the
    companions left out as --without, each --with as typed. The one builder of such commands
    (a fleet plan's images, run's nearest variant, doctor's recommendation)."""
    out = ["envbuild", "make"]
    for flag, value in (("--target", r.target), ("--cuda", r.cuda), ("--rocm", r.rocm),
                        ("--torch", r.torch), ("--python", r.python), ("--os", r.os),
                        ("--flavor", r.flavor), ("--driver", r.driver)):
        if value:
            out += [flag, value]
    for g in r.gpus:
        out += ["--gpu", g]
    if r.platform:
        out += ["--platform", r.platform]
    out += [x for c in COMPONENTS if c not in r.components for x in ("--without", c)]
    out += [x for e in r.extensions for x in ("--with", e)]
    if r.build_extensions:
        out.append("--build-extensions")
    if r.forward_compat:
        out.append("--forward-compat")
    if r.base is not None:
        out += ["--base-image", r.base.ref]
    return out
