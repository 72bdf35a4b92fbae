"""The resolver: a pure function (request, matrix) -> spec, with every decision explained.

Preference order: the newest torch release that satisfies everything, then its newest
qualifying wheel variant. A request that nothing satisfies raises ConflictError naming the
conflict and the nearest valid alternatives (found by relaxing one given option at a time:
envbuild.core.alternatives). Each candidate is checked by its target's part (cuda_part,
rocm_part, the CPU and MPS parts below) with the shared pieces of envbuild.core.candidate.
"""

from __future__ import annotations

import dataclasses

from envbuild.common.errors import ConflictError, UsageError
from envbuild.common.versions import major_of, minor_of, version_key
from envbuild.core import compat, platforms, targets
from envbuild.core.alternatives import RELAX_HINT, with_alternatives
from envbuild.core.candidate import (
    Reject,
    Trace,
    candidate_releases,
    make_spec,
    pick_os,
    pick_python,
)
from envbuild.core.cuda_part import check_host, resolve_cuda
from envbuild.core.request import Parsed, Request, parse
from envbuild.core.rocm_part import resolve_rocm
from envbuild.core.spec import Spec
from envbuild.matrix import (
    Matrix,
    TorchPatch,
    TorchRelease,
    Variant,
)


def _resolve_cpu(m: Matrix, p: Parsed, rel: TorchRelease, patch: TorchPatch, v: Variant,
                 t: Trace) -> Spec:
    os_info = pick_os(m, [o.id for o in m.oses], rel, p, t, "a CPU image")
    python, source = pick_python(m, rel, os_info, p, t)
    t.add(f"base image {os_info.image}: a slim {os_info.id} image; the CPU wheel needs no GPU "
          "libraries")
    return make_spec(m, p, rel, patch, v, t, python=python, python_source=source, os_id=os_info.id,
                     base_image=os_info.image)


def _resolve_mps(m: Matrix, p: Parsed, rel: TorchRelease, patch: TorchPatch, v: Variant,
                 t: Trace) -> Spec:
    if not rel.macos_arm64:
        raise Reject(f"torch {rel.version} has no macOS arm64 wheels")
    python, _ = pick_python(m, rel, None, p, t)
    floor = compat.mps_floor(m, rel.version)
    t.add(f"native macOS arm64 environment (no container: macOS GPUs cannot be reached from "
          f"Docker); MPS needs macOS >= {floor} with torch {rel.version}")
    return make_spec(m, p, rel, patch, v, t, python=python, python_source="native", os_id="macos",
                     base_image=None, min_macos=floor, variant_tag="mps",
                     index_url=str(m.meta["torch"].get("pypi_index", "")))


# The target registry (envbuild/core/targets.py) names each target's wheel kind and resolver part.
_KIND = {name: t.wheel_kind for name, t in targets.REGISTRY.items()}
_PARTS = {"cuda": resolve_cuda, "rocm": resolve_rocm, "cpu": _resolve_cpu,
          "native": _resolve_mps}
_RESOLVERS = {name: _PARTS[t.resolver] for name, t in targets.REGISTRY.items()}


def _ordered_variants(m: Matrix, rel: TorchRelease, kind: str,
                      default_first: bool = False) -> list[Variant]:
    """Newest CUDA/ROCm first; with default_first, the PyPI default (stable) variant leads."""
    vs = [v for v in m.variants_of(rel.version) if v.kind == kind]
    vs.sort(key=lambda v: version_key(v.version), reverse=True)
    if default_first:
        vs.sort(key=lambda v: v.tag != rel.default_variant)
    return vs


