"""The facts behind a size estimate: index file sizes, wheel contents, base image manifests.

The edge of envbuild/core/size.py: everything here may touch the network (through `http_get`, a
GET of envbuild/common/http.py's client) or a wheelhouse directory. Nothing here raises for an
unreachable index or registry: a missing fact becomes "unknown" with its reason, never an error.

- Index: PEP 691 JSON (`Accept: application/vnd.pypi.simple.v1+json`), whose files carry `size`
  (PEP 700); an HTML-only index (PEP 503) gives file names, and the size comes from a one-byte
  range request (Content-Range: bytes 0-0/TOTAL).
- Wheel contents: the zip central directory at the wheel's end, read with range requests: the
  uncompressed size of every member (what pip writes) and the .py bytes (pip compiles them).
- Dependencies: PEP 658 metadata (`<file>.metadata`) when the index offers it, then the newest
  version that satisfies each requirement and has a wheel for the image's Python on Linux x86_64.
- Base image: the registry manifest (Docker Registry HTTP API v2 / OCI), anonymous bearer token
  when the registry asks for one, the linux/amd64 entry of an index, the sum of its layer sizes.
"""

from __future__ import annotations

import functools
import re
import struct
import zipfile
from collections.abc import Callable, Iterable, Mapping
from email.parser import HeaderParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

from packaging.markers import InvalidMarker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from envbuild.common import simpleindex, wheelzip
from envbuild.common.boundedio import parse_json
from envbuild.common.http import Denied, Http, RegistryAuth, Reply
from envbuild.common.http import Unreachable as Unreachable
from envbuild.common.record import record
from envbuild.common.versions import minor_number
from envbuild.core import refs
from envbuild.core.size import BaseFact, SizeEstimate, WheelFact, estimate
from envbuild.core.spec import Spec

PEP691 = "application/vnd.pypi.simple.v1+json"
MAX_BODY = 64 << 20  # no index page, manifest or central directory is near this
TIMEOUT = 10.0
PYPI_SIMPLE = "https://pypi.org/simple"
# A fact the estimate cannot read is reported unknown (the total a lower bound), never an error.
_SIZE_HINT = "that part of the size estimate stays unknown; the build itself is not affected"


Response = Reply  # status, headers, body (, url)
Fetch = Callable[[str, Mapping[str, str]], Response]


@functools.cache
def _client() -> Http:  # one session (kept-alive connections) for every fetch of a run
    return Http(timeout=TIMEOUT, retries=1, agent="envbuild-size", limit=MAX_BODY)


def http_get(url: str, headers: Mapping[str, str]) -> Response:
    """GET with a time limit and a size cap; HTTP errors come back as responses."""
    return _client().get(url, headers=headers, ok=None)


# ---------------------------------------------------------------- zip central directory (pure)

def central_directory_sizes(cd: bytes) -> tuple[int, int]:
    """(sum of uncompressed sizes, sum of .py uncompressed sizes) of a zip central directory."""
    total = py = 0
    for e in wheelzip.entries(cd):
        total += e.uncompressed
        if e.name.endswith(b".py"):
            py += e.uncompressed
    return total, py


def _eocd(tail: bytes, tail_start: int) -> tuple[int, int]:
    try:
        return wheelzip.directory_span(tail, tail_start)
    except ValueError as exc:
        raise Unreachable(str(exc), _SIZE_HINT) from None


def wheel_contents_remote(fetch: Fetch, url: str, total: int) -> tuple[int, int]:
    """Read a remote wheel's central directory with range requests (two at most)."""
    start = max(0, total - (1 << 20))
    tail = _range(fetch, url, start, total - 1)
    offset, size = _eocd(tail, start)
    if offset >= start:
        cd = tail[offset - start:offset - start + size]
    else:
        if size > MAX_BODY:
            raise Unreachable("central directory larger than the size cap", _SIZE_HINT)
        cd = _range(fetch, url, offset, offset + size - 1)
    return central_directory_sizes(cd)


def _range(fetch: Fetch, url: str, first: int, last: int) -> bytes:
    r = fetch(url, {"Range": f"bytes={first}-{last}"})
    if r.status != 206:
        raise Unreachable(f"{urlsplit(url).netloc} does not answer range requests "
                          f"(HTTP {r.status})", _SIZE_HINT)
    return r.body


def _remote_size(fetch: Fetch, url: str) -> int:
    r = fetch(url, {"Range": "bytes=0-0"})
    m = re.search(r"/(\d+)$", r.headers.get("content-range", ""))
    if r.status != 206 or m is None:
        raise Unreachable(f"{urlsplit(url).netloc} gives no file size (HTTP {r.status})",
                          _SIZE_HINT)
    return int(m.group(1))


