"""CUDA extensions on top of torch (`--with NAME[==VER]`): which release of each has a prebuilt
wheel for a candidate spec's torch, CUDA, Python, platform and GPUs (matrix/extensions.toml).

Pure. The resolver calls `fit` on each candidate (newest torch first), so the torch it settles on
is the newest one every requested extension has a wheel for; a miss (NoWheel) rejects the
candidate saying which extension has nothing for which torch, and the trace of the chosen spec
carries those lines.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from envbuild.common.echo import shown
from envbuild.common.errors import UsageError
from envbuild.common.record import record
from envbuild.common.versions import major_of, minor_of, version_key
from envbuild.validator import rules

if TYPE_CHECKING:
    from envbuild.core.spec import Spec
    from envbuild.matrix import ExtensionLibrary, ExtensionRelease, Matrix

class GpuRef(Protocol):
    """A requested GPU as this module reads it (request.GpuRef, which imports this module)."""

    @property
    def label(self) -> str: ...
    @property
    def vendor(self) -> str: ...
    @property
    def cc(self) -> str: ...


MAX_WITH = 16  # --with options in one request
_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,62}[A-Za-z0-9])?$", re.ASCII)
_OPS = re.compile(r"[=<>!~]")


class NoWheel(Exception):
    """No release of a wanted extension fits a candidate spec (the message says why)."""


@record
class Wanted:
    """One `--with`: an extension by its matrix name, and which of its versions."""

    name: str
    versions: str = ""  # a PEP 440 specifier over its versions; "" = any

    @property
    def text(self) -> str:
        return self.name + self.versions


@record
class Chosen:
    """The release of an extension a spec installs, and how."""

    name: str
    version: str
    where: str  # pypi | index:<variant> | github-release
    install: str  # the pip requirement: NAME==VERSION, or the asset's URL
    verified: bool
    module: str = ""  # what `import` names (the validator's ext.load)
    cuda: str = ""  # the CUDA library (libs) or asset tag (asset) that fits
    archs_known: bool = True  # False: the project publishes no arch list to judge GPUs by
    note: str = ""  # a trace line's tail: what was taken on the project's word

    def to_json(self) -> dict[str, str]:
        out = {"name": self.name, "version": self.version, "where": self.where,
               "install": self.install, "module": self.module}
        if self.cuda:
            out["cuda"] = self.cuda
        if not self.verified:
            out["verified"] = "false"
        return out


def normalize(name: str) -> str:
    """PEP 503: flash_attn, Flash-Attn and flash.attn are one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_with(values: Sequence[str], m: Matrix) -> tuple[Wanted, ...]:
    """`--with` values, checked for form: a known extension, a version specifier that parses,
    each extension once. UsageError (exit 2) otherwise, with the known names."""
    if not values:
        return ()  # start-up: packaging is imported only for a request with extensions
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    known = [e.name for e in m.extensions]
    if len(values) > MAX_WITH:
        raise UsageError(f"--with is given {len(values)} times; at most {MAX_WITH}",
                         "name each extension once")
    out: list[Wanted] = []
    for value in values:
        text = value.strip()
        if any(c.isspace() or not c.isprintable() for c in text):
            raise UsageError(f"--with {shown(value)}: spaces and control characters are not "
                             "part of NAME==VERSION", f"e.g. --with {known[0]}==VERSION")
        cut = _OPS.search(text)
        name, versions = (text[:cut.start()], text[cut.start():]) if cut else (text, "")
        name = name.strip()
        if not _NAME.match(name):
            raise UsageError(f"--with {shown(value)} is not NAME or NAME==VERSION",
                             f"e.g. --with xformers or --with {known[0]}==VERSION; known: "
                             f"{', '.join(known)}")
        key = normalize(name)
        if key not in known:
            import difflib

            close = difflib.get_close_matches(key, known, n=3, cutoff=0.5)
            raise UsageError(f"--with {shown(name)}: envbuild has no facts about that extension",
                             f"known: {', '.join(known)} (matrix/extensions.toml)",
                             [f"--with {c}" for c in close])
        if versions:
            try:
                SpecifierSet(versions)
            except InvalidSpecifier:
                raise UsageError(f"--with {shown(value)}: {shown(versions)} is not a version "
                                 "specifier", f"e.g. --with {key}==VERSION or --with "
                                 f"'{key}>=VERSION'") from None
        if any(w.name == key for w in out):
            raise UsageError(f"--with {key} is given twice", "name each extension once")
        out.append(Wanted(key, versions.replace(" ", "")))
    return tuple(out)