def resolve_parsed(m: Matrix, p: Parsed, alternatives: bool = True) -> Spec:
    """The spec, or ConflictError; with `alternatives`, the error carries the nearest requests
    that fit (each one resolved here), else it is raised bare (the alternatives' own probes).
    On a platform other than linux/amd64 the refusal says which platform's wheels it means."""
    try:
        on = platforms.on_platform(m, p.platform)
        if p.extensions and p.extension_facts == "verified":
            try:  # facts a primary source confirmed first; the others only where none fits
                return _resolve_on(on, p, alternatives=False)
            except ConflictError:
                pass
            try:
                return _resolve_on(on, dataclasses.replace(p, extension_facts="any"), False)
            except ConflictError as e:  # the alternatives start from the request as asked
                if not p.build_extensions:
                    raise _with_alternatives(e, m, p, alternatives) from None
            try:  # --build-extensions: a prebuilt wheel on any torch first, then a source build
                return _resolve_on(on, dataclasses.replace(p, extension_facts="build"), False)
            except ConflictError as e:
                raise _with_alternatives(e, m, p, alternatives) from None
        return _resolve_on(on, p, alternatives)
    except ConflictError as e:
        if p.platform != platforms.AMD64 and p.platform not in e.message:
            e.message = f"{e.message} (on {p.platform})"
        raise


def _resolve_on(m: Matrix, p: Parsed, alternatives: bool) -> Spec:
    if p.target == "cuda":
        check_host(m, p)
    releases = candidate_releases(m, p)
    if not releases:
        known = [r.version for r in m.torch]
        raise _with_alternatives(ConflictError(
            f"no torch release envbuild knows matches {p.torch_text!r}",
            f"known torch releases: {known[0]} … {known[-1]}"), m, p, alternatives)
    if p.variant is not None:
        _check_variant(m, p, releases)
    _precheck(m, p, releases, alternatives)
    if p.cuda_major is not None and p.cuda_minor is None:
        return _resolve_major(m, p, alternatives)
    found = _search(m, p, releases)
    if isinstance(found, Spec):
        return _on_platform(m, p, found)
    raise _conflict(m, p, releases, found, alternatives)


def _on_platform(m: Matrix, p: Parsed, spec: Spec) -> Spec:
    """The platform's line in the trace, and PyPI as the index where the platform's wheels of
    that variant are on PyPI only."""
    if spec.platform in (None, platforms.AMD64):
        return spec
    how = "--platform" if "platform" in p.given else "this host's platform"
    release = minor_of(spec.torch)
    w = m.platform_wheel(release, spec.variant, p.platform)
    where = {"pypi": "on PyPI", "index": "on the PyTorch index", "both": "on PyPI and the "
             "PyTorch index"}.get(w.where if w else "", "")
    line = (f"platform {p.platform} ({how}): torch {release} {spec.variant} has {p.platform} "
            f"wheels {where}" + (f", built for {' '.join(spec.archs)}" if spec.archs else ""))
    index = platforms.index_of(m, release, spec.variant, p.platform)
    return dataclasses.replace(spec, index_url=index or spec.index_url,
                               trace=(*spec.trace, line))


def _fits(m: Matrix, p: Parsed) -> Spec | None:
    try:
        return resolve_parsed(m, p, alternatives=False)
    except ConflictError:
        return None


def _check_variant(m: Matrix, p: Parsed, releases: list[tuple[TorchRelease, TorchPatch]]
                   ) -> None:
    """`--torch X.Y.Z+TAG`: the release must publish that variant."""
    if any(v.tag == p.variant for rel, _ in releases for v in m.variants_of(rel.version)):
        return
    rel, patch = releases[0]
    kind = _KIND[p.target]
    have = [v.tag for v in _ordered_variants(m, rel, kind)] or \
        [v.tag for v in m.variants_of(rel.version)]
    hint = f"pick one it has, e.g. --torch {patch.torch}+{have[0]}"
    newest = [r for r in sorted(m.torch, key=lambda r: version_key(r.version))
              if any(v.tag == p.variant for v in m.variants_of(r.version))]
    if newest:
        hint += f", or --torch {m.patches_of(newest[-1].version)[-1].torch}+{p.variant}"
    raise ConflictError(f"torch {patch.torch} has no {p.variant} wheel; it offers "
                        f"{', '.join(v.tag for v in m.variants_of(rel.version))}", hint)


