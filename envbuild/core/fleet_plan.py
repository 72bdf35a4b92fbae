"""`envbuild plan`: what moving a team's environment (`--to torch==2.15`, `--to cuda 13.2`,
`--to python 3.14`, a changed envbuild.toml) does to every node group of a fleet, and the
images that keep the whole fleet covered. Pure: every answer is a resolve against the matrix.

For each group, against each target image request: the target torch release either runs on it
as it is (a variant of that release covers its GPU and runs on its driver), needs a newer driver
(the variant's floor, with its branch), loses the GPU (no variant of the release has a kernel
for its arch: the newest release that had one is named, and the release after it that dropped
it), or loses its Python (the group's own Python is not among the release's). Then the images:
each group joins the first image that still resolves with its GPU added (greedy), and a group
the target loses keeps an image resolved from the request before the change.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Iterable, Sequence
from typing import Any

from envbuild.common.errors import ConflictError, EnvbuildError, UsageError
from envbuild.common.record import record
from envbuild.common.versions import branch_of, major_of, minor_of, version_key
from envbuild.core import compat, gpus, platforms
from envbuild.core.alternatives import apply_changes
from envbuild.core.fleet import Fleet, Group
from envbuild.core.request import Request, make_argv
from envbuild.core.resolve import resolve
from envbuild.core.spec import Spec
from envbuild.matrix import Matrix, Variant
from envbuild.validator import rules

CHANGE_KEYS = ("torch", "cuda", "python")
WORKS, DRIVER, PYTHON, GPU = "works", "needs-driver", "loses-python", "loses-gpu"
ORDER = (WORKS, DRIVER, PYTHON, GPU)  # best first


def change(key: str, value: str) -> tuple[str, str]:
    """A `--to` change: (torch|cuda|python, value); `torch==2.15` is ("torch", "2.15")."""
    k = key.strip().lower()
    if k not in CHANGE_KEYS:
        raise UsageError(f"--to {key[:40]!r}: not torch, cuda or python (or a team file)",
                         "examples: --to torch==2.15, --to cuda 13.2, --to python 3.14, "
                         "--to new/envbuild.toml")
    v = value.strip().removeprefix("==").strip()
    if not v or len(v) > 60:
        raise UsageError(f"--to {k}: no version", f"e.g. --to {k} "
                         + {"torch": "2.15", "cuda": "13.2", "python": "3.14"}[k])
    return k, v


def apply(base: Request, changes: Iterable[tuple[str, str]]) -> Request:
    return apply_changes(base, changes)


@record
class Judged:
    """One group against one target request."""

    group: Group
    status: str
    text: str
    spec: Spec | None = None  # the target release's variant for it (works / needs-driver)
    need_driver: str = ""  # needs-driver: the floor
    arch: str = ""  # loses-gpu: sm_XY
    last_with: str = ""  # loses-gpu: "2.14 cu126" (the newest wheel with its kernels);
    dropped_in: str = ""  # loses-gpu: the release after it; loses-python: the release
    target: str = ""  # the target image's name

    @property
    def rank(self) -> int:
        return ORDER.index(self.status)

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group.name, "gpu": self.group.gpu, "cc": self.group.cc,
                "driver": self.group.driver, "count": self.group.count, "status": self.status,
                "text": self.text, "target": self.target,
                "torch": self.spec.torch if self.spec else None,
                "variant": self.spec.variant if self.spec else None,
                "need_driver": self.need_driver or None, "arch": self.arch or None,
                "last_with": self.last_with or None, "dropped_in": self.dropped_in or None}


def _cuda_fits(v_version: str, cuda: str | None) -> bool:
    """A wheel of CUDA v_version goes in an image of `--cuda cuda`: the same major, not newer
    than its minor (the resolver's rule)."""
    if not cuda:
        return True
    if major_of(v_version) != major_of(cuda):
        return False
    return "." not in cuda or version_key(v_version) <= version_key(minor_of(cuda))


def runs_on(m: Matrix, v: Variant, cc: str) -> bool:
    """A CUDA wheel runs on compute capability cc: it has a kernel for it (SASS or PTX) and its
    CUDA is not older than the arch's first toolkit (gpus.toml min_cuda: the resolver's rule)."""
    arch = m.arch(cc)
    return compat.covers(v, cc) and (arch is None or not arch.min_cuda
                                     or version_key(v.version) >= version_key(arch.min_cuda))


def having(m: Matrix, cc: str) -> list[Variant]:
    """The CUDA wheels that run on cc, oldest release first."""
    return [v for v in compat.covering(m, cc) if runs_on(m, v, cc)]


def newest_with(m: Matrix, cc: str) -> tuple[str, str, str]:
    """(release, variant tag, the next release) for the newest torch wheel with a kernel (SASS
    or PTX) for compute capability cc; the next release is the one that dropped it ("" when
    none is newer, or none ever had it)."""
    found = having(m, cc)
    if not found:
        return "", "", ""
    last = found[-1]
    releases = [r.version for r in m.torch]
    i = releases.index(last.release)
    return last.release, last.tag, releases[i + 1] if i + 1 < len(releases) else ""


def last_python(m: Matrix, python: str) -> str:
    return next((r.version for r in reversed(m.torch) if python in r.python), "")


def _words(req: Request) -> str:
    """What a change that pins no torch asks, for a verdict: "CUDA 13.2", "Python 3.14"."""
    parts = [f"CUDA {req.cuda}" if req.cuda else "", f"Python {req.python}" if req.python
             else ""]
    return " and ".join(p for p in parts if p)


def _lost(pm: Matrix, g: Group, release: str, tags: str, target: str) -> Judged:
    """Loses the GPU against `release` (its CUDA wheels: tags): the arch, and the releases that
    had it (the newest, the one that dropped it; or the first, when the release predates it)."""
    arch = rules.arch_name(g.cc)
    last, tag, dropped = newest_with(pm, g.cc)
    first = having(pm, g.cc)[:1]
    text = f"loses the GPU: no {arch} in torch {release} {tags}"
    if first and version_key(first[0].release) > version_key(release):
        text += f"; the target predates it: first in torch {first[0].release} {first[0].tag}"
    elif last:
        text += f"; last in torch {last} {tag}" + (f", dropped in {dropped}" if dropped else "")
    return Judged(g, GPU, text, arch=arch, last_with=f"{last} {tag}".strip(),
                  dropped_in=dropped, target=target)


def _pin_excludes(m: Matrix, pm: Matrix, g: Group, pinned: Request, release: str, target: str,
                  tags: str) -> Judged | None:
    """The request's CUDA pin, not the release, leaves the GPU out (torch 2.9 has sm_100 in
    cu128, a `cuda = "12.6"` team image asks for cu126): said so, with the CUDA that keeps it,
    named only when it resolves for the group as typed. None when no variant has the arch."""
    if not pinned.cuda:
        return None
    arch = rules.arch_name(g.cc)
    having_it = [v for v in pm.variants_of(release) if v.kind == "cuda" and runs_on(pm, v, g.cc)]
    if not having_it:
        return None
    text = (f"loses the GPU: the CUDA {pinned.cuda} pin has no {arch} (torch {release} {tags}); "
            f"other torch {release} wheels have it")
    for v in having_it:
        cuda = ".".join(v.version.split(".")[:2])
        try:
            resolve(dataclasses.replace(pinned, cuda=cuda, gpus=(gpu_arg(m, g),)), m)
        except EnvbuildError:
            continue
        text = (f"loses the GPU: the CUDA {pinned.cuda} pin has no {arch} (torch {release} "
                f"{tags}); torch {release} {v.tag} has it: --to cuda {cuda}")
        break
    return Judged(g, GPU, text, arch=arch, target=target)


def _release_for(m: Matrix, on_gpu: Request, driver: str) -> Spec | None:
    """A request that pins no torch, resolved for one group: on its driver if a release runs
    there, else on its GPU alone (None: no release satisfying the request has its arch)."""
    for r in ([dataclasses.replace(on_gpu, driver=driver)] if driver else []) + [on_gpu]:
        try:
            return resolve(r, m)
        except ConflictError:
            continue
    return None


def _pythons(m: Matrix, torch: str) -> tuple[str, ...]:
    rel = m.torch_release(minor_of(torch))
    return rel.python if rel is not None else ()


def judge(m: Matrix, g: Group, req: Request, main: Spec, target: str = "") -> Judged:
    """Group g against the target request whose fleet-wide resolution is `main`, on the group's
    platform (its wheels only). A request that pins no torch (`--to python 3.14`, `--to cuda
    13.2`) is resolved for the group itself: the group loses its GPU only when no release
    satisfying the change has its arch."""
    pm = platforms.on_platform(m, g.platform)
    req = dataclasses.replace(req, platform=g.platform)
    on_gpu = dataclasses.replace(req, gpus=(gpu_arg(m, g),))
    if req.torch:
        release, pinned = minor_of(main.torch), req
    else:
        found = _release_for(m, on_gpu, g.driver)
        if found is None:
            arch = rules.arch_name(g.cc)
            asked = _words(req)
            if not any(runs_on(pm, v, g.cc) and _cuda_fits(v.version, req.cuda)
                       and (not req.python or req.python in r.python)
                       for r in pm.torch for v in pm.variants_of(r.version)
                       if v.kind == "cuda"):
                last, tag, dropped = newest_with(pm, g.cc)
                found_v = having(pm, g.cc)
                text = (f"loses the GPU: no torch {'wheel for ' + asked if asked else 'wheel'} "
                        f"on {g.platform} has {arch}")
                if req.cuda and found_v and all(version_key(v.version) > version_key(req.cuda)
                                                for v in found_v):
                    text += (f"; CUDA {req.cuda} predates it: first in torch "
                             f"{found_v[0].release} {found_v[0].tag}")
                elif last:
                    text += f"; last in torch {last} {tag}"
                return Judged(g, GPU, text, arch=arch, last_with=f"{last} {tag}".strip(),
                              dropped_in=dropped, target=target)
            return Judged(g, GPU, f"loses the GPU: {_plan_words(_no_resolve(m, on_gpu))}",
                          arch=arch, target=target)
        if g.python and g.python not in _pythons(m, found.torch):
            # the group's jobs outside images keep their Python if an older release allows
            for r in reversed(m.torch):
                if g.python in r.python and version_key(r.version) < version_key(found.torch):
                    other = _release_for(m, dataclasses.replace(on_gpu, torch=r.version),
                                         g.driver)
                    if other is not None:
                        found = other
                        break
        release, pinned = minor_of(found.torch), dataclasses.replace(req, torch=found.torch)
    rel = m.torch_release(release)
    if g.python and rel is not None and g.python not in rel.python:
        last = last_python(m, g.python)
        return Judged(g, PYTHON, f"loses its Python {g.python}: torch {release} has "
                      f"{rel.python[0]}-{rel.python[-1]}" + (f"; {g.python} last in torch {last}"
                                                            if last else ""),
                      dropped_in=release, target=target)
    variants = [v for v in pm.variants_of(release)
                if v.kind == "cuda" and _cuda_fits(v.version, req.cuda)]
    if not any(runs_on(pm, v, g.cc) for v in variants):
        tags = " ".join(v.tag for v in variants) or f"(no {g.platform} CUDA wheel)"
        pinned_out = _pin_excludes(m, pm, g, pinned, release, target, tags)
        return pinned_out or _lost(pm, g, release, tags, target)
    on_gpu = dataclasses.replace(pinned, gpus=(gpu_arg(m, g),))
    if g.driver:
        try:
            s = resolve(dataclasses.replace(on_gpu, driver=g.driver), m)
            return Judged(g, WORKS, f"works as is (torch {s.torch} {s.variant})", spec=s,
                          target=target)
        except ConflictError:
            pass
    try:
        s = resolve(on_gpu, m)
    except ConflictError as exc:
        return Judged(g, GPU, f"loses the GPU: {_plan_words(exc.message)}",
                      arch=rules.arch_name(g.cc), target=target)
    need = s.min_driver or ""
    floor = compat.mvc_floor(m, major_of(s.torch_cuda)) if s.torch_cuda else ""
    if floor and need and version_key(floor) < version_key(need):
        try:  # the lowest driver it runs on: minor-version compatibility's floor, if it resolves
            s = resolve(dataclasses.replace(on_gpu, driver=floor), m)
            need = floor
        except EnvbuildError:
            pass
    branch = f"R{branch_of(need)}" if need else "?"
    have = f"has {g.driver}" if g.driver else "its driver is not known"
    return Judged(g, DRIVER, f"needs a driver >= {need} (branch {branch}) for {s.variant}; "
                  f"{have}", spec=s, need_driver=need, target=target)


def _no_resolve(m: Matrix, req: Request) -> str:
    try:
        resolve(req, m)
    except EnvbuildError as exc:
        return exc.message
    return "?"  # pragma: no cover - called only after it failed


def _plan_words(text: str) -> str:
    """A resolver's message in plan's words: `--torch 2.15` is what `--to torch==2.15` asked."""
    text = re.sub(r",? --(torch|cuda|python) '[^']*'", "", text)  # a specifier: --to pins one
    return re.sub(r"--(torch|cuda|python) (?=\d)", r"--to \1==", text)


@record(frozen=False)
class Image:
    """One image of the covering set, and the groups it serves (all of one platform, judged
    against one target image)."""

    name: str
    request: Request
    spec: Spec
    groups: list[str]
    kept: bool  # an image from before the change, kept for groups the target loses
    target: str = ""  # the target image (team image name) its groups were judged against

    def argv(self) -> list[str]:
        """Its `envbuild make` command, the torch pinned to the wheel resolved now."""
        return make_argv(dataclasses.replace(self.request, torch=_exact(self.spec)))

    def to_json(self) -> dict[str, Any]:
        s = self.spec
        return {"name": self.name, "torch": s.torch, "variant": s.variant, "python": s.python,
                "os": s.os, "platform": s.platform, "min_driver": s.min_driver,
                "kept": self.kept, "target": self.target, "groups": list(self.groups),
                "command": shlex.join(self.argv()), "argv": self.argv(), "spec_hash": s.hash}


def _image_name(s: Spec, taken: Iterable[str]) -> str:
    base = f"torch{minor_of(s.torch)}-{s.variant}-py{s.python}" + platforms.tag_suffix(s.platform)
    name, i, used = base, 2, set(taken)
    while name in used:
        name, i = f"{base}-{i}", i + 1
    return name


def _lower(a: str | None, b: str | None) -> str | None:
    if not a or not b:
        return a or b
    return min(a, b, key=version_key)


def _join(m: Matrix, images: list[Image], kept: bool, target: str, req: Request,
          group: str, own_python: str = "") -> None:
    """Add a group (its request: its GPU, its driver, its platform) to the first image of its
    kind (kept or new, the same target image, Python and platform) that still resolves with
    it (and whose release has the group's own Python, if it declares one); else start a new
    image."""
    for img in images:
        if own_python and own_python not in _pythons(m, img.spec.torch):
            continue
        if (img.kept, img.target, img.request.python, img.request.platform) != \
                (kept, target, req.python, req.platform):
            continue
        merged = dataclasses.replace(
            img.request, gpus=tuple(dict.fromkeys((*img.request.gpus, *req.gpus))),
            driver=_lower(img.request.driver, req.driver))
        if not kept:  # the target's images stay on its torch release
            merged = dataclasses.replace(merged, torch=img.request.torch)
        try:
            s = resolve(merged, m)
        except EnvbuildError:
            continue
        if not kept and minor_of(s.torch) != minor_of(img.spec.torch):
            continue
        img.request, img.spec = merged, s
        img.groups.append(group)
        return
    s = resolve(req, m)
    images.append(Image(_image_name(s, (i.name for i in images)), req, s, [group], kept, target))


def gpu_arg(m: Matrix, g: Group) -> str:
    """How a request names the group's GPU: the matrix's name for it (what `--gpu` takes)."""
    found = gpus.lookup(m, g.gpu, "nvidia")
    return found.name if found is not None else rules.arch_name(g.cc)


def _exact(s: Spec) -> str:
    return f"{s.torch}+{s.variant}"


@record
class FleetPlan:
    targets: tuple[tuple[str, Spec], ...]  # (target image name, its fleet-wide spec)
    judged: tuple[Judged, ...]  # the best verdict of each group
    images: tuple[Image, ...]
    uncovered: tuple[str, ...]  # groups that lose the GPU with no image that covers them
    notes: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return bool(self.uncovered)

    def to_json(self) -> dict[str, Any]:
        return {"targets": [{"name": n, "torch": s.torch, "variant": s.variant,
                             "python": s.python, "spec_hash": s.hash} for n, s in self.targets],
                "groups": [j.to_json() for j in self.judged],
                "images": [i.to_json() for i in self.images],
                "uncovered": list(self.uncovered), "notes": list(self.notes)}


def _kept_requests(keep: Request, target: Request, g: Group, j: Judged) -> list[Request]:
    """What a group the target loses keeps: the request from before the change with the
    change's Python and CUDA where they still resolve, else as it was; on the group's GPU,
    driver and platform (and its own Python when that is what it loses)."""
    own: dict[str, Any] = {"driver": g.driver or None, "platform": g.platform}
    carried = dataclasses.replace(keep, python=target.python or keep.python,
                                  cuda=target.cuda or keep.cuda, **own)
    out = [carried, dataclasses.replace(keep, **own)]
    if j.status == PYTHON:
        out = [dataclasses.replace(r, python=g.python) for r in out]
    return list(dict.fromkeys(out))


def plan(m: Matrix, fleet: Fleet, targets: Sequence[tuple[str, Request]],
         keep: Request) -> FleetPlan:
    """Judge every group against every target request (a group takes the target that suits it
    best) and choose the images that cover the fleet; `keep` is the request from before the
    change, what a group the target loses keeps. Every request carries the group's platform;
    a verdict names the wheel of the image the group gets."""
    mains = []
    for name, req in targets:
        try:  # the fleet-wide answer (the release a torch pin means)
            mains.append((name, req, resolve(dataclasses.replace(
                req, platform=req.platform or platforms.AMD64), m)))
        except EnvbuildError as exc:
            raise EnvbuildError(f"the target {name}: {_plan_words(exc.message)}",
                                _plan_words(exc.hint),
                                [_plan_words(a) if isinstance(a, str) else a
                                 for a in exc.alternatives], exc.exit_code) from None
    judged = []
    for g in fleet.groups:
        tries = [judge(m, g, req, main, name) for name, req, main in mains]
        judged.append(min(tries, key=lambda j: j.rank))
    images: list[Image] = []
    uncovered = []
    for j in sorted(judged, key=lambda j: version_key(j.group.cc)):
        g = j.group
        base = next(r for n, r, _ in mains if n == j.target)
        if j.status in (WORKS, DRIVER):
            assert j.spec is not None
            req = dataclasses.replace(base, torch=_exact(j.spec), gpus=(gpu_arg(m, g),),
                                      driver=g.driver if j.status == WORKS else j.need_driver,
                                      platform=g.platform)
            # a group that declares its Python gets an image with it (its jobs run on it)
            own = dataclasses.replace(req, python=g.python) if g.python else req
            try:
                _join(m, images, False, j.target, own, g.name, g.python)
            except EnvbuildError:
                _join(m, images, False, j.target, req, g.name, g.python)
            continue
        for req in _kept_requests(keep, base, g, j):
            try:
                _join(m, images, True, j.target,
                      dataclasses.replace(req, gpus=(gpu_arg(m, g),)), g.name)
                break
            except EnvbuildError:
                continue
        else:
            uncovered.append(g.name)
    order = {g.name: i for i, g in enumerate(fleet.groups)}
    for img in images:
        img.groups.sort(key=order.__getitem__)
    final = tuple(_as_built(m, j, images) for j in judged)
    return FleetPlan(tuple((n, s) for n, _, s in mains), final,
                     tuple(sorted(images, key=lambda i: (i.kept, order[i.groups[0]]))),
                     tuple(uncovered), fleet.notes)


def _as_built(m: Matrix, j: Judged, images: Sequence[Image]) -> Judged:
    """The verdict on the wheel the group's image builds (a group joins an image whose wheel
    covers it but may be another variant than the one judged alone)."""
    img = next((i for i in images if j.group.name in i.groups), None)
    if img is None or j.spec is None or (img.spec.torch, img.spec.variant) == \
            (j.spec.torch, j.spec.variant):
        return j
    again = judge(m, j.group, dataclasses.replace(img.request, torch=_exact(img.spec), gpus=(),
                                                  driver=None), img.spec, j.target)
    return again if again.status in (WORKS, DRIVER) else j


def uncovered_text(p: FleetPlan, group: str) -> str:
    """Why a group has no image, by its verdict."""
    j = next(x for x in p.judged if x.group.name == group)
    what = (f"its Python {j.group.python}" if j.status == PYTHON
            else f"its GPU ({j.arch or rules.arch_name(j.group.cc)})")
    return f"{group} loses {what} and no image resolves for it"


def image_of(p: FleetPlan, group: str) -> Image | None:
    return next((i for i in p.images if group in i.groups), None)