# ---------------------------------------------------------------- index pages

@record
class IndexFile:
    project: str
    filename: str
    url: str
    size: int | None
    metadata: bool  # PEP 658/714: <url>.metadata exists
    requires_python: str = ""
    yanked: bool = False


def parse_index(project: str, page_url: str, resp: Response) -> list[IndexFile]:
    """Files of a PEP 691 JSON or PEP 503 HTML project page."""
    out = []
    if resp.headers.get("content-type", "").startswith(PEP691):
        doc = parse_json(resp.body)
        for f in doc.get("files", []):
            meta = f.get("core-metadata", f.get("data-dist-info-metadata", False))
            size = f.get("size")
            out.append(IndexFile(project, str(f["filename"]), urljoin(page_url, str(f["url"])),
                                 int(size) if isinstance(size, int) else None, bool(meta),
                                 str(f.get("requires-python") or ""), bool(f.get("yanked"))))
        return out
    for link in simpleindex.links(resp.body.decode("utf-8", "replace"), page_url):
        a = link.attrs
        meta = a.get("data-core-metadata") or a.get("data-dist-info-metadata")
        out.append(IndexFile(project, link.filename, link.url, None, bool(meta),
                             a.get("data-requires-python") or "", "data-yanked" in a))
    return out


# ---------------------------------------------------------------- choosing files (pure)

def _env(python: str) -> dict[str, str]:
    return {"python_version": python, "python_full_version": python + ".0",
            "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
            "os_name": "posix", "implementation_name": "cpython",
            "platform_python_implementation": "CPython", "extra": ""}


def wheel_fits(filename: str, python: str) -> Version | None:
    """The wheel's version when it installs on CPython `python`, Linux x86_64; else None."""
    try:
        _, version, _, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return None
    cp = "cp" + python.replace(".", "")
    minor = minor_number(python)
    for t in tags:
        plat_ok = t.platform == "any" or ("linux" in t.platform and t.platform.endswith("x86_64"))
        if not plat_ok:
            continue
        if t.interpreter == cp and t.abi in (cp, "abi3", "none"):
            return version
        if t.abi == "abi3" and t.interpreter.startswith("cp3") \
                and int(t.interpreter[3:] or 0) <= minor:
            return version
        if t.abi == "none" and t.interpreter in ("py3", "py2.py3", f"py3{minor}", "py30"):
            return version
    return None


def pick(files: Iterable[IndexFile], spec: SpecifierSet, python: str,
         exact: Version | None = None) -> IndexFile | None:
    """The file pip would take: newest fitting wheel in `spec` (prereleases only if exact)."""
    best: tuple[Version, IndexFile] | None = None
    for f in files:
        if f.yanked or not f.filename.endswith(".whl"):
            continue
        v = wheel_fits(f.filename, python)
        if v is None:
            continue
        if f.requires_python:
            try:
                if not SpecifierSet(f.requires_python).contains(python + ".0"):
                    continue
            except ValueError:
                pass
        if exact is not None:
            if v != exact:
                continue
        elif v.is_prerelease or not spec.contains(v):
            continue
        if best is None or v > best[0]:
            best = (v, f)
    return best[1] if best else None


def requirements_of(metadata: str, python: str) -> list[Requirement]:
    out = []
    env = _env(python)
    for line in HeaderParser().parsestr(metadata).get_all("Requires-Dist") or []:
        try:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate(env):
                out.append(req)
        except (InvalidRequirement, InvalidMarker):
            continue
    return out


# ---------------------------------------------------------------- the lookup