def _search(m: Matrix, p: Parsed, releases: list[tuple[TorchRelease, TorchPatch]]
            ) -> Spec | list[tuple[TorchRelease, Variant, str]]:
    """The newest candidate that fits, or the rejections that explain why none does."""
    kind = _KIND[p.target]
    rejections: list[tuple[TorchRelease, Variant, str]] = []
    narrow: set[tuple[str, str]] = set()
    for rel, patch in releases:
        default_first = p.target == "cuda" and p.cuda_minor is None
        for v in _ordered_variants(m, rel, kind, default_first):
            if p.variant is not None and v.tag != p.variant:
                continue  # `--torch X.Y.Z+TAG` names the wheel
            t = Trace()
            t.add(p.target_reason)
            try:
                spec = _RESOLVERS[p.target](m, p, rel, patch, v, t)
                if p.extensions:
                    spec = _with_extensions(m, p, spec)
            except Reject as why:
                rejections.append((rel, v, str(why)))
                if why.narrow:
                    narrow.add((rel.version, v.tag))
                continue
            reasons = _why_this(m, p, rel, patch, v, rejections, narrow)
            return dataclasses.replace(
                spec, trace=(*spec.trace[:1], *p.notes, *reasons, *spec.trace[1:]))
    relevant = [r for r in rejections if (r[0].version, r[1].tag) not in narrow]
    return relevant or rejections


def _with_extensions(m: Matrix, p: Parsed, spec: Spec) -> Spec:
    """The spec with a fitting release of every --with extension (Reject: one has none)."""
    from envbuild.core.extensions import NoWheel, fit

    try:
        chosen, lines = fit(m, spec, p.gpus, p.extensions,
                            verified_only=p.extension_facts == "verified",
                            build=p.extension_facts == "build")
    except NoWheel as why:
        raise Reject(str(why)) from None
    unverified = [f"not verified against a primary source: the {c.name} {c.version} wheel facts "
                  "(`envbuild matrix show`)" for c in chosen if not c.verified]
    return dataclasses.replace(spec, extensions=tuple(c.to_json() for c in chosen),
                               trace=(*spec.trace, *lines),
                               warnings=(*spec.warnings, *unverified))


def _resolve_major(m: Matrix, p: Parsed, alternatives: bool = True) -> Spec:
    """`--cuda 12`: any CUDA 12.x. The newest torch with a 12.x wheel that fits, on the image
    the resolver picks without --cuda (the wheel's own CUDA, or the newest one the driver runs
    natively): a newer 12.x image would only raise the driver floor."""
    major = p.cuda_major
    found = _search(m, p, candidate_releases(m, p))
    if isinstance(found, Spec):
        note = (f"CUDA {major}.x: --cuda {major} means any CUDA {major}.x, so the {found.variant} "
                f"wheel (the newest {major}.x wheel that fits) on the CUDA "
                f"{minor_of(found.cuda_image or found.torch_cuda or '')} image, the oldest "
                "driver floor that carries it")
        return dataclasses.replace(found, trace=(found.trace[0], note, *found.trace[1:]))
    minors = sorted((r.version for r in m.cuda if major_of(r.version) == major and r.image),
                    key=version_key, reverse=True)
    q = dataclasses.replace(p, cuda=minors[0], cuda_minor=minors[0]) if minors else p
    err = _conflict(m, q, candidate_releases(m, q), _search_rejections(m, q), alternatives=False)
    err.message = f"no CUDA {major}.x fits; with the newest, {q.cuda_minor}: {err.message}"
    raise _with_alternatives(err, m, p, alternatives)


def _search_rejections(m: Matrix, p: Parsed) -> list[tuple[TorchRelease, Variant, str]]:
    found = _search(m, p, candidate_releases(m, p))
    return [] if isinstance(found, Spec) else found