def torch_abi(m: Matrix, torch: str, variant: str) -> str:
    """TRUE or FALSE: whether a torch wheel is built with the C++11 ABI (torch.toml [meta]
    cxx11_abi, by first release, and cxx11_abi_variants, the exceptions)."""
    meta = m.meta.get("torch", {})
    release = minor_of(torch)
    for rel, tag, value in meta.get("cxx11_abi_variants", []):
        if (str(rel), str(tag)) == (release, variant):
            return str(value)
    fitting = [str(v) for r, v in meta.get("cxx11_abi", [])
               if version_key(str(r)) <= version_key(release)]
    return fitting[-1] if fitting else "FALSE"


def _python_ok(r: ExtensionRelease, python: str) -> bool:
    if r.python:
        return python in r.python
    return not r.python_min or version_key(python) >= version_key(r.python_min)


def _python_text(r: ExtensionRelease) -> str:
    if r.python:
        return f"Python {r.python[0]}-{r.python[-1]}" if len(r.python) > 1 else \
            f"Python {r.python[0]}"
    return f"Python >= {r.python_min}" if r.python_min else "any Python"


def _torch_ok(r: ExtensionRelease, torch: str) -> bool:
    from packaging.specifiers import SpecifierSet

    if r.torch_minors:
        return minor_of(torch) in r.torch_minors
    return SpecifierSet(r.torch).contains(torch, prereleases=True)


def _torch_text(r: ExtensionRelease) -> str:
    if r.torch_minors:
        first, last = r.torch_minors[0], r.torch_minors[-1]
        return f"torch {first}-{last}" if len(r.torch_minors) > 1 else f"torch {first}"
    return f"torch{r.torch}" if r.torch else "any torch"


def _arch_miss(archs: Sequence[str], ptx: Sequence[str], gpus: Sequence[GpuRef]) -> str:
    """The first GPU the arch list has no code for, as a sentence ("" when all are covered or
    no list is published)."""
    if not archs and not ptx:
        return ""
    names = [*archs, *ptx]
    for g in gpus:
        if g.vendor == "nvidia" and g.cc and rules.arch_covers(names, g.cc)["via"] is None:
            return f"no kernels for {g.label} ({rules.arch_name(g.cc)}); built for " \
                   f"{' '.join(names)}"
    return ""


def _cuda_of(variant: str) -> str:
    return rules.cuda_of_tag(variant)


def _built(r: ExtensionRelease, spec: Spec) -> tuple[str, str]:
    """(miss, cuda): a wheel compiled against one torch variant runs on a torch of the same CUDA
    major whose CUDA is not older than the one it was built with."""
    if r.where.startswith("index:"):
        if spec.variant != r.where.removeprefix("index:"):
            return f"its {r.where.removeprefix('index:')} build is on the PyTorch index, the " \
                   f"spec's torch is {spec.variant}", ""
        return "", ""
    built = _cuda_of(r.variant)
    have = spec.torch_cuda or ""
    pinned = r.torch.startswith("==") and r.where == "pypi"
    if not built or not have or major_of(built) != major_of(have) or \
            (version_key(built) > version_key(have) and not pinned):
        return f"its wheel is built against a CUDA {built} torch ({r.variant}), the spec's " \
               f"torch is {spec.variant}", ""
    if version_key(built) > version_key(have):  # the pair the project itself puts on PyPI
        return "", f"built with CUDA {built} and published on PyPI beside the torch it pins " \
                   f"(CUDA {have}): the pair the project ships"
    return "", ""


def _libs(r: ExtensionRelease, libs: list[ExtensionLibrary], spec: Spec
          ) -> tuple[str, ExtensionLibrary | None]:
    """A wheel with a native library per CUDA version: torch's CUDA exactly, or (nearest-major)
    the nearest one of the same major, newer first down."""
    have = spec.torch_cuda or ""
    exact = [x for x in libs if x.cuda == have]
    if exact:
        return "", exact[0]
    if r.cuda_match == "nearest-major":
        same = [x for x in libs if major_of(x.cuda) == major_of(have)]
        older = [x for x in same if version_key(x.cuda) <= version_key(have)]
        pick = max(older, key=lambda x: version_key(x.cuda)) if older else \
            min(same, key=lambda x: version_key(x.cuda)) if same else None
        if pick is not None:
            return "", pick
    cudas = ", ".join(x.cuda for x in libs)
    rule = "of its major" if r.cuda_match == "nearest-major" else "exactly"
    return f"it ships libraries for CUDA {cudas}, none {rule} torch's {have}", None


def _excluded(r: ExtensionRelease, values: dict[str, str]) -> bool:
    for rule in r.exclude:
        conds = [c.strip().partition("=") for c in rule.split("&")]
        if all(values.get(k.strip()) == v.strip() for k, _, v in conds):
            return True
    return False


