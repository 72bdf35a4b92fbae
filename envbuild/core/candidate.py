"""One candidate of the resolver (a torch release x wheel variant), checked: what every target
shares (the trace, the rejection, Python and OS picks, GPU coverage, glibc, the spec built)."""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING

from envbuild.common.record import record
from envbuild.common.versions import version_key
from envbuild.core import compat, targets
from envbuild.core.request import GpuRef, Parsed
from envbuild.core.spec import Spec
from envbuild.matrix import (
    Matrix,
    OsInfo,
    TorchPatch,
    TorchRelease,
    Variant,
)
from envbuild.validator import rules

if TYPE_CHECKING:
    from envbuild.core.base_facts import BaseFacts


@record(frozen=False)
class Trace:
    lines: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        self.lines.append(text)


class Reject(Exception):
    """One candidate (torch release x variant) does not fit; the message says why.

    `narrow` marks candidates outside the request's scope (another CUDA major, a newer CUDA
    than asked for): they explain the choice but never headline a conflict.
    """

    def __init__(self, message: str, narrow: bool = False) -> None:
        super().__init__(message)
        self.narrow = narrow


def arch_list(v: Variant) -> list[str]:
    """The wheel's arch list as torch.cuda.get_arch_list() prints it."""
    if v.kind == "rocm":
        return list(v.gfx)
    return rules.arch_names(v.sass, v.ptx)


def mature_python(m: Matrix, rel: TorchRelease) -> str:
    """Newest Python this release supports that an older release already supported too.

    A CPython version's first torch release is often marked experimental; one release
    cycle later the ecosystem (numpy, wheels of extensions) has caught up.
    """
    older = [r for r in m.torch if version_key(r.version) < version_key(rel.version)]
    seen_before = set(older[-1].python) if older else set()
    mature = [p for p in rel.python if p in seen_before]
    return max(mature or list(rel.python), key=version_key)


def _patch_for(m: Matrix, rel: TorchRelease, p: Parsed) -> TorchPatch | None:
    patches = m.patches_of(rel.version)
    if p.torch is not None:
        patches = [x for x in patches if p.torch.contains(x.torch, prereleases=True)]
    return max(patches, key=lambda x: version_key(x.torch)) if patches else None


def candidate_releases(m: Matrix, p: Parsed) -> list[tuple[TorchRelease, TorchPatch]]:
    """Newest first: each release with its newest patch that matches --torch; with --with, every
    matching patch (an extension may pin 2.9.0 where 2.9.1 is out)."""
    out = []
    for rel in sorted(m.torch, key=lambda r: version_key(r.version), reverse=True):
        if p.extensions:
            patches = [x for x in m.patches_of(rel.version)
                       if p.torch is None or p.torch.contains(x.torch, prereleases=True)]
            out += [(rel, x) for x in sorted(patches, key=lambda x: version_key(x.torch),
                                             reverse=True)]
            continue
        patch = _patch_for(m, rel, p)
        if patch is not None:
            out.append((rel, patch))
    return out


def pick_python(m: Matrix, rel: TorchRelease, os_info: OsInfo | None, p: Parsed,
                t: Trace) -> tuple[str, str]:
    """(python version, source): 'os' when the OS provides it, else 'standalone'."""
    if p.python is not None:
        if p.python not in rel.python:
            raise Reject(f"torch {rel.version} has no wheels for Python {p.python} "
                         f"(it supports {', '.join(rel.python)})")
        if os_info is None:
            return p.python, "native"
        if p.python == os_info.python or p.python in os_info.extra_python:
            t.add(f"Python {p.python} as requested, from {os_info.id}'s own packages")
            return p.python, "os"
        t.add(f"Python {p.python} as requested; {os_info.id} ships {os_info.python}, so it "
              "comes from a standalone CPython build (python-build-standalone through uv)")
        return p.python, "standalone"
    if os_info is None:
        py = mature_python(m, rel)
        t.add(f"Python {py}: the newest Python torch {rel.version} supports that an earlier "
              "torch release supported too (first-release support is often experimental)")
        return py, "native"
    if os_info.python in rel.python:
        t.add(f"Python {os_info.python}: the {os_info.id} system Python, which torch "
              f"{rel.version} supports (no second interpreter in the image)")
        return os_info.python, "os"
    extra = [x for x in os_info.extra_python if x in rel.python]
    if extra:
        py = max(extra, key=version_key)
        t.add(f"Python {py}: {os_info.id} ships {os_info.python}, which torch {rel.version} "
              f"does not support, but its own repositories carry {py}")
        return py, "os"
    py = mature_python(m, rel)
    t.add(f"Python {py}: {os_info.id} ships {os_info.python}, which torch {rel.version} does "
          f"not support; {py} comes from a standalone CPython build")
    return py, "standalone"


def _os_rank(o: OsInfo, rel: TorchRelease, p: Parsed, preferred: list[str]) -> tuple[int, ...]:
    py_fit = p.python in (o.python, *o.extra_python) if p.python else o.python in rel.python
    order = preferred.index(o.id) if o.id in preferred else len(preferred)
    return (0 if py_fit else 1, order)


def pick_os(m: Matrix, candidates: list[str], rel: TorchRelease, p: Parsed,
            t: Trace, what: str, first: str | None = None) -> OsInfo:
    if p.os is not None:
        if p.os not in candidates:
            raise Reject(f"{what} is not published for {p.os} (it is for "
                         f"{', '.join(sorted(candidates)) or 'no OS'})")
        info = m.os_info(p.os)
        assert info is not None
        t.add(f"OS {p.os} as requested")
        return info
    infos = [o for o in (m.os_info(c) for c in candidates) if o is not None]
    if not infos:
        raise Reject(f"{what} exists for no operating system envbuild knows")
    preferred = list(m.meta.get("os", {}).get("preference", []))
    if first is not None:
        preferred.insert(0, first)
    best = min(infos, key=lambda o: _os_rank(o, rel, p, preferred))
    t.add(f"OS {best.id}: preferred among those {what} exists for "
          f"({', '.join(sorted(candidates))}), and its Python fits")
    return best