def _no_pytorch_wheel(m: Matrix, p: Parsed, alternatives: bool) -> None:
    """A GPU only NVIDIA's JetPack builds of torch run on (a Jetson before Thor: gpus.toml
    wheels = "jetpack") has no wheel PyTorch publishes: refused, naming what to use."""
    from envbuild.core import gpus
    from envbuild.validator.rules import arch_name

    for g in p.gpus:
        row = gpus.lookup(m, g.label, g.vendor) if g.vendor == "nvidia" else None
        if row is not None and row.wheels == "jetpack":
            raise _with_alternatives(ConflictError(
                f"{row.name} ({arch_name(row.cc)}) runs JetPack's CUDA (L4T): no torch "
                "wheel on PyPI or download.pytorch.org is built for it (their aarch64 CUDA "
                "wheels are SBSA builds, for Grace and Jetson Thor)",
                "install the PyTorch wheel NVIDIA builds for your JetPack release (see NVIDIA's "
                "'Installing PyTorch for Jetson Platform'); for a CPU image, leave out --gpu "
                "and use --target cpu"), m, p, alternatives)


def _precheck(m: Matrix, p: Parsed, releases: list[tuple[TorchRelease, TorchPatch]],
              alternatives: bool = True) -> None:
    """Conflicts one option alone decides, stated as such (not as the first candidate's
    failure): a Python no torch release supports, a driver older than every CUDA image."""
    if p.python is not None and not any(p.python in r.python for r, _ in releases):
        all_py = sorted({x for r, _ in releases for x in r.python}, key=version_key)
        scope = f"torch {p.torch_text}" if p.torch_text else "no torch release envbuild knows"
        if p.torch_text:
            msg = (f"{scope} has no wheels for Python {p.python} (it supports "
                   f"{all_py[0]} … {all_py[-1]})")
        else:
            msg = (f"{scope} supports Python {p.python} (they support {all_py[0]} … "
                   f"{all_py[-1]})")
        with_py = [r.version for r in m.torch if p.python in r.python]
        hint = (f"torch {with_py[0]} … {with_py[-1]} support Python {p.python}" if with_py
                else f"use --python {all_py[0]} or newer" if version_key(p.python) <
                version_key(all_py[0]) else f"use --python {all_py[-1]} or older")
        raise _with_alternatives(ConflictError(msg, hint), m, p, alternatives)
    if p.target in ("cuda", None):
        _no_pytorch_wheel(m, p, alternatives)
    if p.target == "cuda" and p.driver is not None:
        needs = []
        for r in m.cuda:
            floor = compat.mvc_floor(m, major_of(r.version))
            if r.image and floor:
                needs.append((max(compat.ga_driver(m, r.version), floor, key=version_key), r))
        if needs:
            lowest, rel = min(needs, key=lambda x: version_key(x[0]))
            if version_key(p.driver) < version_key(lowest):
                raise _with_alternatives(ConflictError(
                    f"driver {p.driver} is older than any CUDA image envbuild knows supports: "
                    f"the oldest, CUDA {rel.version} (nvidia/cuda {rel.image}), needs >= {lowest}",
                    f"upgrade the NVIDIA driver to >= {lowest}, or use --target cpu"),
                    m, p, alternatives)


