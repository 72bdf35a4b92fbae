"""The nearest requests that resolve, for a refused one: each changes one option (or splits a
GPU fleet into one image per generation), ordered by how little it changes; every one is tried
with the resolver (passed in as `fits`, so this module does not import it)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from envbuild.common.errors import ConflictError
from envbuild.common.record import record
from envbuild.common.versions import major_of, minor_of, version_key
from envbuild.core.request import TORCH_BARE, GpuRef, Parsed, Request, torch_specifier
from envbuild.core.spec import Spec
from envbuild.matrix import (
    Matrix,
)

# How the alternatives try a request: the resolver without alternatives (None when it refuses).
Fits = Callable[[Matrix, Parsed], Spec | None]

_RELAX = ("torch", "cuda", "rocm", "python", "driver", "gpus", "os", "flavor")
_TRIES = 24  # values tried per option, nearest first (it stops at the first that fits)


@record
class Alternative:
    """A request near the refused one that resolves: `changes` are Request fields to set (None
    drops the option; a fleet split into one image per generation has one change set per image),
    `text` is how it is printed, `distance` orders them (options changed, then how far)."""

    text: str
    changes: tuple[tuple[tuple[str, object], ...], ...]
    distance: tuple[int, float]

    def to_json(self) -> dict[str, object]:
        return {"text": self.text,
                "requests": [{k: list(v) if isinstance(v, tuple) else v for k, v in c}
                             for c in self.changes]}


RELAX_HINT = "change one option as below (nearest first); each alternative resolves"


def with_alternatives(err: ConflictError, m: Matrix, p: Parsed, enabled: bool,
                      fits: Fits) -> ConflictError:
    """err, with the nearest requests that `fits` resolves when `enabled` (else as it is)."""
    if not enabled:
        return err
    alts = alternatives(m, p, fits)
    err.alternatives = [a.text for a in alts]
    err.fixes = [a.to_json() for a in alts]
    if not err.hint or err.hint == RELAX_HINT:
        err.hint = RELAX_HINT if alts else (
            "no change of one option fits: start from `envbuild resolve` (no options) and add "
            "your constraints one at a time to see which pair conflicts")
    return err


def apply_changes(request: Request, changes: Iterable[tuple[str, object]]) -> Request:
    """The request with one alternative's changes made (what the user would type)."""
    return dataclasses.replace(request, **dict(changes))  # type: ignore[arg-type]




def _known(m: Matrix, key: str) -> set[str]:
    if key == "cuda":
        return {r.version for r in m.cuda if r.image}
    if key == "torch":
        return {r.version for r in m.torch}
    if key == "python":
        return {x for r in m.torch for x in r.python}
    if key == "rocm":
        return {v.version for v in m.variants if v.kind == "rocm" and v.version}
    return set()


def _steps(m: Matrix, key: str, value: str, asked: str) -> float:
    """How far `value` is from `asked` among the values envbuild knows for `key`: neighbours
    are one step apart whatever their numbers (12.9 is next to 13.0); 12.2 is no step from
    12.2.0."""
    if minor_of(value) == minor_of(asked) and key != "torch":
        return 0.0
    if key == "torch" and asked.count(".") == 2:
        value, asked = minor_of(value), minor_of(asked)
        if value == asked:
            return 0.0
    known = sorted(_known(m, key) | {value, asked}, key=version_key)
    return float(abs(known.index(value) - known.index(asked)))


def _asked_version(p: Parsed, key: str) -> str | None:
    if key == "torch":
        text = p.torch_text or ""
        return text if TORCH_BARE.fullmatch(text) else None
    value = {"cuda": p.cuda, "python": p.python, "rocm": p.rocm}.get(key)
    return value if isinstance(value, str) else None


def _nearby(m: Matrix, p: Parsed, key: str) -> list[str]:
    """Values of `key` to try instead of the requested one, nearest first."""
    asked = _asked_version(p, key)
    if key == "os":
        preferred = list(m.meta.get("os", {}).get("preference", []))
        return [o for o in preferred if o != p.os]
    if asked is None or (key == "cuda" and p.target != "cuda"):
        return []
    values = _known(m, key) - {asked}
    return sorted(values, key=lambda x: (_steps(m, key, x, asked),
                                         [-n for n in version_key(x)]))[:_TRIES]


def _set(p: Parsed, key: str, value: str) -> Parsed:
    given = p.given | {key}
    if key == "cuda":
        return dataclasses.replace(p, cuda=value, cuda_minor=value, cuda_major=None, given=given)
    if key == "torch":
        return dataclasses.replace(p, torch=torch_specifier(value), torch_text=value, given=given)
    return dataclasses.replace(p, given=given, **{key: value})  # type: ignore[arg-type]