def _asset(r: ExtensionRelease, m: Matrix, spec: Spec) -> tuple[str, str, str]:
    """(miss, cu tag, url): a release asset named after torch's CUDA major, torch minor, C++
    ABI, CPython and machine, where the release's build matrix has that combination."""
    have = spec.torch_cuda or ""
    tags = [t for t in r.cuda if t[:2] == str(major_of(have))]  # 12, or 122 / 123 / 118
    if not tags:
        return f"its assets are for CUDA {', '.join(r.cuda)}, the spec's torch is CUDA " \
               f"{have}", "", ""
    tag = tags[-1]
    abi = torch_abi(m, spec.torch, spec.variant)
    if abi not in r.abi:
        return f"its assets are built for cxx11abi {', '.join(r.abi)}, torch {spec.torch} " \
               f"{spec.variant} has cxx11abi {abi}", "", ""
    py = spec.python.replace(".", "")
    values = {"torch": minor_of(spec.torch), "python": spec.python, "cuda": tag, "abi": abi,
              "platform": spec.platform or ""}
    if _excluded(r, values):
        return f"its build matrix leaves out torch {values['torch']} with Python " \
               f"{spec.python}", "", ""
    machine = "aarch64" if spec.platform == "linux/arm64" else "x86_64"
    name = r.asset.format(version=r.version, cuda_major=tag, cuda_minor="", torch_mm=minor_of(
        spec.torch), abi=abi, py=py, arch=machine)
    base = str(m.meta.get("extensions", {}).get("asset_urls", {}).get(r.extension, ""))
    return "", tag, base.format(tag=r.tag, asset=name) if base else name