def _why_this(m: Matrix, p: Parsed, rel: TorchRelease, patch: TorchPatch, v: Variant,
              rejections: list[tuple[TorchRelease, Variant, str]],
              narrow: set[tuple[str, str]]) -> list[str]:
    lines = []
    newer = [r for r in rejections if version_key(r[0].version) > version_key(rel.version)]
    out_of_scope = sorted({r[0].version for r in newer} - {
        r[0].version for r in newer if (r[0].version, r[1].tag) not in narrow}, key=version_key)
    if out_of_scope:
        span = out_of_scope[0] if len(out_of_scope) == 1 else \
            f"{out_of_scope[0]} … {out_of_scope[-1]}"
        scope = (f"a CUDA {major_of(p.cuda_minor)}.x wheel <= {p.cuda_minor}" if p.cuda_minor
                 else f"a ROCm {p.rocm} wheel")
        lines.append(f"newer torch ({span}): none has {scope}")
    seen: dict[str, str] = {}
    for r, vv, why in newer:
        if (r.version, vv.tag) not in narrow:
            seen.setdefault(r.version, f"{vv.tag}: {why}")
    if seen:
        items = [f"{k} ({w})" for k, w in seen.items()]
        more = f"; and {len(items) - 3} more" if len(items) > 3 else ""
        lines.append("skipped newer torch: " + "; ".join(items[:3]) + more)
    what = {"cuda": f"a CUDA {major_of(v.version) if v.version else ''}.x wheel",
            "rocm": f"a ROCm {v.version} wheel", "cpu": "a CPU wheel"}[v.kind]
    if p.target == "mps":
        what = "a macOS arm64 wheel"
    bound = f" <= {p.cuda_minor}" if p.cuda_minor and v.kind == "cuda" else ""
    scope = f" matching {p.torch_text!r}" if p.torch_text else ""
    tag = "mps" if p.target == "mps" else v.tag
    lines.append(f"torch {patch.torch} is the newest release{scope} with {what}{bound} "
                 f"that fits every constraint ({tag})")
    same = [x for x in rejections if x[0].version == rel.version]
    for _, vv, why in same:
        lines.append(f"skipped {vv.tag}: {why}")
    if v.kind == "cuda" and rel.default_variant == v.tag:
        lines.append(f"{v.tag} is also the wheel a plain `pip install torch=={patch.torch}` gets "
                     "on Linux")
    if patch.torchvision and "torchvision" in p.components:
        lines.append(f"torchvision {patch.torchvision} is the release built for torch "
                     f"{patch.torch}")
    if v.kind == "cuda":
        libs = " and ".join(f"{n} {x}" for n, x in (("cuDNN", v.cudnn), ("NCCL", v.nccl)) if x)
        if libs:
            lines.append(f"{libs} come with the {v.tag} wheel as pip packages")
    return lines


def _conflict(m: Matrix, p: Parsed, releases: list[tuple[TorchRelease, TorchPatch]],
              rejections: list[tuple[TorchRelease, Variant, str]],
              alternatives: bool = True) -> ConflictError:
    return _with_alternatives(_conflict_bare(m, p, releases, rejections), m, p, alternatives)


def _conflict_bare(m: Matrix, p: Parsed, releases: list[tuple[TorchRelease, TorchPatch]],
                   rejections: list[tuple[TorchRelease, Variant, str]]) -> ConflictError:
    kind = _KIND[p.target]
    newest_rel = releases[0][0]
    with_kind = [r for r, _ in releases if _ordered_variants(m, r, kind)]
    if p.target == "cuda" and p.cuda_minor is not None:
        major = major_of(p.cuda_minor)
        same_major = [r for r, _ in releases
                      if any(major_of(v.version) == major
                             and version_key(v.version) <= version_key(p.cuda_minor)
                             for v in _ordered_variants(m, r, "cuda"))]
        if not same_major:
            offers = ", ".join(v.tag for v in sorted(_ordered_variants(m, newest_rel, "cuda"),
                                                     key=lambda v: version_key(v.version)))
            fits = [r for r in m.torch
                    if any(major_of(v.version) == major
                           and version_key(v.version) <= version_key(p.cuda_minor)
                           for v in m.variants_of(r.version) if v.kind == "cuda")]
            scope = f"torch {p.torch_text}" if p.torch_text else "no torch release"
            hint = (f"for CUDA {p.cuda_minor} use torch <= {fits[-1].version}" if fits else
                    f"no torch release has a CUDA {major}.x wheel <= {p.cuda_minor}")
            msg = (f"{scope} has no CUDA {major}.x wheel <= {p.cuda_minor}; "
                   f"torch {newest_rel.version} offers {offers}")
            if not p.torch_text:
                msg = f"no torch release has a CUDA {major}.x wheel <= {p.cuda_minor}"
            return ConflictError(msg, hint)
    if not with_kind:
        label = {"cuda": "CUDA", "rocm": "ROCm", "cpu": "CPU"}[kind]
        return ConflictError(f"torch {p.torch_text} has no {label} wheels",
                             "`envbuild matrix show torch` lists each release's variants")
    first = _headline(m, p, releases, rejections)
    if p.rocm is not None and not any(r[1].version.startswith(p.rocm) for r in rejections):
        tags = sorted({v.tag for r, _ in releases for v in _ordered_variants(m, r, "rocm")})
        first = (f"no torch release{(' matching ' + repr(p.torch_text)) if p.torch_text else ''}"
                 f" has a ROCm {p.rocm} wheel (they offer {', '.join(tags)})")
    return ConflictError(first, RELAX_HINT)


