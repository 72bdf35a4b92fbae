"""Pure: facts and the Matrix in, the list of Change out (PyPI, the PyTorch index, NVIDIA's
image tags)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from envbuild.common import simpleindex
from envbuild.common.versions import minor_of, version_key
from envbuild.features.refresh.facts import (
    COMPANIONS,
    Change,
    ExtensionFacts,
    Pins,
    PypiFacts,
    TorchFacts,
)
from envbuild.validator import rules

if TYPE_CHECKING:
    from envbuild.matrix import Matrix


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
    out: dict[str, set[str]] = {}
    for link in simpleindex.links(html, ""):
        name = link.filename
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


def diff_extensions(m: Matrix, facts: Sequence[ExtensionFacts]) -> list[Change]:
    """PyPI against matrix/extensions.toml, for review (a release row needs its wheel's build
    record read: variant, archs): releases newer than the matrix's newest, releases the matrix
    lists that PyPI no longer has, and the latest wheel's torch requirement where it differs."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    out: list[Change] = []
    for f in facts:
        rows = [r for r in m.extension_releases if r.extension == f.name and r.where == "pypi"]
        mine = {Version(r.version).public for r in rows}
        top = max(mine, key=Version, default=None)
        for v in f.versions:
            if v not in mine and (top is None or Version(v) > Version(top)):
                out.append(Change("extensions", "new-release", "extensions.toml", "release",
                                  (("extension", f.name), ("version", v)),
                                  evidence=f"PyPI has {f.name} {v}"))
        for v in sorted(mine - set(f.versions), key=Version):
            out.append(Change("extensions", "vanished-release", "extensions.toml", "release",
                              (("extension", f.name), ("version", v)),
                              evidence="no Linux x86_64 or pure wheel of it on PyPI"))
        if f.torch == "?" or f.latest not in mine:
            continue
        for r in rows:
            if Version(r.version).public == f.latest and r.platform == "linux/amd64" and \
                    SpecifierSet(r.torch) != SpecifierSet(f.torch):
                out.append(Change("extensions", "changed", "extensions.toml", "release",
                                  (("extension", f.name), ("version", r.version),
                                   ("platform", r.platform)), field="torch", old=r.torch,
                                  new=f.torch, evidence=f"Requires-Dist of {f.wheel}"))
    return out
