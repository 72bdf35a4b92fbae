"""`envbuild matrix refresh` as a use case: fetch each source, diff, report, and write the
changes (with their sources) when asked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field as dc_field
from typing import TYPE_CHECKING, Any

from envbuild.common.errors import EnvironmentProblem
from envbuild.common.http import Http
from envbuild.common.record import record
from envbuild.common.versions import minor_of
from envbuild.features.refresh.diff import (
    diff_extensions,
    diff_index,
    diff_pypi,
    diff_tags,
    pypi_notes,
)
from envbuild.features.refresh.facts import COMPANIONS, Change
from envbuild.features.refresh.fetch import (
    RANGE_NOTE,
    fetch_extensions,
    fetch_index,
    fetch_pypi,
    fetch_tags,
)
from envbuild.features.refresh.tomledit import apply_changes, source_entry
from envbuild.validator import rules

if TYPE_CHECKING:
    from envbuild.matrix import Matrix

SOURCES = ("pypi", "pytorch-index", "nvidia-tags", "extensions")


SOURCE_IDS = {"pypi": "S-REFRESH-PYPI", "pytorch-index": "S-REFRESH-TORCH-INDEX",
              "nvidia-tags": "S-REFRESH-NV-TAGS", "extensions": "S-REFRESH-EXTENSIONS"}


@record(frozen=False)
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
    e = checked.get("extensions")
    if e:
        out.append("extensions: " + ", ".join(f"{n} ({v['releases']} releases, latest "
                                              f"{v['latest']}: torch{v['torch'] or ' any'})"
                                              for n, v in e.items()) + " read on PyPI")
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
    elif src == "extensions":
        ext = fetch_extensions(http, pypi_url, m)
        changes += diff_extensions(m, ext)
        checked["extensions"] = {f.name: {"releases": len(f.versions), "latest": f.latest,
                                          "torch": f.torch, "wheel": f.wheel} for f in ext}
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
    "extensions": ("PyPI simple API (PEP 691) and wheel core metadata (PEP 658) of the PyPI-hosted "
                   "CUDA extensions: releases, the latest wheel's torch requirement",
                   "{pypi}/simple/"),
}


def write_changes(d: Any, changes: Sequence[Change], source_ids: Mapping[str, str],
                  pypi_url: str, day: str) -> list[str]:
    """Apply to copies, check the copies as a whole, then replace the files (nothing is
    half-written)."""
    import tempfile
    from pathlib import Path

    from envbuild.common.boundedio import read_bytes, read_text
    from envbuild.common.errors import MatrixError
    from envbuild.common.files import write_atomic
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
            write_atomic(d / fname, text)
    return sorted(new_text)