class Lookup:
    """Files of projects on a list of indexes (first that has the project wins), or a wheelhouse."""

    def __init__(self, indexes: list[str], fetch: Fetch = http_get,
                 wheelhouse: Path | None = None) -> None:
        self.indexes = [i.rstrip("/") for i in indexes]
        self.fetch = fetch
        self.wheelhouse = wheelhouse
        self._files: dict[str, list[IndexFile]] = {}

    def files(self, project: str) -> list[IndexFile]:
        name = canonicalize_name(project)
        if name in self._files:
            return self._files[name]
        found: list[IndexFile] = []
        if self.wheelhouse is not None:  # relative as the user typed it: resolved below
            for p in sorted(self.wheelhouse.glob("*.whl")):
                try:
                    if canonicalize_name(parse_wheel_filename(p.name)[0]) == name:
                        found.append(IndexFile(name, p.name, p.resolve().as_uri(), p.stat().st_size,
                                               True))
                except (InvalidWheelFilename, InvalidVersion):
                    continue
        else:
            for index in self.indexes:
                page = f"{index}/{name}/"
                r = self.fetch(page, {"Accept": f"{PEP691}, text/html;q=0.1"})
                if r.status == 200:
                    try:
                        found = parse_index(name, page, r)
                    except (ValueError, KeyError, TypeError, AttributeError):
                        raise Unreachable(f"{urlsplit(page).netloc}: unreadable index page "
                                          f"for {name}", _SIZE_HINT) from None
                    break
                if r.status != 404:
                    raise Unreachable(f"{urlsplit(page).netloc}: HTTP {r.status} for {name}",
                                      _SIZE_HINT)
        self._files[name] = found
        return found

    def fact(self, f: IndexFile) -> WheelFact:
        try:
            if f.url.startswith("file:"):
                with zipfile.ZipFile(Path(unquote(urlsplit(f.url).path))) as z:
                    infos = z.infolist()
                return WheelFact(f.project, f.filename, f.size,
                                 sum(i.file_size for i in infos),
                                 sum(i.file_size for i in infos if i.filename.endswith(".py")))
            size = f.size if f.size is not None else _remote_size(self.fetch, f.url)
            unpacked, py = wheel_contents_remote(self.fetch, f.url, size)
            return WheelFact(f.project, f.filename, size, unpacked, py)
        except Unreachable as exc:
            return WheelFact(f.project, f.filename, f.size, why_unknown=str(exc))
        except (OSError, zipfile.BadZipFile, struct.error) as exc:
            return WheelFact(f.project, f.filename, f.size, why_unknown=f"unreadable: {exc}")

    def metadata(self, f: IndexFile) -> str | None:
        if f.url.startswith("file:"):
            with zipfile.ZipFile(Path(unquote(urlsplit(f.url).path))) as z:
                name = next((n for n in z.namelist()
                             if n.endswith(".dist-info/METADATA") and n.count("/") == 1), None)
                return z.read(name).decode("utf-8", "replace") if name else None
        # PyPI serves <file>.metadata for most wheels even where its JSON does not flag it
        # (core-metadata): ask anyway; a 404 means the dependencies stay unread.
        r = self.fetch(f.url + ".metadata", {})
        return r.body.decode("utf-8", "replace") if r.status == 200 else None


def collect(lookup: Lookup, pins: list[str], python: str,
            skip: Iterable[str] = ()) -> tuple[list[WheelFact], list[str], list[str]]:
    """The pinned files and the dependencies pip would add: (facts, requirements with no file
    found, notes on dependencies that could not be followed)."""
    facts: list[WheelFact] = []
    unknown: list[str] = []
    notes: list[str] = []
    seen = {canonicalize_name(s) for s in skip}
    todo = [(Requirement(p), True) for p in pins]
    while todo:
        req, pinned = todo.pop(0)
        lost = unknown if pinned else notes  # a dependency not found is a note, not a hole
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        exact = None
        specs = list(req.specifier)
        if len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version:
            exact = Version(specs[0].version)
        try:
            chosen = pick(lookup.files(name), req.specifier, python, exact)
        except Unreachable as exc:
            lost.append(f"{req}: {exc}")
            continue
        if chosen is None:
            lost.append(f"{req}: no wheel for CPython {python} on Linux x86_64 in the index")
            continue
        facts.append(lookup.fact(chosen))
        try:
            meta = lookup.metadata(chosen)
        except Unreachable:
            meta = None
        if meta is None:
            notes.append(f"{name}: dependencies not read (no PEP 658 metadata)")
            continue
        todo.extend((r, False) for r in requirements_of(meta, python))
    return facts, unknown, notes


# ---------------------------------------------------------------- base image manifests

