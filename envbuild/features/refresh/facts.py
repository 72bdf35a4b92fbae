"""Pure: the facts `envbuild matrix refresh` reads (wheel files, pins, torch and PyPI facts) and
the changes it proposes, with the parsers of PyPI payloads and wheel metadata."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field as dc_field
from email.parser import HeaderParser
from typing import Any
from urllib.parse import urljoin

from envbuild.common import wheelzip
from envbuild.common.errors import EnvironmentProblem
from envbuild.common.record import record
from envbuild.common.versions import minor_of, version_key

COMPANIONS = ("torchvision", "torchaudio")


@record
class WheelFile:
    filename: str
    url: str
    version: str
    build: int
    pythons: tuple[str, ...]  # CPython "3.11" (GIL builds only); empty for py3-none
    linux_x86_64: bool
    any_platform: bool
    yanked: bool


@record
class Pins:
    cuda: str = ""  # "13.0"
    cuda_full: str = ""  # "13.0.3" or the cudart wheel version
    cudnn: str = ""
    nccl: str = ""
    evidence: tuple[str, ...] = ()


@record
class TorchFacts:
    version: str
    python: tuple[str, ...]
    requires_python: str
    pins: Pins
    wheel: str


@record
class PypiFacts:
    latest: str
    torch: tuple[TorchFacts, ...]
    # companion package -> ((companion version, exact torch pin or "", requirement text), ...)
    companions: Mapping[str, tuple[tuple[str, str, str], ...]]
    yanked: tuple[str, ...] = ()
    unread: tuple[str, ...] = ()  # releases whose wheels have no .metadata file on the index
    versions: tuple[str, ...] = ()  # every torch release on the index (read or not)


@record
class ExtensionFacts:
    """A PyPI-hosted CUDA extension as PyPI has it (`matrix refresh --source extensions`)."""

    name: str
    versions: tuple[str, ...]  # final releases with a Linux x86_64 or pure wheel, oldest first
    latest: str
    torch: str  # the latest wheel's torch requirement, as a specifier ("" none, "?" unread)
    wheel: str = ""  # the wheel whose metadata said so


def torch_requirement(requires: Iterable[str]) -> str:
    """The torch specifier a wheel's Requires-Dist puts on Linux x86_64 (its markers evaluated
    there; extras left out), "" when it names none. Read from the wheel, not the project JSON:
    PyPI's info.requires_dist is one file's, and vLLM 0.33.0's says torch==2.13.0 where its
    wheels pin torch==2.14.0."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    env = {"platform_system": "Linux", "platform_machine": "x86_64", "sys_platform": "linux",
           "os_name": "posix", "extra": ""}
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) == "torch" and (req.marker is None or
                                                       req.marker.evaluate(env)):
            return str(req.specifier)
    return ""


@record
class Change:
    source: str  # pypi | pytorch-index | nvidia-tags | extensions
    kind: str  # changed | verify | new-release | new-patch | vanished-release |
    # vanished-patch | new-variant | vanished-variant | vanished-tag | new-tag
    file: str
    table: str
    key: tuple[tuple[str, str], ...]
    field: str = ""
    old: Any = None
    new: Any = None
    evidence: str = ""
    applicable: bool = False  # --write can apply it; otherwise it is for review
    row: Mapping[str, Any] = dc_field(default_factory=dict)  # a full new row (new-patch)

    @property
    def label(self) -> str:
        return "/".join(v for _, v in self.key)

    def describe(self) -> str:
        mark = {"changed": "~", "verify": "~"}.get(
            self.kind, "+" if self.kind.startswith("new") else "-")
        what = (f"{self.field}: {_show(self.old)} -> {_show(self.new)}"
                if self.kind in ("changed", "verify") else self.kind.replace("-", " "))
        tail = "" if self.applicable else "  (review: not written)"
        ev = f"  [{self.evidence}]" if self.evidence else ""
        return f"{mark} {self.file} [[{self.table}]] {self.label}: {what}{ev}{tail}"

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "kind": self.kind, "file": self.file, "table": self.table,
                "key": dict(self.key), "field": self.field, "old": self.old, "new": self.new,
                "evidence": self.evidence, "applicable": self.applicable,
                **({"row": dict(self.row)} if self.row else {})}


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return json.dumps(value) if isinstance(value, str) else str(value)