def _headline(m: Matrix, p: Parsed, releases: list[tuple[TorchRelease, TorchPatch]],
              rejections: list[tuple[TorchRelease, Variant, str]]) -> str:
    """The rejection that says what excludes the request: from a torch release that has the
    requested Python, and not a gap in envbuild's data (an image it knows no tag of)."""
    if not rejections:
        return "no candidate fits"

    def rank(r: tuple[TorchRelease, Variant, str]) -> tuple[bool, bool]:
        py_ok = p.python is None or p.python in r[0].python
        return (py_ok, not r[2].startswith("no nvidia/cuda image is known for CUDA"))

    best = max(rejections, key=rank)  # max keeps the first (newest) of equals
    newest_py = next((r.version for r, _ in releases
                      if p.python is not None and p.python in r.python), None)
    if newest_py is not None and not rank(best)[0]:  # only releases without that Python got far
        wheel = (f"a CUDA {major_of(p.cuda_minor)}.x wheel <= {p.cuda_minor}" if p.cuda_minor
                 else f"a ROCm {p.rocm} wheel" if p.rocm else "a wheel that fits the other "
                 "options")
        return (f"no torch release that supports Python {p.python} (torch <= {newest_py}) "
                f"has {wheel}")
    if newest_py is not None and newest_py != releases[0][0].version \
            and best[0].version == newest_py:
        return f"Python {p.python} needs torch <= {newest_py}, and there: {best[2]}"
    return best[2]


def _with_alternatives(err: ConflictError, m: Matrix, p: Parsed,
                       enabled: bool) -> ConflictError:
    return with_alternatives(err, m, p, enabled, _fits)


def resolve(request: Request, matrix: Matrix) -> Spec:
    """Resolve a request against the matrix; raise UsageError or ConflictError."""
    return resolve_parsed(matrix, parse(request, matrix))


def with_python_source(spec: Spec, source: str | None, m: Matrix) -> Spec:
    """The spec with `--python-source` applied: the image's Python source is part of what the
    spec says (its hash, its label, the validator's view), not only of the rendered files.
    `os` where the OS does not ship the version is refused (UsageError)."""
    if source is None or source == spec.python_source or spec.python_source == "native":
        return spec
    if source == "os":
        os_info = m.os_info(spec.os)
        if os_info is None or not os_info.ships_python(spec.python):
            ships = [o.id for o in m.oses if o.ships_python(spec.python)]
            raise UsageError(f"--python-source os: {spec.os} does not ship Python {spec.python}",
                             "leave out --python-source (a standalone CPython build)" +
                             (f", or use an OS that ships it: --os {' / '.join(ships)}"
                              if ships else ""))
    where = ("a standalone CPython build (python-build-standalone through uv)"
             if source == "standalone" else f"{spec.os}'s own packages")
    return dataclasses.replace(spec, python_source=source, trace=(
        *spec.trace, f"--python-source {source}: Python {spec.python} from {where}"))