def check_gpus(v: Variant, gpus: tuple[GpuRef, ...], t: Trace) -> None:
    for g in gpus:
        if v.kind == "rocm":
            if g.gfx not in v.gfx:
                raise Reject(f"the torch {v.release} {v.tag} wheel has no code for {g.label} "
                             f"({g.gfx}); it is built for {', '.join(v.gfx)}")
            t.add(f"{g.label} ({g.gfx}) is in the wheel's gfx list")
            continue
        how = compat.arch_covers(v.sass, v.ptx, g.cc)
        if how is None:
            raise Reject(f"the torch {v.release} {v.tag} wheel has no kernels for {g.label} "
                         f"({rules.arch_name(g.cc)}); it ships "
                         f"{', '.join(arch_list(v))}")
        if how.startswith("compute_"):
            t.add(f"{g.label} ({rules.arch_name(g.cc)}) runs through PTX {how}, JIT-compiled "
                  "at first use (slower start, same results)")
        else:
            t.add(f"{g.label} ({rules.arch_name(g.cc)}) runs the wheel's {how} cubin")


def make_spec(m: Matrix, p: Parsed, rel: TorchRelease, patch: TorchPatch, v: Variant, t: Trace,
              *, python: str, python_source: str, os_id: str, base_image: str | None,
              cuda_image: str | None = None, min_driver: str | None = None,
              max_driver: str | None = None, require_cuda: str | None = None,
              forward_compat: str | None = None, min_macos: str | None = None,
              variant_tag: str | None = None,
              index_url: str | None = None, verified: bool = True) -> Spec:
    index_base = str(m.meta["torch"]["index_base"]).rstrip("/")
    base_id = None
    if p.base is not None and base_image is not None:  # an inspected --base-image (make)
        base_image, base_id = p.base.ref, p.base.image_id
        _check_base_glibc(m, p.base, rel)
        b = p.base
        t.add(f"--base-image {b.ref} inspected ({b.image_id[:19]}): {b.os_release} "
              f"(/etc/os-release) so {os_id}; python3 {b.python or 'none'}, glibc "
              f"{b.glibc or 'unknown'}, uid 1000 {b.uid_1000 or 'free'}, gid 1000 "
              f"{b.gid_1000 or 'free'}")
    vision = patch.torchvision if "torchvision" in p.components else None
    audio = (patch.torchaudio or None) if "torchaudio" in p.components else None
    if "torchaudio" in p.components and not patch.torchaudio:
        t.add(f"no torchaudio release goes with torch {patch.torch}; left out")
    if audio and not patch.torchaudio_pinned:
        t.add(f"torchaudio {audio} is built on torch's stable ABI and pins no torch version")
    flags = [(v.verified, f"the torch {rel.version} {v.tag} wheel facts (arch list, cuDNN, "
                          "NCCL)"), (rel.verified, f"the torch {rel.version} release facts"),
             (patch.verified, f"the torch {patch.torch} companions"),
             (verified, "the base image facts"),
             (max_driver is None or bool(m.meta.get("gpus", {}).get("driver_window_verified")),
              "the last driver branch of the GPU's architecture")]
    unverified = [f"not verified against a primary source: {what} (`envbuild matrix show`)"
                  for ok, what in flags if not ok]
    return Spec(
        target=p.target,
        torch=patch.torch,
        torchvision=vision,
        torchaudio=audio,
        python=python,
        python_source=python_source,
        variant=variant_tag or v.tag,
        torch_cuda=v.version if v.kind == "cuda" else None,
        rocm=v.version if v.kind == "rocm" else None,
        cuda_image=cuda_image,
        cudnn=(v.cudnn or None) if v.kind == "cuda" else None,
        nccl=(v.nccl or None) if v.kind in ("cuda", "rocm") else None,
        os=os_id,
        flavor=p.flavor if p.target in ("cuda", "rocm") else None,
        base_image=base_image,
        index_url=index_url or f"{index_base}/{v.tag}",
        min_driver=min_driver,
        max_driver=max_driver,
        require_cuda=require_cuda,
        base_id=base_id,
        forward_compat=forward_compat,
        min_macos=min_macos,
        archs=tuple(arch_list(v)) if v.kind in ("cuda", "rocm") else (),
        gpus=tuple(g.to_json() for g in p.gpus),
        platform=p.platform if targets.get(p.target).container else None,
        components=p.components,
        trace=tuple(t.lines),
        warnings=tuple(unverified),
    )


def wheel_glibc(m: Matrix, release: str) -> str:
    """The glibc a torch release's Linux wheels need (torch.toml [meta] manylinux_glibc)."""
    rows = [(str(r), str(g)) for r, g in m.meta.get("torch", {}).get("manylinux_glibc", [])]
    fitting = [g for r, g in rows if version_key(r) <= version_key(release)]
    return fitting[-1] if fitting else ""


def _check_base_glibc(m: Matrix, base: BaseFacts, rel: TorchRelease) -> None:
    from envbuild.core.base_facts import glibc_ok

    need = wheel_glibc(m, rel.version)
    if not glibc_ok(base.glibc, need):
        raise Reject(f"--base-image {base.ref} has glibc {base.glibc}, older than the {need} "
                     f"that torch {rel.version}'s manylinux wheels need")