def _resolved_distance(m: Matrix, key: str, s: Spec, p: Parsed) -> float:
    """How far the resolver's own pick (the option dropped) lands from what was asked."""
    asked = _asked_version(p, key)
    got = {"torch": s.torch, "cuda": s.cuda_image or s.torch_cuda, "python": s.python,
           "rocm": s.rocm}.get(key)
    if asked and got:
        return _steps(m, key, minor_of(got) if key != "torch" else got, asked)
    return {"driver": 50.0, "flavor": 0.5, "os": 1.0}.get(key, 10.0)


def alternatives(m: Matrix, p: Parsed, fits: Fits) -> list[Alternative]:
    """The requests nearest to `p` that resolve, each changing one option (or splitting a
    fleet), ordered by how little they change. Every one was resolved here."""
    out: list[Alternative] = []
    for key in _RELAX:
        if key not in p.given:
            continue
        if key == "gpus":
            out += _gpu_alternatives(m, p, fits)
            continue
        for value in _nearby(m, p, key):
            s = fits(m, _set(p, key, value))
            if s is not None:
                asked = _asked_version(p, key)
                out.append(Alternative(f"--{key} {value}: {_core(s)}", (((key, value),),),
                                       (1, _steps(m, key, value, asked) if asked else 1.0)))
                break
        s = fits(m, _drop(p, key))
        if s is not None:
            out.append(Alternative(_describe_drop(key, s), (((key, _DROPPED[key]),),),
                                   (1, _resolved_distance(m, key, s, p))))
    out += _image_alternatives(m, p, fits)
    out += _extension_alternatives(m, p, fits)
    out.sort(key=lambda a: a.distance)
    seen: set[str] = set()
    unique = []
    for a in out:  # one line per option and per outcome: the nearest way to it
        head, _, outcome = a.text.partition(":")
        if head not in seen and (len(a.changes) > 1 or outcome not in seen):
            seen.update((head, outcome))
            unique.append(a)
    return unique


_DROPPED: dict[str, object] = {"torch": None, "cuda": None, "rocm": None, "python": None,
                               "driver": None, "os": None, "flavor": None, "gpus": ()}


def _gpu_order(g: GpuRef) -> tuple[int, ...]:
    return version_key(g.cc) if g.cc else version_key(g.gfx.removeprefix("gfx"))


def _labels(gpus: Iterable[GpuRef]) -> tuple[str, ...]:
    return tuple(g.label for g in gpus)


def _gpu_alternatives(m: Matrix, p: Parsed, fits: Fits) -> list[Alternative]:
    """Drop only the GPUs that block (the largest fitting run of the fleet in architecture
    order: one wheel covers a window of architectures), or split the fleet into one image per
    generation; drop them all only when no part of the fleet fits."""
    fleet_ = sorted(p.gpus, key=_gpu_order)
    n = len(fleet_)

    def with_gpus(gs: Iterable[GpuRef]) -> Spec | None:
        gs = tuple(gs)
        return fits(m, dataclasses.replace(p, gpus=gs, given=p.given if gs else
                                            p.given - {"gpus"}))

    out: list[Alternative] = []
    for size in range(n - 1, 0, -1):
        for start in range(n - size + 1):
            keep = fleet_[start:start + size]
            s = with_gpus(keep)
            if s is not None:
                dropped = [g for g in p.gpus if g not in keep]
                out.append(Alternative(
                    f"without --gpu {' '.join(_labels(dropped))}: {_core(s)}",
                    ((("gpus", _labels(g for g in p.gpus if g in keep)),),), (1, float(n - size))))
        if out:
            break
    groups: list[tuple[list[GpuRef], Spec]] = []
    for g in fleet_:
        if groups:
            s = with_gpus([*groups[-1][0], g])
            if s is not None:
                groups[-1] = ([*groups[-1][0], g], s)
                continue
        s = with_gpus([g])
        if s is None:
            groups = []
            break
        groups.append(([g], s))
    if len(groups) > 1:
        import shlex  # here: only a fleet of several generations needs it

        parts = "; ".join(" ".join(f"--gpu {shlex.quote(g)}" for g in _labels(gs))
                          + f" ({_core(s)})" for gs, s in groups)
        out.append(Alternative(f"one image per GPU generation: {parts}",
                               tuple((("gpus", _labels(gs)),) for gs, _ in groups),
                               (len(groups), 0.0)))
    if not out:
        s = with_gpus(())
        if s is not None:
            out.append(Alternative(f"without --gpu {' '.join(_labels(p.gpus))}: {_core(s)}",
                                   ((("gpus", ()),),), (1, float(n))))
    return out


