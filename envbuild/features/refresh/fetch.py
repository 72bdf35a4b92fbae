"""The fetchers: I/O only, through the one HTTP client; each turns payloads into facts with the
pure parsers."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING
from urllib.parse import quote, urljoin, urlsplit

from envbuild.common import wheelzip
from envbuild.common.errors import EnvironmentProblem
from envbuild.common.http import Http, RegistryAuth, Reply
from envbuild.common.http import first_line as _first_line
from envbuild.common.versions import version_key
from envbuild.features.refresh.diff import parse_index_page
from envbuild.features.refresh.facts import (
    COMPANIONS,
    ExtensionFacts,
    PypiFacts,
    TorchFacts,
    WheelFile,
    any_wheels,
    parse_metadata,
    parse_simple_files,
    pins_from_requires,
    python_tags,
    release_versions,
    torch_pin,
    torch_requirement,
    wheel_candidates,
    zip_directory_span,
    zip_metadata_entry,
)

if TYPE_CHECKING:
    from envbuild.matrix import Matrix

PYPI_URL = "https://pypi.org"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
MAX_TAG_PAGES = 50
MAX_METADATA_TRIES = 3  # wheels tried per release for a .metadata file (bounds the requests)


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
    data = wheelzip.member(got.body, csize, method) if got.status == 206 else None
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


def fetch_extensions(http: Http, base: str, m: Matrix) -> tuple[ExtensionFacts, ...]:
    """Each PyPI-hosted extension of matrix/extensions.toml: its PEP 691 file list (the final
    releases from the oldest the matrix lists) and its latest wheel's PEP 658 metadata (by HTTP
    range where the index serves none)."""
    from packaging.version import Version

    base = base.rstrip("/")
    out: list[ExtensionFacts] = []
    for ext in m.extensions:
        if ext.where != "pypi":
            continue
        mine = [Version(r.version).public for r in m.extension_releases
                if r.extension == ext.name and r.where == "pypi"]
        floor = min(mine, key=Version, default="0")
        files, versions = _project_files(http, base, ext.name, floor)
        latest = versions[-1] if versions else ""
        # its Linux x86_64 wheels whatever their Python tag (py39-none, cp38-abi3, py3-none)
        linux = sorted((f for f in files if f.version == latest and not f.yanked
                        and f.linux_x86_64), key=lambda f: (-f.build, f.filename))
        got = _metadata(http, linux or wheel_candidates(files, latest)) if latest else None
        out.append(ExtensionFacts(ext.name, tuple(versions), latest,
                                  torch_requirement(got[1]) if got else "?",
                                  got[2] if got else ""))
    return tuple(out)