def _one(m: Matrix, spec: Spec, gpus: Sequence[GpuRef], w: Wanted, verified_only: bool
         ) -> tuple[Chosen | None, str]:
    """The newest release of w that fits spec, or None and why the newest candidate does not."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    ext = m.extension(w.name)
    assert ext is not None  # parse_with checked it
    wanted = SpecifierSet(w.versions)
    rows = [r for r in m.extension_releases if r.extension == w.name and
            r.platform == (spec.platform or "linux/amd64") and
            wanted.contains(Version(r.version).public, prereleases=True) and
            (r.verified or not verified_only)]
    if not rows:
        plats = sorted({r.platform for r in m.extension_releases if r.extension == w.name})
        if spec.platform not in plats:
            return None, f"{w.name} publishes no {spec.platform} wheels (only " \
                         f"{', '.join(plats)})"
        return None, f"no {w.name} release matches {w.versions}"
    rows.sort(key=lambda r: (Version(r.version), r.where == "pypi"), reverse=True)
    first_miss = ""
    for r in rows:
        miss, cuda, install, note = _check(m, ext.kind, r, spec, gpus)
        if not miss:
            libs = [x for x in m.extension_libraries if (x.extension, x.version, x.platform,
                                                          x.cuda) == (r.extension, r.version,
                                                                      r.platform, cuda)]
            known = bool(r.archs or r.ptx or any(x.archs for x in libs))
            return Chosen(w.name, Version(r.version).public, r.where, install, r.verified,
                          ext.import_name, cuda, known, note), ""
        first_miss = first_miss or f"{w.name} {r.version}: {miss}"
    return None, f"{w.text} publishes no prebuilt wheel for torch {spec.torch} {spec.variant} " \
                 f"with Python {spec.python} (newest, {first_miss})"


def _check(m: Matrix, kind: str, r: ExtensionRelease, spec: Spec, gpus: Sequence[GpuRef]
           ) -> tuple[str, str, str, str]:
    """(why it does not fit or "", the CUDA library or tag used, the pip requirement, a note)."""
    if spec.target != "cuda":
        return f"a CUDA extension, the spec's target is {spec.target}", "", "", ""
    if kind == "build":
        return (f"it has no prebuilt torch extension for torch {spec.torch}: its torch part "
                "compiles at install"), "", "", ""
    if not _torch_ok(r, spec.torch):
        return f"it needs {_torch_text(r)}", "", "", ""
    if not _python_ok(r, spec.python):
        return f"it has wheels for {_python_text(r)}, the spec's is {spec.python}", "", "", ""
    install = f"{r.extension}=={r.version}"
    cuda = ""
    archs, ptx = r.archs, r.ptx
    note = ""
    if kind == "built":
        miss, note = _built(r, spec)
    elif kind == "libs":
        libs = [x for x in m.extension_libraries if (x.extension, x.version, x.platform)
                == (r.extension, r.version, r.platform)]
        miss, lib = _libs(r, libs, spec)
        if lib is not None:
            cuda, archs, ptx = lib.cuda, lib.archs, lib.ptx
    else:
        miss, cuda, install = _asset(r, m, spec)
    if miss:
        return miss, "", "", ""
    arch = _arch_miss(archs, ptx, gpus)
    return (arch, "", "", "") if arch else ("", cuda, install, note)


def fit(m: Matrix, spec: Spec, gpus: Sequence[GpuRef], wanted: Sequence[Wanted], *,
        verified_only: bool = False, build: bool = False
        ) -> tuple[tuple[Chosen, ...], list[str]]:
    """The release of each wanted extension for this spec, with a trace line each; raises
    NoWheel naming the first extension with no fitting wheel. verified_only: only the rows a
    primary source confirmed; build (--build-extensions): an extension with no fitting wheel is
    compiled from its PyPI sdist where the matrix says how."""
    chosen: list[Chosen] = []
    lines: list[str] = []
    for w in wanted:
        c, why = _one(m, spec, gpus, w, verified_only)
        if c is None and build:
            c, line = _source(m, spec, gpus, w, why)
            chosen.append(c)
            lines.append(line)
            continue
        if c is None:
            raise NoWheel(why)
        chosen.append(c)
        how = {"pypi": "from PyPI", "github-release": "a GitHub release asset"}.get(
            c.where, f"from the PyTorch index ({c.where.removeprefix('index:')})")
        lib = f", its CUDA {c.cuda} library" if c.cuda and c.where == "pypi" else ""
        lines.append(f"{c.name} {c.version}: a prebuilt wheel for torch {spec.torch} "
                     f"{spec.variant}, Python {spec.python}, {spec.platform or 'linux/amd64'} "
                     f"({how}{lib}); torch stays pinned while it installs"
                     + (f"; {c.note}" if c.note else ""))
        if gpus and not c.archs_known:
            lines.append(f"{c.name} {c.version} publishes no arch list: whether it has kernels "
                         f"for {', '.join(g.label for g in gpus)} was not checked")
    return tuple(chosen), lines


def _sdist_takes(r: ExtensionRelease, torch: str) -> bool:
    """Whether the sdist of r's version builds against this torch: a wheel's exact pin (==) and
    an asset's torch minors say which torch the project compiled its wheels with, not what its
    source takes; a floor (xformers 0.0.35: torch>=2.10) holds for the source too."""
    if r.torch_minors or r.torch.startswith("=="):
        return True
    return _torch_ok(r, torch)


def _source(m: Matrix, spec: Spec, gpus: Sequence[GpuRef], w: Wanted, why: str
            ) -> tuple[Chosen, str]:
    """--build-extensions: the newest version of w whose torch requirement holds, compiled from
    PyPI's sdist in the builder stage against the spec's torch, for the --gpu archs (NoWheel:
    the matrix plans no build of it, or the build cannot run)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    ext = m.extension(w.name)
    assert ext is not None  # parse_with checked it
    if not ext.sdist:
        raise NoWheel(f"{why}; and envbuild plans no source build of {w.name} "
                      f"({ext.kind} extension: see `envbuild matrix show extensions`)")
    if spec.target != "cuda" or major_of(spec.torch_cuda or "0") < 13:
        raise NoWheel(f"{why}; and a source build needs nvcc, which PyPI has for CUDA 13 only "
                      f"(the spec's torch is {spec.variant})")
    if not any(g.vendor == "nvidia" and g.cc for g in gpus):  # as the request's parse says
        raise NoWheel(f"{why}; and a source build compiles for exactly the --gpu archs: none "
                      "is named")
    old = [g for g in gpus if g.vendor == "nvidia" and g.cc and ext.build_min_cc and
           version_key(g.cc) < version_key(ext.build_min_cc)]
    if old:
        raise NoWheel(f"{why}; and a source build of {w.name} has kernels for "
                      f"{rules.arch_name(ext.build_min_cc)} and newer only, not {old[0].label} "
                      f"({rules.arch_name(old[0].cc)})")
    wanted = SpecifierSet(w.versions)
    versions = sorted({Version(r.version).public for r in m.extension_releases
                       if r.extension == w.name and r.sdist and _sdist_takes(r, spec.torch) and
                       wanted.contains(Version(r.version).public, prereleases=True)},
                      key=Version, reverse=True)
    if not versions:
        asked = [r for r in m.extension_releases if r.extension == w.name and
                 wanted.contains(Version(r.version).public, prereleases=True)]
        if asked and not any(r.sdist for r in asked):
            raise NoWheel(f"{why}; and PyPI has no sdist of {w.text} to compile")
        raise NoWheel(f"{why}; and no {w.text} release takes torch {spec.torch}")
    archs = " ".join(rules.arch_name(cc) for cc in sorted(
        {g.cc for g in gpus if g.vendor == "nvidia" and g.cc}, key=version_key))
    c = Chosen(w.name, versions[0], "sdist", f"{ext.sdist}=={versions[0]}", ext.verified,
               ext.import_name)
    return c, (f"{w.name} {versions[0]}: {why}; compiled from its PyPI "
               f"sdist in the builder stage against torch {spec.torch} for {archs} "
               "(--build-extensions); only the wheel reaches the image")
