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
import shlex
from collections.abc import Iterable, Sequence
from typing import Any

from envbuild.common.errors import ConflictError, EnvbuildError, UsageError
from envbuild.common.record import record
from envbuild.common.versions import branch_of, major_of, minor_of, version_key
from envbuild.core import compat, gpus
from envbuild.core.alternatives import apply_changes
from envbuild.core.fleet import Fleet, Group
from envbuild.core.request import Request
from envbuild.core.resolve import resolve
from envbuild.core.spec import Spec
from envbuild.matrix import Matrix
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
    return not cuda or v_version == cuda or v_version.startswith(cuda + ".")


def newest_with(m: Matrix, cc: str) -> tuple[str, str, str]:
    """(release, variant tag, the next release) for the newest torch wheel with a kernel (SASS
    or PTX) for compute capability cc; the next release is the one that dropped it ("" when
    none is newer, or none ever had it)."""
    having = compat.covering(m, cc)
    if not having:
        return "", "", ""
    last = having[-1]
    releases = [r.version for r in m.torch]
    i = releases.index(last.release)
    return last.release, last.tag, releases[i + 1] if i + 1 < len(releases) else ""


def last_python(m: Matrix, python: str) -> str:
    return next((r.version for r in reversed(m.torch) if python in r.python), "")


def judge(m: Matrix, g: Group, req: Request, main: Spec, target: str = "") -> Judged:
    """Group g against the target request whose fleet-wide resolution is `main`."""
    release = minor_of(main.torch)
    rel = m.torch_release(release)
    pinned = req if req.torch else dataclasses.replace(req, torch=main.torch)
    if g.python and rel is not None and g.python not in rel.python:
        last = last_python(m, g.python)
        return Judged(g, PYTHON, f"loses its Python {g.python}: torch {release} has "
                      f"{rel.python[0]}-{rel.python[-1]}" + (f"; {g.python} last in torch {last}"
                                                            if last else ""),
                      dropped_in=release, target=target)
    variants = [v for v in m.variants_of(release)
                if v.kind == "cuda" and _cuda_fits(v.version, req.cuda)]
    if not any(compat.covers(v, g.cc) for v in variants):
        arch = rules.arch_name(g.cc)
        last, tag, dropped = newest_with(m, g.cc)
        tags = " ".join(v.tag for v in variants) or "no CUDA wheel"
        text = f"loses the GPU: no {arch} in torch {release} {tags}"
        if last:
            text += f"; last in torch {last} {tag}" + (f", dropped in {dropped}" if dropped
                                                       else "")
        return Judged(g, GPU, text, arch=arch, last_with=f"{last} {tag}".strip(),
                      dropped_in=dropped, target=target)
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
        return Judged(g, GPU, f"loses the GPU: {exc.message}", arch=rules.arch_name(g.cc),
                      target=target)
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


@record(frozen=False)
class Image:
    """One image of the covering set, and the groups it serves."""

    name: str
    request: Request
    spec: Spec
    groups: list[str]
    kept: bool  # an image from before the change, kept for groups the target loses

    def argv(self) -> list[str]:
        """Its `envbuild make` command, the torch pinned to the wheel resolved now."""
        return request_argv(dataclasses.replace(self.request, torch=_exact(self.spec)))

    def to_json(self) -> dict[str, Any]:
        s = self.spec
        return {"name": self.name, "torch": s.torch, "variant": s.variant, "python": s.python,
                "os": s.os, "min_driver": s.min_driver, "kept": self.kept,
                "groups": list(self.groups), "command": shlex.join(self.argv()),
                "argv": self.argv(), "spec_hash": s.hash}


def request_argv(r: Request) -> list[str]:
    """The `envbuild make` command of a request (what the user would type to build it)."""
    out = ["envbuild", "make"]
    for flag, value in (("--target", r.target), ("--cuda", r.cuda), ("--torch", r.torch),
                        ("--python", r.python), ("--os", r.os), ("--driver", r.driver),
                        ("--platform", r.platform)):
        if value:
            out += [flag, value]
    for g in r.gpus:
        out += ["--gpu", g]
    return out


def _image_name(s: Spec, taken: Iterable[str]) -> str:
    base = f"torch{minor_of(s.torch)}-{s.variant}-py{s.python}"
    name, i, used = base, 2, set(taken)
    while name in used:
        name, i = f"{base}-{i}", i + 1
    return name


def _lower(a: str | None, b: str | None) -> str | None:
    if not a or not b:
        return a or b
    return min(a, b, key=version_key)


def _join(m: Matrix, images: list[Image], kept: bool, req: Request, group: str) -> None:
    """Add a group (its request: its GPU, its driver) to the first image of its kind that still
    resolves with it; else start a new image."""
    for img in images:
        if img.kept != kept or img.request.python != req.python:
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
    images.append(Image(_image_name(s, (i.name for i in images)), req, s, [group], kept))


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


def plan(m: Matrix, fleet: Fleet, targets: Sequence[tuple[str, Request]],
         keep: Request) -> FleetPlan:
    """Judge every group against every target request (a group takes the target that suits it
    best) and choose the images that cover the fleet; `keep` is the request from before the
    change, what a group the target loses keeps."""
    mains = []
    for name, req in targets:
        try:
            mains.append((name, req, resolve(req, m)))
        except EnvbuildError as exc:
            raise EnvbuildError(f"the target {name}: {exc.message}", exc.hint,
                                exc.alternatives, exc.exit_code) from None
    judged = []
    for g in fleet.groups:
        tries = [judge(m, g, req, main, name) for name, req, main in mains]
        judged.append(min(tries, key=lambda j: j.rank))
    images: list[Image] = []
    uncovered = []
    for j in sorted(judged, key=lambda j: version_key(j.group.cc)):
        g = j.group
        if j.status in (WORKS, DRIVER):
            assert j.spec is not None
            base = next(r for n, r, _ in mains if n == j.target)
            req = dataclasses.replace(base, torch=_exact(j.spec), gpus=(gpu_arg(m, g),),
                                      driver=g.driver if j.status == WORKS else j.need_driver)
            _join(m, images, False, req, g.name)
            continue
        req = dataclasses.replace(keep, gpus=(gpu_arg(m, g),), driver=g.driver or None,
                                  python=g.python if j.status == PYTHON else keep.python)
        try:
            _join(m, images, True, req, g.name)
        except EnvbuildError:
            uncovered.append(g.name)
    order = {g.name: i for i, g in enumerate(fleet.groups)}
    for img in images:
        img.groups.sort(key=order.__getitem__)
    return FleetPlan(tuple((n, s) for n, _, s in mains), tuple(judged),
                     tuple(sorted(images, key=lambda i: (i.kept, order[i.groups[0]]))),
                     tuple(uncovered), fleet.notes)


def image_of(p: FleetPlan, group: str) -> Image | None:
    return next((i for i in p.images if group in i.groups), None)
