"""`envbuild matrix refresh`: read version facts from their sources and diff them against matrix/.

Three layers, kept apart:
- ``Http`` (envbuild/http.py, the one HTTP client: timeouts, retries with backoff, one-line
  errors, the registry token flow);
- fetchers (``fetch_pypi``, ``fetch_index``, ``fetch_tags``): I/O only, they turn payloads into
  facts with the pure parsers below;
- pure functions: payload parsers, ``diff_*`` (facts + Matrix in, list of ``Change`` out) and
  ``apply_changes`` (TOML text + changes in, TOML text out, editing only the affected lines so
  comments, order and sources stay as they are).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dc_field
from email.parser import HeaderParser
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urljoin, urlsplit

from envbuild.common.errors import EnvironmentProblem
from envbuild.common.http import Http as Http
from envbuild.common.http import RegistryAuth
from envbuild.common.http import Reply as Reply
from envbuild.common.http import ca_bundle as ca_bundle
from envbuild.common.http import first_line as _first_line
from envbuild.common.versions import minor_of, version_key
from envbuild.validator import rules

if TYPE_CHECKING:
    from envbuild.matrix import Matrix

SOURCES = ("pypi", "pytorch-index", "nvidia-tags")
PYPI_URL = "https://pypi.org"
REGISTRY_URL = "https://registry-1.docker.io"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
COMPANIONS = ("torchvision", "torchaudio")
MAX_TAG_PAGES = 50
MAX_METADATA_TRIES = 3  # wheels tried per release for a .metadata file (bounds the requests)


# ------------------------------------------------------------------------------ pure: facts


@dataclass(frozen=True)
class WheelFile:
    filename: str
    url: str
    version: str
    build: int
    pythons: tuple[str, ...]  # CPython "3.11" (GIL builds only); empty for py3-none
    linux_x86_64: bool
    any_platform: bool
    yanked: bool


@dataclass(frozen=True)
class Pins:
    cuda: str = ""  # "13.0"
    cuda_full: str = ""  # "13.0.3" or the cudart wheel version
    cudnn: str = ""
    nccl: str = ""
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class TorchFacts:
    version: str
    python: tuple[str, ...]
    requires_python: str
    pins: Pins
    wheel: str


@dataclass(frozen=True)
class PypiFacts:
    latest: str
    torch: tuple[TorchFacts, ...]
    # companion package -> ((companion version, exact torch pin or "", requirement text), ...)
    companions: Mapping[str, tuple[tuple[str, str, str], ...]]
    yanked: tuple[str, ...] = ()
    unread: tuple[str, ...] = ()  # releases whose wheels have no .metadata file on the index
    versions: tuple[str, ...] = ()  # every torch release on the index (read or not)


@dataclass(frozen=True)
class Change:
    source: str  # pypi | pytorch-index | nvidia-tags
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


# ------------------------------------------------------------------------------- pure: diffs


def _key(**kv: str) -> tuple[tuple[str, str], ...]:
    return tuple(kv.items())


def diff_pypi(m: Matrix, facts: PypiFacts) -> list[Change]:
    """Compare PyPI facts with torch.toml: releases, Python tags, the PyPI default variant and its
    CUDA/cuDNN/NCCL pins (from the newest patch of each minor), companions of every patch."""
    out: list[Change] = []
    src = "pypi"
    by_minor: dict[str, list[TorchFacts]] = {}
    for t in facts.torch:
        by_minor.setdefault(minor_of(t.version), []).append(t)
    known = {r.version: r for r in m.torch}
    for minor, patches in by_minor.items():
        newest = max(patches, key=lambda t: version_key(t.version))
        ev = f"torch {newest.version} {newest.wheel}"
        rel = known.get(minor)
        default = rules.cuda_tag(newest.pins.cuda) if newest.pins.cuda else ""
        if rel is None:
            out.append(Change(src, "new-release", "torch.toml", "release", _key(version=minor),
                              new={"python": list(newest.python), "default_variant": default,
                                   **_pin_dict(newest.pins)},
                              evidence=ev))
            continue
        if newest.python and tuple(newest.python) != rel.python:
            out.append(Change(src, "changed", "torch.toml", "release", _key(version=minor),
                              "python", list(rel.python), list(newest.python),
                              f"{ev}: Linux x86_64 CPython wheels", True))
        if not default:
            continue
        if default != rel.default_variant:
            out.append(Change(src, "changed", "torch.toml", "release", _key(version=minor),
                              "default_variant", rel.default_variant, default,
                              f"{ev}: {', '.join(newest.pins.evidence)}", True))
        var = next((v for v in m.variants if v.release == minor and v.tag == default), None)
        vkey = _key(release=minor, tag=default)
        if var is None:
            out.append(Change(src, "new-variant", "torch.toml", "variant", vkey,
                              new=_pin_dict(newest.pins), evidence=ev))
            continue
        for fld, new in (("version", newest.pins.cuda), ("cudnn", newest.pins.cudnn),
                         ("nccl", newest.pins.nccl)):
            if new and getattr(var, fld) != new:
                out.append(Change(src, "changed", "torch.toml", "variant", vkey, fld,
                                  getattr(var, fld), new,
                                  f"{ev}: {', '.join(newest.pins.evidence)}", True))
    lo = min((version_key(r.version) for r in m.torch), default=(0,))
    on_index = {minor_of(v) for v in facts.versions} | set(by_minor)
    for r in m.torch:
        if r.version not in on_index and version_key(r.version) >= lo:
            out.append(Change(src, "vanished-release", "torch.toml", "release",
                              _key(version=r.version), evidence="no release on PyPI"))
    out += _diff_patches(m, facts)
    return out


def pypi_notes(facts: PypiFacts) -> list[str]:
    """Facts the matrix cannot hold (it has one variant row per minor): earlier patches of a minor
    that pin another CUDA / cuDNN / NCCL than the newest patch, which the matrix follows."""
    out = []
    by_minor: dict[str, list[TorchFacts]] = {}
    for t in facts.torch:
        by_minor.setdefault(minor_of(t.version), []).append(t)
    for minor, patches in by_minor.items():
        newest = max(patches, key=lambda t: version_key(t.version))
        for t in patches:
            a, b = _pin_dict(t.pins), _pin_dict(newest.pins)
            if t is not newest and t.pins.cuda and a != b:
                diff = ", ".join(f"{k} {a[k]} (newest {b[k]})" for k in a if a[k] != b[k])
                out.append(f"torch {t.version} pins {diff}; the {minor} rows follow "
                           f"{newest.version}")
    return out


def _pin_dict(p: Pins) -> dict[str, str]:
    return {"cuda": p.cuda, "cudnn": p.cudnn, "nccl": p.nccl}


def _diff_patches(m: Matrix, facts: PypiFacts) -> list[Change]:
    out: list[Change] = []
    src = "pypi"
    exact: dict[str, dict[str, str]] = {c: {} for c in COMPANIONS}
    for comp in COMPANIONS:
        for ver, pin, _req in facts.companions.get(comp, ()):
            if pin and version_key(ver) > version_key(exact[comp].get(pin, "0")):
                exact[comp][pin] = ver
    rows = {p.torch: p for p in m.patches}
    minors = {r.version for r in m.torch}
    pypi_versions = set(facts.versions) or {t.version for t in facts.torch}
    for t in facts.torch:
        tv, ta = exact["torchvision"].get(t.version, ""), exact["torchaudio"].get(t.version, "")
        row = rows.get(t.version)
        key = _key(torch=t.version)
        if row is None:
            ok = bool(tv and ta) and minor_of(t.version) in minors
            new = {"torch": t.version, "torchvision": tv, "torchaudio": ta,
                   "torchaudio_pinned": bool(ta)}
            out.append(Change(src, "new-patch", "torch.toml", "patch", key, new=new,
                              evidence=_companion_evidence(tv, ta, t.version),
                              applicable=ok, row=new if ok else {}))
            continue
        if tv and row.torchvision != tv:
            out.append(Change(src, "changed", "torch.toml", "patch", key, "torchvision",
                              row.torchvision, tv, f"torchvision {tv} requires torch=={t.version}",
                              True))
        if ta and row.torchaudio != ta:
            out.append(Change(src, "changed", "torch.toml", "patch", key, "torchaudio",
                              row.torchaudio, ta, f"torchaudio {ta} requires torch=={t.version}",
                              True))
        if ta and not row.torchaudio_pinned:
            out.append(Change(src, "changed", "torch.toml", "patch", key, "torchaudio_pinned",
                              False, True, f"torchaudio {ta} requires torch=={t.version}", True))
        if not row.verified and tv and ta and (tv, ta) == (row.torchvision, row.torchaudio) \
                and row.torchaudio_pinned:
            out.append(Change(src, "verify", "torch.toml", "patch", key, "verified", False, True,
                              f"torchvision {tv} and torchaudio {ta} both require "
                              f"torch=={t.version}", True))
        ta_pins = {v: pin for v, pin, _ in facts.companions.get("torchaudio", ())}
        if not ta and row.torchaudio_pinned and row.torchaudio in ta_pins:
            pin = ta_pins[row.torchaudio]
            out.append(Change(src, "changed", "torch.toml", "patch", key, "torchaudio_pinned",
                              True, False, f"torchaudio {row.torchaudio} " + (
                                  f"pins torch=={pin}" if pin else "has no exact torch pin"),
                              True))
    lo = min((version_key(p) for p in pypi_versions), default=None)
    for p in m.patches:
        if p.torch not in pypi_versions and lo is not None and version_key(p.torch) >= lo:
            out.append(Change(src, "vanished-patch", "torch.toml", "patch", _key(torch=p.torch),
                              evidence="no such torch release on PyPI"))
    return out


def _companion_evidence(tv: str, ta: str, torch: str) -> str:
    parts = [f"torchvision {tv}" if tv else "no torchvision pins it",
             f"torchaudio {ta}" if ta else "no torchaudio pins it"]
    return f"torch {torch} on PyPI; " + ", ".join(parts)


_INDEX_FILE = re.compile(r"^torch-(\d+(?:\.\d+)*)\+([A-Za-z0-9.]+)-")


def parse_index_page(html: str) -> dict[str, set[str]]:
    """A PEP 503 page of the PyTorch wheel index -> {local tag: {torch versions}} (Linux x86_64
    wheels; the local version `+cu130` names the variant)."""
    from html import unescape
    from urllib.parse import unquote

    out: dict[str, set[str]] = {}
    for href, text in re.findall(r"<a\s[^>]*href=\"([^\"]*)\"[^>]*>([^<]*)</a>", html, re.I):
        name = unescape(text).strip() or unquote(href.split("#")[0].rsplit("/", 1)[-1])
        if not name.endswith(".whl") or "x86_64" not in name or "linux" not in name:
            continue
        m = _INDEX_FILE.match(name)
        if m:
            out.setdefault(m.group(2), set()).add(m.group(1))
    return out


def diff_index(m: Matrix, pages: Mapping[str, set[str] | None]) -> list[Change]:
    """pages: variant tag -> torch versions on its index page (None: the page does not exist)."""
    out: list[Change] = []
    minors = {r.version for r in m.torch}
    for tag, versions in sorted(pages.items()):
        present = {minor_of(v) for v in versions or ()}
        ev = f"index_base/{tag}/torch/" + ("" if versions is not None else " answered 404")
        for v in m.variants:
            if v.tag == tag and v.release not in present:
                out.append(Change("pytorch-index", "vanished-variant", "torch.toml", "variant",
                                  _key(release=v.release, tag=tag), evidence=ev))
        have = {v.release for v in m.variants if v.tag == tag}
        for minor in sorted(present & minors - have, key=version_key):
            out.append(Change("pytorch-index", "new-variant", "torch.toml", "variant",
                              _key(release=minor, tag=tag), evidence=ev))
    return out


def split_tag(tag: str, flavors: Iterable[str]) -> tuple[str, str, str] | None:
    """'12.2.2-cudnn8-devel-ubuntu22.04' -> ('12.2.2', 'cudnn8-devel', 'ubuntu22.04')."""
    m = re.match(r"^(\d+\.\d+\.\d+)-(.+)$", tag)
    if not m:
        return None
    for fl in sorted(flavors, key=len, reverse=True):
        if m.group(2).startswith(fl + "-") and len(m.group(2)) > len(fl) + 1:
            return m.group(1), fl, m.group(2)[len(fl) + 1:]
    return None


def diff_tags(m: Matrix, tags: Iterable[str]) -> list[Change]:
    """Compare the registry's tag list with the [[image]] rows: vanished tags of listed images, and
    tags of a listed CUDA minor on a known OS that the matrix does not list, from its newest listed
    update on (a newer update, or a flavor or OS the listed update has)."""
    out: list[Change] = []
    have = set(tags)
    flavors = list(m.meta.get("cuda", {}).get("image_flavors", [])) or sorted(
        {f for i in m.images for f in i.flavors})
    for img in m.images:
        missing = [f for f in img.flavors if f"{img.cuda}-{f}-{img.os}" not in have]
        if missing:
            out.append(Change("nvidia-tags", "vanished-tag", "cuda.toml", "image",
                              _key(cuda=img.cuda, os=img.os), "flavors", list(img.flavors),
                              [f for f in img.flavors if f not in missing],
                              "missing: " + ", ".join(f"{img.cuda}-{f}-{img.os}" for f in missing)))
    listed = {(i.cuda, i.os): set(i.flavors) for i in m.images}
    # per listed minor, the update from which on a tag is news: older updates are history
    floor: dict[str, tuple[int, ...]] = {c.version: version_key(c.latest or c.version)
                                         for c in m.cuda}
    for i in m.images:
        mi = minor_of(i.cuda)
        floor[mi] = max(floor.get(mi, (0,)), version_key(i.cuda))
    minors = set(floor)
    oses = {o.id for o in m.oses} | {i.os for i in m.images}
    extra: dict[tuple[str, str], set[str]] = {}
    for t in have:
        parts = split_tag(t, flavors)
        if parts is None:
            continue
        cuda, fl, os_id = parts
        if (minor_of(cuda) in minors and version_key(cuda) >= floor[minor_of(cuda)]
                and os_id in oses and fl not in listed.get((cuda, os_id), ())):
            extra.setdefault((cuda, os_id), set()).add(fl)
    for (cuda, os_id), fls in sorted(extra.items(),
                                     key=lambda kv: (version_key(kv[0][0]), kv[0][1])):
        out.append(Change("nvidia-tags", "new-tag", "cuda.toml", "image",
                          _key(cuda=cuda, os=os_id), "flavors",
                          sorted(listed.get((cuda, os_id), ())), sorted(fls),
                          "tags " + ", ".join(f"{cuda}-{f}-{os_id}" for f in sorted(fls))))
    return out


# ----------------------------------------------------------------- pure: editing the TOML text


_HEADER = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.\"-]+)\s*\]\]?\s*(#.*)?$")
_KEYLINE = re.compile(r"^([A-Za-z0-9_-]+)\s*=\s*(.*)$")


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, str):
        if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
            raise ValueError(f"{value!r} is not valid Unicode text")
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    raise TypeError(f"cannot write {value!r} to TOML")


@dataclass
class _Block:
    table: str
    start: int  # header line index
    end: int  # one past the last line of the block (next header)
    values: dict[str, Any]

    def last_key_line(self, lines: list[str]) -> int:
        last = self.start
        for i in range(self.start + 1, self.end):
            if _KEYLINE.match(lines[i]):
                last = i
        return last


def _blocks(lines: list[str]) -> list[_Block]:
    from envbuild.common.boundedio import parse_toml

    heads = [(i, m.group(1)) for i, line in enumerate(lines) if (m := _HEADER.match(line))
             and line.lstrip().startswith("[")]
    out = []
    for n, (i, name) in enumerate(heads):
        end = heads[n + 1][0] if n + 1 < len(heads) else len(lines)
        body = "\n".join(lines[i + 1:end])
        try:
            values = parse_toml(body)
        except ValueError:  # TOMLDecodeError, TooDeep: not a block this can edit
            values = {}
        out.append(_Block(name, i, end, values))
    return out


def _matches(block: _Block, table: str, key: Sequence[tuple[str, str]]) -> bool:
    return block.table == table and all(str(block.values.get(k)) == v for k, v in key)


def _set_key(lines: list[str], block: _Block, name: str, value: Any) -> None:
    text = f"{name} = {toml_value(value)}"
    for i in range(block.start + 1, block.end):
        m = _KEYLINE.match(lines[i])
        if m and m.group(1) == name:
            lines[i] = text
            return
    at = block.last_key_line(lines) + 1
    lines.insert(at, text)
    block.end += 1


def apply_changes(text: str, changes: Sequence[Change], source_id: str) -> str:
    """Apply the applicable changes of one file to its TOML text. Only the changed lines are
    rewritten: comments, key order and other rows stay byte for byte. Every edited row gets
    ``source_id`` (which carries the date) appended to its ``source`` list; ``verify`` changes set
    ``verified = true`` on a row whose every fact the source confirmed, and a new row is written
    with ``verified = true``. An edited row's ``verified`` flag is otherwise kept: the refresh
    confirms some of its facts (pins), not all (arch lists)."""
    lines = text.split("\n")
    for ch in changes:
        if not ch.applicable:
            continue
        blocks = _blocks(lines)
        if ch.kind in ("changed", "verify"):
            block = next((b for b in blocks if _matches(b, ch.table, ch.key)), None)
            if block is None:
                raise ValueError(f"row {ch.label} of [[{ch.table}]] not found")
            _set_key(lines, block, ch.field, ch.new)
            block = next(b for b in _blocks(lines) if _matches(b, ch.table, ch.key))
            srcs = list(block.values.get("source", []))
            if source_id not in srcs:
                _set_key(lines, block, "source", [*srcs, source_id])
        elif ch.kind == "new-patch" and ch.row:
            same = [b for b in blocks if b.table == ch.table]
            kv = version_key(str(ch.row["torch"]))
            before = [b for b in same if version_key(str(b.values.get("torch", "0"))) < kv]
            anchor = max(before, key=lambda b: version_key(str(b.values.get("torch", "0"))),
                         default=None) or (same[0] if same else None)
            row = [f"[[{ch.table}]]", *(f"{k} = {toml_value(v)}" for k, v in ch.row.items()),
                   "verified = true", f"source = {toml_value([source_id])}",
                   f"note = {toml_value('Added by envbuild matrix refresh: ' + ch.evidence)}"]
            if anchor is None:
                lines += ["", *row]
            elif before:
                at = anchor.last_key_line(lines) + 1
                lines[at:at] = ["", *row]
            else:
                lines[anchor.start:anchor.start] = [*row, ""]
    return "\n".join(lines)


def source_entry(source_id: str, title: str, url: str, read: str) -> str:
    return (f"\n[source.{toml_value(source_id)}]\ntitle = {toml_value(title)}\n"
            f"url = {toml_value(url)}\nread = {toml_value(read)}\n")


# ------------------------------------------------------------ pure: METADATA inside a wheel zip


def zip_directory_span(tail: bytes, size: int) -> tuple[int, int] | None:
    """(offset, length) of the central directory from the last bytes of a zip of ``size`` bytes
    (the end-of-central-directory record); None for zip64 archives or a tail without one."""
    import struct

    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) < at + 22:
        return None
    cd_size, cd_offset = struct.unpack_from("<II", tail, at + 12)
    if cd_offset == 0xFFFFFFFF or cd_size == 0xFFFFFFFF or cd_offset + cd_size > size:
        return None
    return cd_offset, cd_size


def zip_metadata_entry(directory: bytes) -> tuple[int, int, int] | None:
    """(local header offset, compressed size, method) of the top-level ``*.dist-info/METADATA``."""
    import struct

    at = 0
    while at + 46 <= len(directory) and directory[at:at + 4] == b"PK\x01\x02":
        method, = struct.unpack_from("<H", directory, at + 10)
        csize, = struct.unpack_from("<I", directory, at + 20)
        nlen, elen, clen = struct.unpack_from("<HHH", directory, at + 28)
        offset, = struct.unpack_from("<I", directory, at + 42)
        name = directory[at + 46:at + 46 + nlen].decode("utf-8", "replace")
        parts = name.split("/")
        if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == "METADATA":
            return offset, csize, method
        at += 46 + nlen + elen + clen
    return None


def zip_member(local: bytes, csize: int, method: int) -> bytes | None:
    """The uncompressed member from its local header onwards (stored or deflated)."""
    import struct
    import zlib

    if len(local) < 30 or local[:4] != b"PK\x03\x04":
        return None
    nlen, elen = struct.unpack_from("<HH", local, 26)
    data = local[30 + nlen + elen:30 + nlen + elen + csize]
    if len(data) < csize:
        return None
    if method == 0:
        return data
    if method == 8:
        try:
            return zlib.decompressobj(-15).decompress(data)
        except zlib.error:
            return None
    return None


# ---------------------------------------------------------------------------------- fetchers


def fetch_pypi(http: Http, base: str, m: Matrix) -> PypiFacts:
    """torch: the project JSON (latest release, its Requires-Dist) and the PEP 691 file list; one
    Linux x86_64 wheel's PEP 658 metadata per release the matrix covers (older ones are not
    read); torchvision / torchaudio likewise, from the oldest companion the matrix lists."""
    base = base.rstrip("/")
    proj = http.get(f"{base}/pypi/torch/json").json()
    info = proj.get("info") if isinstance(proj, dict) else None
    if not isinstance(info, dict) or not isinstance(info.get("version"), str):
        raise EnvironmentProblem(f"{base}/pypi/torch/json has no info.version",
                                 "is --pypi-url the root of a PyPI-compatible server?")
    latest = info["version"]
    latest_reqs = tuple(r for r in info.get("requires_dist") or () if isinstance(r, str))
    floor = min((r.version for r in m.torch), key=version_key, default="2.0")
    torch_files, torch_versions = _project_files(http, base, "torch", floor + ".0")
    torch: list[TorchFacts] = []
    yanked = sorted({f.version for f in torch_files if f.yanked} - set(torch_versions),
                    key=version_key)
    unread: list[str] = []
    for ver in torch_versions:
        if ver == latest and pins_from_requires(latest_reqs).cuda:
            rp, reqs, wheel = str(info.get("requires_python") or ""), latest_reqs, "project JSON"
        else:
            got = _metadata(http, wheel_candidates(torch_files, ver))
            if got is None:
                unread.append(f"torch {ver}")
                continue
            rp, reqs, wheel = got
        torch.append(TorchFacts(ver, python_tags(torch_files, ver), rp,
                                pins_from_requires(reqs), wheel))
    companions: dict[str, tuple[tuple[str, str, str], ...]] = {}
    for comp in COMPANIONS:
        known = [getattr(p, comp) for p in m.patches if getattr(p, comp)]
        if not known:
            continue
        files, versions = _project_files(http, base, comp, min(known, key=version_key))
        rows = []
        for ver in versions:
            got = _metadata(http, any_wheels(files, ver))
            if got is None:
                unread.append(f"{comp} {ver}")
                continue
            pin, req = torch_pin(got[1])
            rows.append((ver, pin, req))
        companions[comp] = tuple(rows)
    return PypiFacts(latest, tuple(torch), companions, tuple(yanked), tuple(unread),
                     tuple(torch_versions))


def _project_files(http: Http, base: str, project: str,
                   floor: str) -> tuple[list[WheelFile], list[str]]:
    page = f"{base}/simple/{quote(project)}/"
    files = parse_simple_files(http.get(page, accept=SIMPLE_JSON).json(), page, project)
    return files, release_versions(files, floor)


def _metadata(http: Http, wheels: Sequence[WheelFile]
              ) -> tuple[str, tuple[str, ...], str] | None:
    """(Requires-Python, Requires-Dist, wheel name) from the first wheel whose PEP 658 metadata
    file exists (an index may serve it for some files only); None if no wheel has one."""
    for wheel in wheels[:MAX_METADATA_TRIES]:
        url = wheel.url.split("#")[0] + ".metadata"
        reply = http.get(url, ok=(404,))
        if reply.status == 404:
            continue
        try:
            rp, reqs = parse_metadata(reply.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise EnvironmentProblem(f"{url} is not wheel metadata ({_first_line(str(exc))})",
                                     "the index does not serve PEP 658 metadata files") from None
        return rp, reqs, wheel.filename
    for wheel in wheels[:1]:
        text = _metadata_in_wheel(http, wheel)
        if text is not None:
            try:
                rp, reqs = parse_metadata(text)
            except ValueError:
                return None
            return rp, reqs, wheel.filename + RANGE_NOTE
    return None


ZIP_TAIL = 65536
RANGE_NOTE = " (METADATA read by range)"
MAX_DIRECTORY = 8 << 20


def _metadata_in_wheel(http: Http, wheel: WheelFile) -> str | None:
    """The wheel's METADATA read with three HTTP range requests (zip tail, central directory,
    the member) when the index serves no .metadata file: a few MB at most, never the wheel."""
    url = wheel.url.split("#")[0]
    tail = http.get(url, headers={"Range": f"bytes=-{ZIP_TAIL}"}, ok=(206, 404, 416),
                    limit=ZIP_TAIL)
    total = _range_total(tail)
    if tail.status != 206 or total is None:
        return None
    span = zip_directory_span(tail.body, total)
    if span is None or span[1] > MAX_DIRECTORY:
        return None
    off, size = span
    start = total - len(tail.body)
    if off >= start:
        directory = tail.body[off - start:off - start + size]
    else:
        got = http.get(url, headers={"Range": f"bytes={off}-{off + size - 1}"}, ok=(206,),
                       limit=size)
        if got.status != 206:
            return None
        directory = got.body
    entry = zip_metadata_entry(directory)
    if entry is None:
        return None
    local_off, csize, method = entry
    end = local_off + 30 + 1024 + csize  # local header, name and extra field, data
    got = http.get(url, headers={"Range": f"bytes={local_off}-{min(end, total) - 1}"},
                   ok=(206,), limit=end - local_off)
    data = zip_member(got.body, csize, method) if got.status == 206 else None
    return data.decode("utf-8", "replace") if data is not None else None


def _range_total(reply: Reply) -> int | None:
    cr = next((v for k, v in reply.headers.items() if k.lower() == "content-range"), "")
    m = re.match(r"bytes \d+-\d+/(\d+)$", cr.strip())
    return int(m.group(1)) if m else None


def fetch_index(http: Http, index_base: str, tags: Iterable[str]) -> dict[str, set[str] | None]:
    """Torch versions per variant tag from the PyTorch wheel index pages (index_base/TAG/torch/)."""
    out: dict[str, set[str] | None] = {}
    for tag in sorted(set(tags)):
        reply = http.get(f"{index_base.rstrip('/')}/{quote(tag)}/torch/", ok=(404,))
        if reply.status == 404:
            out[tag] = None
            continue
        page = parse_index_page(reply.body.decode("utf-8", "replace"))
        out[tag] = page.get(tag, set())
    return out


def fetch_tags(http: Http, registry: str, repo: str) -> list[str]:
    """Every tag of ``repo`` through the registry HTTP API v2 (GET /v2/REPO/tags/list, following
    Link: rel="next"), with the anonymous bearer-token flow of Docker Hub on a 401 challenge."""
    registry = registry.rstrip("/")
    url = f"{registry}/v2/{repo}/tags/list?n=1000"
    auth = RegistryAuth(lambda _m, u, h, _b: http.get(u, headers=h, ok=(401,)),
                        urlsplit(registry).netloc or registry)
    tags: list[str] = []
    for _ in range(MAX_TAG_PAGES):
        reply = auth.request("GET", url, f"repository:{repo}:pull")
        doc = reply.json()
        page = doc.get("tags") if isinstance(doc, dict) else None
        if not isinstance(page, list):
            raise EnvironmentProblem(f"{url} is not a v2 tag list (no 'tags' array)",
                                     "is --registry-url a registry v2 endpoint?")
        tags += [t for t in page if isinstance(t, str)]
        nxt = _next_link(reply.headers)
        if not nxt:
            return tags
        url = urljoin(registry + "/", nxt)
    raise EnvironmentProblem(f"{registry}: more than {MAX_TAG_PAGES} pages of tags for {repo}",
                             "the registry keeps answering rel=next; giving up")


def _next_link(headers: Mapping[str, str]) -> str:
    link = next((v for k, v in headers.items() if k.lower() == "link"), "")
    m = re.search(r'<([^>]+)>\s*;\s*rel="?next"?', link)
    return m.group(1) if m else ""


# ------------------------------------------------------------------------------ orchestration


SOURCE_IDS = {"pypi": "S-REFRESH-PYPI", "pytorch-index": "S-REFRESH-TORCH-INDEX",
              "nvidia-tags": "S-REFRESH-NV-TAGS"}


@dataclass
class RefreshResult:
    directory: str
    sources: tuple[str, ...]
    changes: list[Change]
    checked: dict[str, Any]
    written: list[str] = dc_field(default_factory=list)
    source_ids: dict[str, str] = dc_field(default_factory=dict)
    notes: list[str] = dc_field(default_factory=list)

    @property
    def remaining(self) -> list[Change]:
        applied = bool(self.written)
        return [c for c in self.changes if not (applied and c.applicable)]

    def lines(self) -> list[str]:
        out = [c.describe() for c in self.changes]
        out += [f"note: {n}" for n in self.notes]
        out += _checked_lines(self.checked)
        n_app = sum(c.applicable for c in self.changes)
        if not self.changes:
            out.append(f"matrix agrees with {', '.join(self.sources)} ({self.directory})")
        elif self.written:
            out.append(f"wrote {n_app} change(s) to {', '.join(self.written)} "
                       f"(source {', '.join(sorted(set(self.source_ids.values())))}); "
                       f"{len(self.changes) - n_app} left for review")
        else:
            out.append(f"{len(self.changes)} difference(s): {n_app} applicable with --write, "
                       f"{len(self.changes) - n_app} for review")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"directory": self.directory, "sources": list(self.sources),
                "checked": self.checked, "changes": [c.to_json() for c in self.changes],
                "notes": self.notes, "written": self.written, "source_ids": self.source_ids,
                "remaining": len(self.remaining)}


def _checked_lines(checked: Mapping[str, Any]) -> list[str]:
    out = []
    p = checked.get("pypi")
    if p:
        out.append(f"pypi: {p['torch_releases']} torch releases read ({p['torch_minors']} minors, "
                   f"latest {p['latest']}), {p['torchvision']} torchvision, {p['torchaudio']} "
                   f"torchaudio; default variants compared for {len(p['default_variants'])} "
                   "minors")
        if p["read_by_range"]:
            out.append(f"pypi: METADATA read by HTTP range (no .metadata file) for torch "
                       f"{', '.join(p['read_by_range'])}")
        if p["no_metadata"]:
            out.append(f"pypi: no metadata readable for {', '.join(p['no_metadata'])}")
    i = checked.get("pytorch-index")
    if i:
        missing = f" ({len(i['missing_pages'])} answered 404)" if i["missing_pages"] else ""
        out.append(f"pytorch-index: {i['pages']} variant pages read{missing}")
    t = checked.get("nvidia-tags")
    if t:
        out.append(f"nvidia-tags: {t['tags']} tags of {t['repository']}")
    if "requests" in checked:
        out.append(f"{checked['requests']} HTTP requests")
    return out


def run_refresh(source: str, directory: Any, *, write: bool, pypi_url: str,
                index_url: str | None, registry_url: str, timeout: float, retries: int,
                today: str | None = None) -> RefreshResult:
    """Fetch every chosen source first (all or nothing), diff, and with ``write`` apply."""
    import datetime
    from pathlib import Path

    from envbuild.common.resources import matrix_dir
    from envbuild.matrix import load

    d = Path(directory) if directory else matrix_dir()
    m = load(d)
    chosen = SOURCES if source == "all" else (source,)
    http = Http(timeout=timeout, retries=retries, agent="envbuild-matrix-refresh",
                status_hint="check the URL options (--pypi-url, --index-url, --registry-url) "
                "and the package or repository name")
    changes: list[Change] = []
    notes: list[str] = []
    checked: dict[str, Any] = {}
    # the quick sources first: an unreachable one fails the run before PyPI's minute of reads
    for src in sorted(chosen, key=lambda x: x == "pypi"):
        try:
            _refresh_one(src, http, m, changes, notes, checked, pypi_url, index_url,
                         registry_url)
        except EnvironmentProblem as exc:
            exc.hint = f"{exc.hint}; the matrix is unchanged".lstrip("; ")
            if source == "all":
                exc.hint = (f"{exc.hint}; --source {src} failed: refresh the reachable "
                            "sources one at a time").lstrip("; ")
            raise
    checked["requests"] = http.requests
    result = RefreshResult(str(d), chosen, changes, checked, notes=notes)
    if write and any(c.applicable for c in changes):
        day = today or datetime.datetime.now(datetime.UTC).date().isoformat()
        result.source_ids = {s: f"{SOURCE_IDS[s]}-{day}" for s in chosen}
        result.written = write_changes(d, changes, result.source_ids, pypi_url, day)
    return result


def _refresh_one(src: str, http: Http, m: Matrix, changes: list[Change], notes: list[str],
                 checked: dict[str, Any], pypi_url: str, index_url: str | None,
                 registry_url: str) -> None:
    if src == "pypi":
        facts = fetch_pypi(http, pypi_url, m)
        changes += diff_pypi(m, facts)
        notes += pypi_notes(facts)
        checked["pypi"] = {
            "latest": facts.latest, "torch_releases": len(facts.torch),
            "no_metadata": list(facts.unread), "yanked": list(facts.yanked),
            "read_by_range": [t.version for t in facts.torch if t.wheel.endswith(RANGE_NOTE)],
            "torch_minors": len({minor_of(t.version) for t in facts.torch}),
            **{c: len(facts.companions.get(c, ())) for c in COMPANIONS},
            "default_variants": {minor_of(t.version): rules.cuda_tag(t.pins.cuda) if t.pins.cuda
                                 else "" for t in facts.torch}}
    elif src == "pytorch-index":
        base = index_url or str(m.meta.get("torch", {}).get("index_base", ""))
        pages = fetch_index(http, base, {v.tag for v in m.variants})
        changes += diff_index(m, pages)
        checked["pytorch-index"] = {
            "pages": len(pages), "missing_pages": sorted(t for t, v in pages.items() if v is None)}
    else:
        repo = str(m.meta.get("cuda", {}).get("image_repo", "nvidia/cuda"))
        tags = fetch_tags(http, registry_url, repo)
        changes += diff_tags(m, tags)
        checked["nvidia-tags"] = {"repository": repo, "tags": len(tags)}


_SOURCE_TITLES = {
    "pypi": ("PyPI JSON API, simple API (PEP 691) and wheel core metadata (PEP 658) of torch, "
             "torchvision, torchaudio: releases, Linux x86_64 CPython tags, Requires-Dist pins",
             "{pypi}/simple/torch/"),
    "pytorch-index": ("PyTorch wheel index pages index_base/<tag>/torch/", "{index}"),
    "nvidia-tags": ("nvidia/cuda tag list (registry HTTP API v2)", "{registry}"),
}


def write_changes(d: Any, changes: Sequence[Change], source_ids: Mapping[str, str],
                  pypi_url: str, day: str) -> list[str]:
    """Apply to copies, check the copies as a whole, then replace the files (nothing is
    half-written)."""
    import os
    import tempfile
    from pathlib import Path

    from envbuild.common.boundedio import read_bytes, read_text
    from envbuild.common.errors import MatrixError
    from envbuild.matrix import check

    d = Path(d)
    per_file: dict[str, list[Change]] = {}
    for c in changes:
        if c.applicable:
            per_file.setdefault(c.file, []).append(c)
    used = sorted({c.source for c in changes if c.applicable})
    new_text: dict[str, str] = {}
    for fname, chs in per_file.items():
        text = read_text(d / fname, "matrix file")
        for src in used:
            text = apply_changes(text, [c for c in chs if c.source == src], source_ids[src])
        new_text[fname] = text
    sources = read_text(d / "sources.toml", "matrix file")
    for src in used:
        sid = source_ids[src]
        if f'[source."{sid}"]' not in sources:
            title, url = _SOURCE_TITLES[src]
            sources = sources.rstrip("\n") + "\n" + source_entry(
                sid, title, url.format(pypi=pypi_url.rstrip("/"), index="", registry=""),
                f"envbuild matrix refresh --source {src} --write, {day}")
    new_text["sources.toml"] = sources
    with tempfile.TemporaryDirectory(prefix="envbuild-refresh-") as tmp:
        for p in d.glob("*.toml"):  # through the bounded reader: no FIFO or /dev/zero copied
            (Path(tmp) / p.name).write_bytes(read_bytes(p, "matrix file"))
        for fname, text in new_text.items():
            (Path(tmp) / fname).write_text(text, encoding="utf-8")
        problems = check(Path(tmp))
        if problems:
            raise MatrixError(f"the refreshed matrix would not check: {problems[0]}; nothing "
                              "was written", "review the changes and edit the TOML by hand")
        for fname, text in new_text.items():
            fd, part = tempfile.mkstemp(dir=d, prefix=f".{fname}.")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(part, d / fname)
    return sorted(new_text)