def _image_alternatives(m: Matrix, p: Parsed, fits: Fits) -> list[Alternative]:
    """`--cuda X.Y` names a CUDA no nvidia/cuda image is known for: the same major's wheels on
    the newest older images (they run there through minor version compatibility), and the
    plain-OS base, which needs no nvidia/cuda image at all."""
    minor = p.cuda_minor
    rel = m.cuda_release(minor) if minor else None
    if minor is None or rel is None or rel.image or p.os is not None:
        return []
    out: list[Alternative] = []
    older = sorted((r for r in m.cuda if major_of(r.version) == major_of(minor) and r.image
                    and version_key(r.version) < version_key(minor)),
                   key=lambda r: version_key(r.version), reverse=True)
    for r in older[:2]:
        s = fits(m, _set(p, "cuda", r.version))
        if s is not None:
            mvc = s.torch_cuda and version_key(s.torch_cuda) > version_key(r.version)
            out.append(Alternative(f"--cuda {r.version}: {_core(s)}" + (
                f" (the {s.variant} wheel runs on this older image through minor version "
                "compatibility)" if mvc else ""), ((("cuda", r.version),),),
                (1, _steps(m, "cuda", r.version, minor))))
    plain = [o for o in m.meta.get("os", {}).get("preference", [])
             if not any(i.os == o for i in m.images)]
    for os_id in plain[:1]:
        s = fits(m, dataclasses.replace(p, os=os_id, given=p.given | {"os"}))
        if s is not None:
            out.append(Alternative(f"--os {os_id}: {_core(s)} on the plain {s.base_image} base "
                                   "(no nvidia/cuda image needed)", ((("os", os_id),),),
                                   (1, 0.5)))
    return out


def _extension_alternatives(m: Matrix, p: Parsed, fits: Fits) -> list[Alternative]:
    """With --with: the request without one extension, with --build-extensions (compiled for the
    --gpu archs) when GPUs are named, and on linux/amd64 (where most extension wheels are) when
    another platform was asked for."""
    out: list[Alternative] = []
    for w in p.extensions:
        rest = tuple(x for x in p.extensions if x is not w)
        alone = p.build_extensions and not rest  # --build-extensions needs a --with
        s = fits(m, dataclasses.replace(p, extensions=rest,
                                        build_extensions=p.build_extensions and bool(rest)))
        if s is not None:
            changes: tuple[tuple[str, object], ...] = (
                ("extensions", tuple(x.text for x in rest)),
                *((("build_extensions", False),) if alone else ()))
            what = f"without --with {w.text}" + (" and --build-extensions" if alone else "")
            out.append(Alternative(f"{what}: {_core(s)}", (changes,), (1, 2.0)))
    if p.extensions and not p.build_extensions and p.platform == "linux/amd64" and \
            any(g.vendor == "nvidia" and g.cc for g in p.gpus):
        s = fits(m, dataclasses.replace(p, build_extensions=True))
        if s is not None:
            built = ", ".join(e["name"] for e in s.extensions if e["where"] == "sdist")
            out.append(Alternative(f"--build-extensions: {_core(s)} ({built} compiled in the "
                                   "builder stage)", ((("build_extensions", True),),), (1, 1.5)))
    if p.extensions and p.platform != "linux/amd64":
        s = fits(m, dataclasses.replace(p, platform="linux/amd64"))
        if s is not None:
            out.append(Alternative(f"--platform linux/amd64: {_core(s)}",
                                   ((("platform", "linux/amd64"),),), (1, 1.0)))
    return out


def _core(s: Spec) -> str:
    core = f"torch {s.torch} ({s.variant}), Python {s.python}"
    if s.extensions:
        core += ", " + ", ".join(f"{e['name']} {e['version']}" for e in s.extensions)
    if s.cuda_image:
        core += f", CUDA image {s.cuda_image}"
    if s.min_driver:
        core += f", driver >= {s.min_driver}"
    return core


def _drop(p: Parsed, key: str) -> Parsed:
    changes: dict[str, object] = {"given": p.given - {key}}
    if key == "torch":
        changes.update(torch=None, torch_text=None)
    elif key == "cuda":
        changes.update(cuda=None, cuda_minor=None, cuda_major=None)
    elif key == "gpus":
        changes.update(gpus=())
    elif key == "flavor":
        changes.update(flavor="base")
    else:
        changes[key] = None
    return dataclasses.replace(p, **changes)  # type: ignore[arg-type]


def _describe_drop(key: str, s: Spec) -> str:
    core = _core(s)
    if key == "cuda" and not s.cuda_image:
        return f"without --cuda: {core} on the plain {s.base_image} base"
    if key == "cuda" and s.torch_cuda and s.cuda_image \
            and version_key(s.torch_cuda) > version_key(minor_of(s.cuda_image)):
        return (f"without --cuda: {core} (the {s.variant} wheel runs on the CUDA "
                f"{minor_of(s.cuda_image)} image through minor version compatibility)")
    if key == "driver":
        return f"without --driver (a driver >= {s.min_driver}): {core}"
    if key == "flavor":
        return f"--flavor base: {core}"
    return f"without --{key}: {core}"