_ACCEPT = ", ".join([
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json"])


def split_reference(ref: str) -> tuple[str, str, str]:
    """(registry API base URL, repository, tag or digest) of an image reference."""
    try:
        r = refs.parse(ref)
    except refs.RefError:
        raise Unreachable(f"cannot read the image reference {ref[:80]!r}", _SIZE_HINT) from None
    return refs.api_base(r.host), r.repo, r.reference


def base_fact(ref: str, fetch: Fetch = http_get) -> BaseFact:
    """The base image's compressed size from its registry manifest; unknown (with why) if not."""
    try:
        api, repo, tag = split_reference(ref)
        headers = {"Accept": _ACCEPT}
        scope = f"repository:{repo}:pull"
        auth = RegistryAuth(lambda _m, url, h, _b: fetch(url, h), urlsplit(api).netloc)
        r = auth.request("GET", f"{api}/{repo}/manifests/{tag}", scope, headers)
        if r.status != 200:
            return BaseFact(ref, how=f"registry answered HTTP {r.status}")
        doc: dict[str, Any] = parse_json(r.body)
        if "manifests" in doc:
            entry = next((d for d in doc["manifests"]
                          if d.get("platform", {}).get("os") == "linux"
                          and d.get("platform", {}).get("architecture") == "amd64"), None)
            if entry is None:
                return BaseFact(ref, how="no linux/amd64 image in the manifest index")
            r = auth.request("GET", f"{api}/{repo}/manifests/{entry['digest']}", scope, headers)
            if r.status != 200:
                return BaseFact(ref, how=f"registry answered HTTP {r.status}")
            doc = parse_json(r.body)
        layers = doc.get("layers")
        if not isinstance(layers, list):
            return BaseFact(ref, how="manifest without layers")
        size = sum(int(x.get("size", 0)) for x in layers)
        return BaseFact(ref, compressed=size,
                        how=f"registry manifest ({len(layers)} layers, linux/amd64)")
    except Denied:
        return BaseFact(ref, how="registry refuses anonymous access")
    except Unreachable as exc:
        return BaseFact(ref, how=f"offline or unreachable ({exc})")
    except (ValueError, KeyError, TypeError, AttributeError):
        return BaseFact(ref, how="unreadable manifest")


# ---------------------------------------------------------------- the whole estimate

def _no_userinfo(url: str) -> str:
    p = urlsplit(url)
    host = p.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{p.port}" if p.port else "")
    return p._replace(netloc=netloc, query="", fragment="").geturl()


def exact_pins(pip: Iterable[str]) -> tuple[list[str], list[str]]:
    """User requirements pinned to one version (estimable) and the rest (named, not counted)."""
    pinned, other = [], []
    for line in pip:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            other.append(line)
            continue
        specs = list(req.specifier)
        if req.url is None and len(specs) == 1 and specs[0].operator == "==" \
                and "*" not in specs[0].version:
            pinned.append(f"{req.name}=={specs[0].version}")
        else:
            other.append(line)
    return pinned, other


def gather(spec: Spec, sizes: Mapping[str, Any], *, base_image: str | None = None,
           base_on_disk: int | None = None, wheelhouse: Path | None = None,
           torch_index: str | None = None, user_index: str | None = None,
           pip: Iterable[str] = (), fetch: Fetch = http_get,
           local_tag: bool = True) -> SizeEstimate:
    """Fetch the facts for `spec` and estimate: never raises for a missing network.
    local_tag: the torch pins carry +<variant> (a PyTorch-layout index) or not (PyPI-like)."""
    from envbuild.render.context import torch_pins

    ref = base_image or spec.base_image or ""
    if base_on_disk is not None:
        base = BaseFact(ref, on_disk=base_on_disk, how="local image, size on disk")
    else:
        base = base_fact(ref, fetch)
    pypi = _no_userinfo(user_index or PYPI_SIMPLE)
    lookup = Lookup([_no_userinfo(torch_index or spec.index_url), pypi], fetch, wheelhouse)
    torch_facts, missing, notes = collect(lookup, torch_pins(spec, local_tag), spec.python)
    pinned, other = exact_pins(pip)
    user_lookup = Lookup([pypi], fetch, None)
    user_facts, user_missing, user_notes = collect(user_lookup, pinned, spec.python,
                                                   skip=[f.project for f in torch_facts])
    est = estimate(spec, base=base, torch_wheels=torch_facts, torch_unresolved=missing,
                   user_wheels=user_facts, user_unresolved=[*other, *user_missing], sizes=sizes)
    notes = [f"not counted: {u}" for u in (*notes, *user_notes)]
    return SizeEstimate(est.rows, (*est.notes, *notes))


def for_make(spec: Spec, sizes: Mapping[str, Any], real: int | None, *,
             base_image: str | None, base_on_disk: int | None, wheelhouse: Path | None,
             torch_index: str | None, user_index: str | None,
             pip: Iterable[str], local_tag: bool = True) -> dict[str, Any]:
    """make's hook: the estimate beside the built image's real size (summary and --json)."""
    from envbuild.core.size import beside

    est = gather(spec, sizes, base_image=base_image, base_on_disk=base_on_disk,
                 wheelhouse=wheelhouse, torch_index=torch_index, user_index=user_index, pip=pip,
                 local_tag=local_tag)
    return beside(est, real)
