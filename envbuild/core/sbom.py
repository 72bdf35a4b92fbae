"""An image's SBOM: the facts its probe collected (envbuild/engine/sbom_probe.py) checked and
turned into a CycloneDX 1.6 JSON document through CycloneDX's own model and serializer.

Pure: facts in, JSON text out (the bytes written, so a digest of them is the file's). The facts
are untrusted (they come out of an image): `facts()` keeps only well-formed entries, each string
capped, so no name, version or licence can make an invalid BOM. cyclonedx and packageurl load
inside the functions that need them (start-up)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from envbuild.common.record import record

if TYPE_CHECKING:
    from cyclonedx.model.component import Component
    from cyclonedx.model.license import License

SPEC_VERSION = "1.6"
MAX_TEXT = 1024  # one name, version, URL or licence of the facts
MAX_VERSION = 1024  # CycloneDX 1.6: a component's version is at most 1024 characters
MAX_ENTRIES = 20000  # packages of one kind
# Properties of the envbuild namespace (CycloneDX property names: `namespace:name`)
CUDA_COMPONENT = "envbuild:cuda-component"
TORCH_CUDA = "envbuild:torch-cuda"
TORCH_HIP = "envbuild:torch-hip"
# PyPI distributions of NVIDIA's CUDA: the nvidia-* component wheels (cuBLAS, cuDNN, NCCL, ...)
# and the cuda-* ones (cuda-toolkit, cuda-bindings)
CUDA_WHEEL_PREFIXES = ("nvidia-", "cuda-")
_SHA256 = re.compile(r"[0-9a-f]{64}")
DIRECT_KINDS = ("archive", "vcs", "dir")


@record
class OsPackage:
    manager: str  # deb | rpm
    name: str
    version: str
    arch: str = ""
    epoch: str = ""
    release: str = ""
    license: str = ""  # rpm records one; dpkg's database does not

    @property
    def full_version(self) -> str:
        """As the package manager shows it: deb VERSION; rpm VERSION-RELEASE."""
        return f"{self.version}-{self.release}" if self.release else self.version


@record
class PyDist:
    name: str
    version: str
    license_expression: str = ""
    license: str = ""
    classifiers: tuple[str, ...] = ()  # License :: classifiers, prefix removed
    # installed from a direct reference (PEP 610), not an index: archive (a wheel by path: a
    # compiled extension's), vcs, dir; '' otherwise
    direct: str = ""

    @property
    def key(self) -> str:
        return canonical(self.name)


@record
class Wheel:
    """One distribution a pip install of the Dockerfile reported (pip's installation report)."""

    step: str  # torch | ext | extensions | team | user | ...
    name: str
    version: str
    url: str
    sha256: str  # '' when pip reported none (a VCS or directory install)
    requested: bool = False

    @property
    def file(self) -> str:
        """The wheel's file name (the URL's last part, decoded: torch-2.13.0+cpu-...)."""
        from urllib.parse import unquote

        return unquote(self.url.rstrip("/").rsplit("/", 1)[-1])


@record
class Interpreter:
    implementation: str
    version: str
    executable: str
    owner: str = ""  # the OS package that installed it ('' = none: a standalone CPython)
    owner_manager: str = ""  # deb | rpm
    owner_arch: str = ""  # its architecture ('' = the one package of that name)


@record
class ImageFacts:
    os_id: str
    os_version: str
    os_name: str
    packages: tuple[OsPackage, ...]
    interpreter: Interpreter | None
    dists: tuple[PyDist, ...]
    torch: Mapping[str, str]  # torch.version's cuda, hip, git_version (absent: None there)
    wheels: tuple[Wheel, ...]
    machine: str = ""
    notes: tuple[str, ...] = ()  # what could not be read (no package database, a pip report)

    def installed_wheels(self) -> list[Wheel]:
        """The reported wheel of each distribution installed now (same name and version; the
        last step that installed it wins), in the distributions' order."""
        last: dict[tuple[str, str], Wheel] = {}
        for w in self.wheels:
            last[(canonical(w.name), w.version)] = w
        return [last[k] for k in ((d.key, d.version) for d in self.dists) if k in last]


def canonical(name: str) -> str:
    """A Python distribution's normalized name (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def is_cuda_wheel(name: str) -> bool:
    return canonical(name).startswith(CUDA_WHEEL_PREFIXES)


# -- the probe's output, checked ---------------------------------------------------------------
def _text(value: Any, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str):
        return ""
    # no control characters but tab (a name is one line); lone surrogates made visible
    clean = "".join(c if c == "\t" or (c >= " " and c != "\x7f") else " " for c in value[:limit])
    return clean.encode("utf-8", "replace").decode("utf-8")


def _rows(value: Any) -> list[Mapping[str, Any]]:
    if not isinstance(value, list):
        return []
    return [r for r in value[:MAX_ENTRIES] if isinstance(r, dict)]


def _table(parent: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = parent.get(key)
    return value if isinstance(value, dict) else {}


def _digest(value: str) -> bool:
    """sha256:<64 hex>, the only digest a BOM here names."""
    return value.startswith("sha256:") and bool(_SHA256.fullmatch(value[7:]))


def _sha256(value: Any) -> str:
    text = value.lower() if isinstance(value, str) else ""
    return text if _SHA256.fullmatch(text) else ""


def facts(raw: Any) -> ImageFacts:
    """The probe's JSON output as ImageFacts: malformed entries dropped, strings capped,
    duplicates (the same package twice) kept once."""
    data: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    osr = _table(data, "os_release")
    notes: list[str] = []
    packages: list[OsPackage] = []
    seen: set[tuple[str, str, str]] = set()
    for manager, field in (("deb", "dpkg"), ("rpm", "rpm")):
        for r in _rows(data.get(field)):
            p = OsPackage(manager, _text(r.get("name")), _text(r.get("version")),
                          _text(r.get("arch")), _text(r.get("epoch")), _text(r.get("release")),
                          _text(r.get("license")))
            key = (manager, p.name.lower(), p.arch)
            if p.name.strip() and key not in seen:
                seen.add(key)
                packages.append(p)
    if not isinstance(data.get("dpkg"), list) and not isinstance(data.get("rpm"), list):
        notes.append("no OS package database (dpkg or rpm) found: OS packages not listed")
    if _text(data.get("rpm_error")):
        notes.append(f"rpm -qa failed: {_text(data.get('rpm_error'), 200)}")
    dists: list[PyDist] = []
    names: set[str] = set()
    for r in _rows(data.get("dists")):
        cls = r.get("classifiers")
        kind = _text(r.get("direct"), 16)
        d = PyDist(_text(r.get("name")), _text(r.get("version")),
                   _text(r.get("license_expression")), _text(r.get("license")),
                   tuple(_text(c) for c in (cls if isinstance(cls, list) else [])[:20]
                         if _text(c)), kind if kind in DIRECT_KINDS else "")
        if d.name.strip() and d.key not in names:
            names.add(d.key)
            dists.append(d)
    wheels: list[Wheel] = []
    for rep in _rows(data.get("pip_reports")):
        step = _text(rep.get("step"), 64)
        if rep.get("error"):
            notes.append(f"the pip report of step {step} could not be read")
        for r in _rows(rep.get("install")):
            w = Wheel(step, _text(r.get("name")), _text(r.get("version")),
                      _text(r.get("url"), 2048), _sha256(r.get("sha256")),
                      r.get("requested") is True)
            if w.name.strip():
                wheels.append(w)
    py = _table(data, "python")
    interp = None
    if _text(py.get("version")):
        own = _table(py, "owner")
        manager = {"dpkg": "deb", "rpm": "rpm"}.get(_text(own.get("manager")), "")
        interp = Interpreter(_text(py.get("implementation")) or "CPython",
                             _text(py.get("version")), _text(py.get("executable")),
                             _text(own.get("name")) if manager else "", manager,
                             _text(own.get("arch")) if manager else "")
    torch = _table(data, "torch")
    return ImageFacts(
        os_id=_text(osr.get("ID"), 64), os_version=_text(osr.get("VERSION_ID"), 64),
        os_name=_text(osr.get("PRETTY_NAME"), 256), packages=tuple(packages),
        interpreter=interp, dists=tuple(dists),
        torch={k: _text(torch.get(k), 128) for k in ("cuda", "hip", "git_version")
               if _text(torch.get(k), 128)},
        wheels=tuple(wheels), machine=_text(data.get("machine"), 64), notes=tuple(notes))


# -- the BOM -----------------------------------------------------------------------------------
@record
class Described:
    """The image the BOM describes and the base image it was built FROM."""

    name: str  # the image's reference (tag)
    image_id: str  # sha256:... (the local image id)
    spec_hash: str
    base_ref: str
    base_digest: str  # sha256:... ('' when unknown)
    base_digest_kind: str  # pinned_in_ref | repo_digest | registry | image_id | unknown
    tool_version: str  # envbuild's


def _purl(type_: str, name: str, version: str, namespace: str = "",
          qualifiers: Mapping[str, str] | None = None) -> Any:
    from packageurl import PackageURL

    try:
        purl = PackageURL(type=type_, namespace=namespace or None, name=name,
                          version=version or None,
                          qualifiers={k: v for k, v in (qualifiers or {}).items() if v} or None)
        purl.to_string()  # some names pass the constructor and fail here (' ')
    except (ValueError, TypeError):  # a name packageurl refuses: no purl for the component
        return None
    return purl


def pypi_purl(name: str, version: str) -> str:
    """pkg:pypi/NAME@VERSION of a distribution (the name normalized, as the purl spec says)."""
    purl = _purl("pypi", canonical(name), version)
    return str(purl) if purl is not None else f"pkg:pypi/{canonical(name)}"


def _hashes(sha256_hex: str) -> list[Any]:
    from cyclonedx.model import HashAlgorithm, HashType

    digest = _sha256(sha256_hex.removeprefix("sha256:"))
    return [HashType(alg=HashAlgorithm.SHA_256, content=digest)] if digest else []


def _version(value: str) -> str | None:
    return value[:MAX_VERSION] or None


def _props(items: Iterable[tuple[str, str]]) -> list[Any]:
    from cyclonedx.model import Property

    return [Property(name=k, value=v) for k, v in items if v]


def _licenses(values: Iterable[str], *, names_only: bool = False) -> list[License]:
    """One SPDX expression alone, else SPDX ids and names (CycloneDX allows no mix)."""
    from cyclonedx.contrib.license.factories import LicenseFactory
    from cyclonedx.model.license import DisjunctiveLicense, LicenseExpression

    factory = LicenseFactory()
    out: list[License] = []
    for v in values:
        v = v.strip()
        if not v:
            continue
        lic = DisjunctiveLicense(name=v) if names_only else factory.make_from_string(v)
        if isinstance(lic, LicenseExpression):
            return [lic]
        out.append(lic)
    return out


def dist_licenses(d: PyDist) -> list[License]:
    """License-Expression; else a one-line License field; else the License :: classifiers
    (their last part, as a name); else none."""
    if d.license_expression.strip():
        return _licenses([d.license_expression])
    text = d.license.strip()
    if text and text.upper() != "UNKNOWN" and "\n" not in text and len(text) <= 200:
        return _licenses([text])
    return _licenses([c.rsplit(" :: ", 1)[-1] for c in d.classifiers], names_only=True)


class _Refs:
    """Unique, readable bom-refs (a hostile duplicate gets a suffix)."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def __call__(self, want: str) -> str:
        ref, n = want, 1
        while ref in self.used:
            n += 1
            ref = f"{want}#{n}"
        self.used.add(ref)
        return ref


def _base(d: Described, ref: _Refs) -> Component:
    from cyclonedx.model.component import Component, ComponentType

    from envbuild.core import refs

    qualifiers: dict[str, str] = {}
    name = d.base_ref
    try:
        parsed = refs.parse(d.base_ref)
        name = parsed.familiar
        qualifiers = {"repository_url": parsed.name, "tag": parsed.tag}
    except refs.RefError:
        pass
    digest = d.base_digest if _digest(d.base_digest) else ""
    registry_digest = d.base_digest_kind in ("pinned_in_ref", "repo_digest", "registry")
    purl = _purl("oci", name.rsplit("/", 1)[-1], digest, qualifiers=qualifiers) \
        if registry_digest and digest else None
    return Component(type=ComponentType.CONTAINER, name=_text(name), version=_version(digest),
                     bom_ref=ref("base-image"), purl=purl, hashes=_hashes(digest),
                     description="the base image (FROM)",
                     properties=_props([("envbuild:reference", _text(d.base_ref)),
                                        ("envbuild:digest-kind", _text(d.base_digest_kind))]))


def _os_package(p: OsPackage, f: ImageFacts, ref: _Refs) -> Component:
    from cyclonedx.model.component import Component, ComponentType

    distro = f"{f.os_id}-{f.os_version}" if f.os_id and f.os_version else ""
    if p.manager == "deb":
        purl = _purl("deb", p.name, p.version, f.os_id,
                     {"arch": p.arch, "distro": distro})
    else:
        purl = _purl("rpm", p.name, p.full_version, f.os_id,
                     {"arch": p.arch, "epoch": p.epoch, "distro": distro})
    return Component(type=ComponentType.LIBRARY, name=p.name, version=_version(p.full_version),
                     bom_ref=ref(str(purl) if purl else f"{p.manager}:{p.name}"), purl=purl,
                     licenses=_licenses([p.license]) if p.license else None,
                     properties=_props([("envbuild:package-manager",
                                         "dpkg" if p.manager == "deb" else "rpm")]))


def _dist(d: PyDist, wheel: Wheel | None, f: ImageFacts, ref: _Refs) -> Component:
    from cyclonedx.model.component import Component, ComponentType

    purl = _purl("pypi", d.key, d.version)
    props = [(CUDA_COMPONENT, "true" if is_cuda_wheel(d.name) else "")]
    if d.key == "torch":
        props += [(TORCH_CUDA, f.torch.get("cuda", "")), (TORCH_HIP, f.torch.get("hip", "")),
                  ("envbuild:torch-git-version", f.torch.get("git_version", ""))]
    if wheel is not None:
        props += [("envbuild:wheel", wheel.file), ("envbuild:pip-step", wheel.step)]
    return Component(type=ComponentType.LIBRARY, name=d.name, version=_version(d.version),
                     bom_ref=ref(str(purl) if purl else f"pypi:{d.key}"), purl=purl,
                     licenses=dist_licenses(d), properties=_props(props),
                     hashes=_hashes(wheel.sha256) if wheel is not None else None)


def _owner(packages: Mapping[tuple[str, str, str], Component],
           i: Interpreter) -> Component | None:
    """The interpreter's OS package: by name and architecture; a probe that named no
    architecture (dpkg's list file of a package that is not Multi-Arch: same) matches the one
    package of that name, and none when several have it (no guess)."""
    if not i.owner_manager or not i.owner:
        return None
    if i.owner_arch:
        return packages.get((i.owner_manager, i.owner, i.owner_arch))
    found = [c for (m, n, _), c in packages.items() if (m, n) == (i.owner_manager, i.owner)]
    return found[0] if len(found) == 1 else None


def bom_json(f: ImageFacts, d: Described, *, timestamp: datetime, serial: str) -> str:
    """The CycloneDX 1.6 JSON text of the image (pure: `timestamp` and `serial`, a UUID, are
    the caller's). metadata.component is the image; its components: the base image by digest,
    the OS, its packages, the interpreter and the venv's distributions."""
    from uuid import UUID

    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6

    ref = _Refs()
    name = _text(d.name)
    tag_name, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else \
        (name, "", "")
    image_id = d.image_id if _digest(d.image_id) else ""
    image = Component(type=ComponentType.CONTAINER, name=tag_name or name, version=_version(tag),
                      bom_ref=ref("image"), hashes=_hashes(image_id),
                      properties=_props([("envbuild:image-id", image_id),
                                         ("envbuild:spec-hash", _text(d.spec_hash)),
                                         ("envbuild:platform-machine", f.machine)]))
    tool = Component(type=ComponentType.APPLICATION, name="envbuild",
                     version=_version(_text(d.tool_version)), bom_ref=ref("envbuild"))
    bom = Bom(serial_number=UUID(serial), metadata=BomMetaData(
        timestamp=timestamp, component=image,
        properties=_props([(f"envbuild:note:{i + 1}", n) for i, n in enumerate(f.notes)])))
    bom.metadata.tools.components.add(tool)
    parts: list[Component] = [_base(d, ref)]
    if f.os_id:
        parts.append(Component(type=ComponentType.OPERATING_SYSTEM, name=f.os_id,
                               version=_version(f.os_version), description=f.os_name or None,
                               bom_ref=ref("os")))
    # by manager, name and architecture: a multi-arch system has libc6:amd64 and libc6:i386
    packages = {(p.manager, p.name, p.arch): _os_package(p, f, ref) for p in f.packages}
    interp = None
    if f.interpreter is not None:
        i = f.interpreter
        interp = Component(type=ComponentType.APPLICATION, name=i.implementation.lower(),
                           version=_version(i.version), bom_ref=ref("interpreter"),
                           purl=_purl("generic", i.implementation.lower(), i.version),
                           description="the Python the venv runs",
                           properties=_props([("envbuild:path", i.executable),
                                              ("envbuild:os-package", i.owner)]))
        parts.append(interp)
    wheels = {(canonical(w.name), w.version): w for w in f.installed_wheels()}
    dists = [_dist(x, wheels.get((x.key, x.version)), f, ref) for x in f.dists]
    for c in [*parts, *packages.values(), *dists]:
        bom.components.add(c)
    bom.register_dependency(image, [*parts, *packages.values(), *dists])
    if interp is not None and f.interpreter is not None:
        owner = _owner(packages, f.interpreter)
        if owner is not None:
            bom.register_dependency(interp, [owner])
    return str(JsonV1Dot6(bom).output_as_string(indent=2)) + "\n"