def parse_simple_files(payload: Any, page_url: str, project: str) -> list[WheelFile]:
    """Wheel files of a PEP 691 JSON project page (sdists and unparsable names skipped)."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    files = payload.get("files") if isinstance(payload, dict) else None
    if not isinstance(files, list):
        raise EnvironmentProblem(f"{page_url} is not a PEP 691 project page (no 'files' list)",
                                 "is --pypi-url a PyPI-compatible index?")
    out = []
    for f in files:
        if not isinstance(f, dict) or not isinstance(f.get("filename"), str):
            continue
        name = f["filename"]
        if not name.endswith(".whl") or not isinstance(f.get("url"), str):
            continue
        try:
            pkg, ver, build, tags = parse_wheel_filename(name)
        except (InvalidWheelFilename, ValueError):
            continue
        if pkg != project:
            continue
        pys = sorted({f"3.{t.interpreter[3:]}" for t in tags if t.interpreter.startswith("cp3")
                      and t.abi == t.interpreter}, key=version_key)
        out.append(WheelFile(
            filename=name, url=urljoin(page_url, f["url"]), version=str(ver),
            build=build[0] if build else 0, pythons=tuple(pys),
            linux_x86_64=any("linux" in t.platform and t.platform.endswith("x86_64") for t in tags),
            any_platform=any(t.platform == "any" for t in tags),
            yanked=bool(f.get("yanked"))))
    return out


def release_versions(files: Sequence[WheelFile], floor: str) -> list[str]:
    """Final (not pre/dev) versions at or above ``floor`` with a non-yanked Linux x86_64 or
    pure-Python wheel, oldest first."""
    from packaging.version import Version

    lo = Version(floor)
    seen = {f.version for f in files if not f.yanked and (f.linux_x86_64 or f.any_platform)}
    vs = [Version(v) for v in seen]
    return [str(v) for v in sorted(v for v in vs if v >= lo and not v.is_prerelease
                                   and not v.is_devrelease)]


def wheel_candidates(files: Sequence[WheelFile], version: str) -> list[WheelFile]:
    """The wheels whose metadata can stand for the release, best first: Linux x86_64 GIL-CPython
    wheels (highest build number first, as pip picks, then oldest CPython); pure-Python wheels
    when there is no binary one."""
    cands = [f for f in files if f.version == version and not f.yanked and f.linux_x86_64
             and f.pythons]
    if not cands:
        cands = [f for f in files if f.version == version and not f.yanked and f.any_platform]
    return sorted(cands, key=_wheel_rank)


def _wheel_rank(f: WheelFile) -> tuple[Any, ...]:
    return (-f.build, version_key(f.pythons[0]) if f.pythons else (0,), f.filename)


def any_wheels(files: Sequence[WheelFile], version: str) -> list[WheelFile]:
    """Every wheel of the release, Linux x86_64 first: a companion's pin on torch is the same in
    all its wheels, so any wheel whose metadata the index serves will do."""
    first = wheel_candidates(files, version)
    rest = sorted((f for f in files if f.version == version and not f.yanked and f not in first),
                  key=_wheel_rank)
    return first + rest


def python_tags(files: Sequence[WheelFile], version: str) -> tuple[str, ...]:
    """CPython versions with a Linux x86_64 wheel of ``version`` (free-threaded builds excluded)."""
    pys = {p for f in files if f.version == version and not f.yanked and f.linux_x86_64
           for p in f.pythons}
    return tuple(sorted(pys, key=version_key))


def parse_metadata(text: str) -> tuple[str, tuple[str, ...]]:
    """(Requires-Python, Requires-Dist lines) of a core metadata file (PEP 658)."""
    msg = HeaderParser().parsestr(text, headersonly=True)
    if not msg.get("Metadata-Version") and not msg.get("Name"):
        raise ValueError("no Metadata-Version / Name header")
    return (msg.get("Requires-Python") or "", tuple(msg.get_all("Requires-Dist") or ()))


_CU = re.compile(r"^nvidia-(cudnn|nccl|cuda-runtime)-cu(\d+)$")


def pins_from_requires(requires: Iterable[str]) -> Pins:
    """cuDNN / NCCL / CUDA the PyPI wheel pins: nvidia-cudnn-cuNN==, nvidia-nccl-cuNN==,
    nvidia-cuda-runtime-cuNN== (up to 2.10) or cuda-toolkit[...]== (2.11 on)."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    got: dict[str, str] = {}
    evidence = []
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        exact = [s.version for s in req.specifier if s.operator == "==" and "*" not in s.version]
        if len(exact) != 1:
            continue
        name = canonicalize_name(req.name)
        m = _CU.match(name)
        key = m.group(1) if m else ("cuda-toolkit" if name == "cuda-toolkit" else "")
        if key and key not in got:
            got[key] = exact[0]
            evidence.append(f"{name}=={exact[0]}")
    cuda_full = got.get("cuda-toolkit") or got.get("cuda-runtime", "")
    cuda = minor_of(cuda_full) if cuda_full else ""
    return Pins(cuda=cuda, cuda_full=cuda_full, cudnn=got.get("cudnn", ""),
                nccl=got.get("nccl", ""), evidence=tuple(evidence))


def torch_pin(requires: Iterable[str]) -> tuple[str, str]:
    """(exact torch version or "", the torch requirement as written or "")."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) != "torch" or (req.marker and "extra" in str(req.marker)):
            continue
        exact = [s.version for s in req.specifier if s.operator == "==" and "*" not in s.version]
        return (exact[0] if len(exact) == 1 else "", str(req))
    return ("", "")


def zip_directory_span(tail: bytes, size: int) -> tuple[int, int] | None:
    """(offset, length) of the central directory from the last bytes of a zip of `size` bytes;
    None when the tail holds no (zip64) end record or the span lies past the end."""
    try:
        offset, length = wheelzip.directory_span(tail, size - len(tail))
    except ValueError:
        return None
    return (offset, length) if offset + length <= size else None


def zip_metadata_entry(directory: bytes) -> tuple[int, int, int] | None:
    """(local header offset, compressed size, method) of the top-level `*.dist-info/METADATA`."""
    for e in wheelzip.entries(directory):
        parts = e.name.decode("utf-8", "replace").split("/")
        if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == "METADATA":
            return e.offset, e.compressed, e.method
    return None
