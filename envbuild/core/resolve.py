"""The resolver: a pure function (request, matrix) -> spec, with every decision explained.

Preference order: the newest torch release that satisfies everything, then its newest
qualifying wheel variant. A request that nothing satisfies raises ConflictError naming the
conflict and the nearest valid alternatives (found by relaxing one given option at a time).
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from envbuild.common.errors import ConflictError, UsageError
from envbuild.core import compat, targets
from envbuild.core.gpu_window import FleetWindow, branch_of, fleet, window
from envbuild.core.request import TORCH_BARE, GpuRef, Parsed, Request, parse, torch_specifier
from envbuild.matrix import (
    CompatPackage,
    CudaImage,
    Matrix,
    OsInfo,
    TorchPatch,
    TorchRelease,
    Variant,
)

if TYPE_CHECKING:
    from envbuild.core.base_facts import BaseFacts
from envbuild.common.versions import major_of, minor_of, version_key
from envbuild.core.spec import Spec
from envbuild.validator import rules


@dataclass
class _Trace:
    lines: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        self.lines.append(text)


class _Reject(Exception):
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


def _releases(m: Matrix, p: Parsed) -> list[tuple[TorchRelease, TorchPatch]]:
    out = []
    for rel in sorted(m.torch, key=lambda r: version_key(r.version), reverse=True):
        patch = _patch_for(m, rel, p)
        if patch is not None:
            out.append((rel, patch))
    return out


def _pick_python(m: Matrix, rel: TorchRelease, os_info: OsInfo | None, p: Parsed,
                 t: _Trace) -> tuple[str, str]:
    """(python version, source): 'os' when the OS provides it, else 'standalone'."""
    if p.python is not None:
        if p.python not in rel.python:
            raise _Reject(f"torch {rel.version} has no wheels for Python {p.python} "
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


def _pick_os(m: Matrix, candidates: list[str], rel: TorchRelease, p: Parsed,
             t: _Trace, what: str, first: str | None = None) -> OsInfo:
    if p.os is not None:
        if p.os not in candidates:
            raise _Reject(f"{what} is not published for {p.os} (it is for "
                          f"{', '.join(sorted(candidates)) or 'no OS'})")
        info = m.os_info(p.os)
        assert info is not None
        t.add(f"OS {p.os} as requested")
        return info
    infos = [o for o in (m.os_info(c) for c in candidates) if o is not None]
    if not infos:
        raise _Reject(f"{what} exists for no operating system envbuild knows")
    preferred = list(m.meta.get("os", {}).get("preference", []))
    if first is not None:
        preferred.insert(0, first)
    best = min(infos, key=lambda o: _os_rank(o, rel, p, preferred))
    t.add(f"OS {best.id}: preferred among those {what} exists for "
          f"({', '.join(sorted(candidates))}), and its Python fits")
    return best


def _check_gpus(v: Variant, gpus: tuple[GpuRef, ...], t: _Trace) -> None:
    for g in gpus:
        if v.kind == "rocm":
            if g.gfx not in v.gfx:
                raise _Reject(f"the torch {v.release} {v.tag} wheel has no code for {g.label} "
                              f"({g.gfx}); it is built for {', '.join(v.gfx)}")
            t.add(f"{g.label} ({g.gfx}) is in the wheel's gfx list")
            continue
        how = compat.arch_covers(v.sass, v.ptx, g.cc)
        if how is None:
            raise _Reject(f"the torch {v.release} {v.tag} wheel has no kernels for {g.label} "
                          f"({rules.arch_name(g.cc)}); it ships "
                          f"{', '.join(arch_list(v))}")
        if how.startswith("compute_"):
            t.add(f"{g.label} ({rules.arch_name(g.cc)}) runs through PTX {how}, JIT-compiled "
                  "at first use (slower start, same results)")
        else:
            t.add(f"{g.label} ({rules.arch_name(g.cc)}) runs the wheel's {how} cubin")


def _min_driver(m: Matrix, image_minor: str, wheel_cuda: str, t: _Trace,
                fw: FleetWindow | None = None, plain: bool = False) -> str:
    """max(what the image's NVIDIA_REQUIRE_CUDA demands, the wheel's minor-version-compatibility
    floor, the first driver branch of every GPU). On a plain base envbuild writes
    NVIDIA_REQUIRE_CUDA itself: cuda>=X.0 of the wheel's major, so only the floor counts."""
    need_wheel = compat.mvc_floor(m, major_of(wheel_cuda))
    assert need_wheel
    if plain:
        need_image = compat.ga_driver(m, image_minor) or need_wheel
        t.add(f"NVIDIA_REQUIRE_CUDA=cuda>={image_minor}, written by envbuild on the plain base: "
              f"the container runtime refuses drivers older than CUDA {image_minor} "
              "(no more: the wheel needs no newer minor, see below)")
    else:
        need_image = compat.ga_driver(m, image_minor)
        assert need_image
        t.add(f"the nvidia/cuda {image_minor} base image sets NVIDIA_REQUIRE_CUDA=cuda>="
              f"{image_minor}: the driver must support CUDA {image_minor} natively "
              f"(>= {need_image})")
    t.add(f"the {rules.cuda_tag(wheel_cuda)} wheel bundles its CUDA {wheel_cuda} libraries and "
          f"runs on any CUDA {major_of(wheel_cuda)}.x driver >= {need_wheel} through minor "
          "version compatibility")
    needs = [need_image, need_wheel]
    raising = fw.raising() if fw is not None else None
    if raising is not None and raising.first_driver:
        t.add(f"{raising.label} is driven from R{branch_of(raising.first_driver)} on (the CUDA "
              f"{raising.min_cuda} GA driver {raising.first_driver} is the first that knows "
              f"{raising.arch_name})")
        needs.append(raising.first_driver)
    return max(needs, key=version_key)


def _image_minor_for_driver(m: Matrix, v: Variant, p: Parsed, t: _Trace,
                            cap: int | None = None) -> str:
    """The base image's CUDA when only the driver is given (or a GPU caps the driver branch):
    the wheel's own CUDA if the driver supports it natively, else the newest image of the same
    major that it does (the wheel bundles its CUDA libraries and runs there through minor version
    compatibility). The devel flavor keeps nvcc equal to the wheel's CUDA, for building
    extensions."""
    driver = p.driver
    if driver is None and cap is not None:
        driver = f"{cap}.999.999"
    if driver is None or p.flavor == "devel":
        return v.version
    if compat.how_runs(m, driver, v.version) == "native":
        return v.version
    older = [r for r in m.cuda if major_of(r.version) == major_of(v.version) and r.image
             and version_key(r.version) < version_key(v.version)
             and compat.how_runs(m, driver, r.version) == "native"]
    if not older:
        return v.version
    best = max(older, key=lambda r: version_key(r.version))
    who = f"the {p.driver} driver" if p.driver is not None else f"an R{cap} driver (the GPU's last)"
    t.add(f"CUDA {best.version} base image: the newest {who} supports natively; "
          f"the {v.tag} wheel runs on it through minor version compatibility")
    return best.version


def _gpu_fleet(m: Matrix, p: Parsed) -> FleetWindow:
    return fleet(window(m, g.cc, f"{g.label} ({rules.arch_name(g.cc)})")
                 for g in p.gpus if g.vendor == "nvidia" and g.cc)


def _check_gpu_toolkit(v: Variant, fw: FleetWindow) -> None:
    """PTX JIT does not carry a wheel across an architecture its toolkit predates: cuBLAS and
    cuDNN in that toolkit have no kernels for it."""
    for w in fw.windows:
        if version_key(v.version) < version_key(w.min_cuda):
            raise _Reject(f"{w.label} needs a CUDA >= {w.min_cuda} wheel (its architecture, "
                          f"{w.arch_name}, is newer than the {v.tag} wheel's toolkit and "
                          "libraries)")


def check_host(m: Matrix, p: Parsed) -> None:
    """An impossible host (a driver no requested GPU can run with, or GPUs no single driver
    drives) is refused before any torch release is tried."""
    fw = _gpu_fleet(m, p)
    if fw.empty():
        low, high = fw.raising(), fw.capping()
        assert low is not None and high is not None
        raise ConflictError(
            f"no driver drives both {low.label} ({low.describe()}) and {high.label} "
            f"({high.describe()})", "build one image per GPU generation (one --gpu each)")
    if p.driver is None:
        return
    for w in fw.outside(p.driver):
        side = "older than" if w.too_old(p.driver) else "newer than"
        raise ConflictError(
            f"driver {p.driver} (R{branch_of(p.driver)}) cannot drive {w.label}: it is {side} "
            f"the {w.describe()} that drive {w.arch_name} GPUs",
            "check `nvidia-smi` on that host; a GPU outside its driver window is not usable")


def _plain_base(m: Matrix, p: Parsed, image_version: str | None) -> bool:
    """CUDA on the plain OS image: `--os` names an OS NVIDIA publishes no nvidia/cuda base image
    of this CUDA for (debian12 has none at all). The wheel brings the whole CUDA userspace; the
    template writes what the base image would have set for the container runtime."""
    if p.os is None or p.flavor != "base":
        return False
    images = m.images_for(image_version) if image_version else []
    return p.os not in {i.os for i in images if p.flavor in i.flavors}


def _driver_cap(fw: FleetWindow, min_driver: str, what: str, t: _Trace) -> str | None:
    """The newest driver branch a capping GPU allows (None: no cap); refused when the image
    needs a newer driver than that GPU is driven by."""
    capping = fw.capping()
    if capping is None or capping.last_branch is None:
        return None
    if branch_of(min_driver) > capping.last_branch:
        raise _Reject(f"{what} need a driver >= {min_driver}, but {capping.label} is driven "
                      f"only by {capping.describe()}")
    t.add(f"driver branch R{capping.last_branch} or older: {capping.label} is not driven by "
          f"newer branches (R{capping.last_branch} is the last that supports "
          f"{capping.arch_name})")
    return str(capping.last_branch)


def _resolve_plain_cuda(m: Matrix, p: Parsed, rel: TorchRelease, patch: TorchPatch,
                        v: Variant, t: _Trace, fw: FleetWindow) -> Spec:
    """The CUDA wheel on the plain `--os` image (see _plain_base), or on an inspected
    --base-image that does not set NVIDIA_REQUIRE_CUDA itself."""
    os_info = m.os_info(p.os or "")
    assert os_info is not None
    base = p.base.ref if p.base is not None else os_info.image
    require = f"{major_of(v.version)}.0"
    _check_gpus(v, p.gpus, t)
    min_driver = _min_driver(m, require, v.version, t, fw, plain=True)
    if p.driver is not None and version_key(p.driver) < version_key(min_driver):
        raise _Reject(f"driver {p.driver} is older than the {min_driver} that the {v.tag} wheel "
                      f"needs (torch {rel.version})")
    max_driver = _driver_cap(fw, min_driver, f"the {v.tag} wheel", t)
    if p.base is None:
        t.add(f"OS {os_info.id} as requested: NVIDIA publishes no nvidia/cuda "
              f"{p.cuda_minor or ''} base image for it, so the plain {os_info.image} image is "
              "the base".replace("  ", " "))
    python, source = _pick_python(m, rel, os_info, p, t)
    t.add(f"base image {base}: the {v.tag} wheel's nvidia-* packages bring the CUDA "
          "userspace; envbuild writes what the container runtime reads (NVIDIA_VISIBLE_DEVICES, "
          "NVIDIA_DRIVER_CAPABILITIES, NVIDIA_REQUIRE_CUDA) and the loader paths of the driver "
          "libraries it mounts (/usr/local/nvidia/lib64). Saved: the base image's own CUDA "
          "runtime and a registry pull of nvidia/cuda. Left out: NVIDIA's forward-compatibility "
          "libraries (/usr/local/cuda/compat), the brand clauses of NVIDIA_REQUIRE_CUDA, and "
          "nvcc (`--flavor devel` needs an nvidia/cuda OS)")
    return _spec(m, p, rel, patch, v, t, python=python, python_source=source, os_id=os_info.id,
                 base_image=base, min_driver=min_driver, max_driver=max_driver,
                 require_cuda=require, verified=os_info.verified)


def _resolve_nvidia_base(m: Matrix, p: Parsed, rel: TorchRelease, patch: TorchPatch,
                         v: Variant, t: _Trace, fw: FleetWindow) -> Spec:
    """The CUDA wheel on an inspected --base-image that sets NVIDIA_REQUIRE_CUDA itself (an
    nvidia/cuda image, a mirror of one, or a team's image built on one): its CUDA is the
    image's, its brand clauses and cuda-compat stay."""
    b = p.base
    assert b is not None and b.require_cuda
    os_info = m.os_info(p.os or "")
    assert os_info is not None
    image_minor = b.require_cuda
    if m.cuda_release(image_minor) is None:
        raise ConflictError(f"--base-image {b.ref} requires CUDA {image_minor} (its "
                            "NVIDIA_REQUIRE_CUDA), a CUDA envbuild has no driver facts for",
                            "use a base of a CUDA `envbuild matrix show cuda` lists")
    if p.cuda_minor is not None and p.cuda_minor != image_minor:
        raise ConflictError(f"--cuda {p.cuda} but --base-image {b.ref} is CUDA {image_minor} "
                            "(its NVIDIA_REQUIRE_CUDA)",
                            f"drop --cuda (the base's CUDA is used), or give --cuda {image_minor}")
    if major_of(v.version) != major_of(image_minor):
        raise _Reject(f"--base-image {b.ref} requires CUDA {image_minor} (its "
                      f"NVIDIA_REQUIRE_CUDA); torch {rel.version} {v.tag} is a CUDA "
                      f"{major_of(v.version)}.x wheel", narrow=True)
    _check_gpus(v, p.gpus, t)
    min_driver = _min_driver(m, image_minor, v.version, t, fw)
    if p.driver is not None and version_key(p.driver) < version_key(min_driver):
        raise _Reject(f"driver {p.driver} is older than the {min_driver} that --base-image "
                      f"{b.ref} with the {v.tag} wheel needs")
    max_driver = _driver_cap(fw, min_driver, f"--base-image {b.ref} with the {v.tag} wheel", t)
    python, source = _pick_python(m, rel, os_info, p, t)
    t.add(f"base image {b.ref}: an nvidia/cuda base (its environment sets "
          f"NVIDIA_REQUIRE_CUDA=cuda>={image_minor}"
          + (f" and CUDA_VERSION={b.cuda_version}" if b.cuda_version else "")
          + "): its CUDA runtime, cuda-compat and brand clauses stay; the wheel brings the "
          "libraries torch uses")
    return _spec(m, p, rel, patch, v, t, python=python, python_source=source, os_id=os_info.id,
                 base_image=b.ref, cuda_image=b.cuda_version or image_minor,
                 min_driver=min_driver, max_driver=max_driver, verified=os_info.verified)


def compat_refusal(m: Matrix, gpus: Iterable[GpuRef]) -> str | None:
    """Why NVIDIA's forward compatibility cannot serve these GPUs (None: it can)."""
    fc = m.meta.get("cuda", {}).get("forward_compat", {})
    allowed, jetson = set(fc.get("gpus", [])), set(fc.get("jetson", []))
    for g in gpus:
        if g.label in jetson:
            return (f"{g.label}: Jetson boards take NVIDIA's cuda-compat-orin package (aarch64, "
                    "JetPack), which envbuild does not render")
        if g.label not in allowed:
            return (f"NVIDIA supports forward compatibility only on data-center GPUs, select NGC "
                    f"Server Ready RTX SKUs and Jetson boards; {g.label} is not among them (its "
                    "first CUDA call would fail with error 804, "
                    "cudaErrorCompatNotSupportedOnDevice)")
    return None


def compat_package(m: Matrix, wheel_cuda: str, branch: int, arch: str = "linux-x86_64"
                   ) -> CompatPackage | None:
    """The newest forward-compatibility package of the wheel's CUDA major, at least its minor,
    that runs on this driver branch."""
    fits = [c for c in m.compat_packages if c.arch == arch
            and major_of(c.cuda) == major_of(wheel_cuda)
            and version_key(c.cuda) >= version_key(wheel_cuda) and str(branch) in c.host_branches]
    return max(fits, key=lambda c: version_key(c.version)) if fits else None


def _resolve_forward_compat(m: Matrix, p: Parsed, rel: TorchRelease, patch: TorchPatch,
                            v: Variant, t: _Trace, fw: FleetWindow) -> Spec | None:
    """--forward-compat: the wheel on a driver older than its CUDA needs, through NVIDIA's
    forward-compatibility libraries rendered into a plain-base image. None when the driver runs
    the wheel natively (the ordinary resolution then applies)."""
    assert p.driver is not None
    floor = compat.mvc_floor(m, major_of(v.version))
    assert floor
    if compat.at_least(p.driver, floor):
        return None
    if p.flavor != "base":
        raise ConflictError(f"--forward-compat builds on a plain OS base; --flavor {p.flavor} "
                            "names an nvidia/cuda image", "drop --flavor (nvcc: build extensions "
                            "in a separate devel image)")
    if p.base is not None and p.base.nvidia:
        raise ConflictError(f"--forward-compat with --base-image {p.base.ref}: an nvidia/cuda "
                            "base brings its own cuda-compat for its CUDA",
                            "use a plain OS base (or none) with --forward-compat")
    why_not = compat_refusal(m, p.gpus)
    if why_not is not None:
        raise ConflictError(f"--forward-compat: {why_not}",
                            f"upgrade the driver to >= {floor} (R"
                            f"{branch_of(floor)}) for the {v.tag} wheel, or drop "
                            "--forward-compat for a wheel this driver runs natively")
    branch = branch_of(p.driver)
    pkg = compat_package(m, v.version, branch)
    if pkg is None:
        known = sorted({b for c in m.compat_packages if major_of(c.cuda) == major_of(v.version)
                        and version_key(c.cuda) >= version_key(v.version)
                        for b in c.host_branches}, key=int)
        raise _Reject(f"no forward-compatibility package of CUDA {v.version}+ serves driver "
                      f"branch R{branch} (the known ones serve R{', R'.join(known) or ' none'})")
    _check_gpus(v, p.gpus, t)
    t.add(f"the {v.tag} wheel needs a CUDA {major_of(v.version)}.x driver >= "
          f"{floor}; the {p.driver} driver (R{branch}) runs it through NVIDIA's "
          f"forward-compatibility libraries {pkg.version} (CUDA {pkg.cuda}, from "
          f"redistrib_{pkg.redist}.json), which serve R{', R'.join(pkg.host_branches)}")
    t.add(f"{', '.join(g.label for g in p.gpus)}: data-center GPUs, which NVIDIA supports "
          "forward compatibility on; the NVIDIA container toolkit loads the libraries from "
          "/usr/local/cuda/compat when the host driver is older than they are")
    os_info = _pick_os(m, [o.id for o in m.oses], rel, p, t, "a plain OS base")
    python, source = _pick_python(m, rel, os_info, p, t)
    base = p.base.ref if p.base is not None else os_info.image
    t.add(f"base image {base}: plain, with the forward-compatibility libraries in "
          f"/usr/local/cuda-{pkg.cuda}/compat and NVIDIA_REQUIRE_CUDA=cuda>="
          f"{major_of(v.version)}.0 plus brand clauses for R{', R'.join(pkg.host_branches)} "
          "(as NVIDIA's own base images write them)")
    return _spec(m, p, rel, patch, v, t, python=python, python_source=source, os_id=os_info.id,
                 base_image=base, min_driver=p.driver, require_cuda=f"{major_of(v.version)}.0",
                 forward_compat=pkg.version, verified=pkg.verified and os_info.verified)


def _resolve_cuda(m: Matrix, p: Parsed, rel: TorchRelease, patch: TorchPatch, v: Variant,
                  t: _Trace) -> Spec:
    fw = _gpu_fleet(m, p)
    _check_gpu_toolkit(v, fw)
    if p.cuda_minor is None and p.cuda_major is not None and major_of(v.version) != p.cuda_major:
        raise _Reject(f"torch {rel.version} {v.tag} is a CUDA {major_of(v.version)}.x wheel",
                      narrow=True)
    if p.cuda_minor is not None:
        if major_of(v.version) != major_of(p.cuda_minor):
            raise _Reject(f"torch {rel.version} {v.tag} is a CUDA {major_of(v.version)}.x wheel",
                          narrow=True)
        if version_key(v.version) > version_key(p.cuda_minor):
            raise _Reject(f"torch {rel.version} {v.tag} needs CUDA {v.version} > {p.cuda_minor}",
                          narrow=True)
    if p.cuda and p.cuda.count(".") == 2 and not m.images_for(p.cuda):
        raise _Reject(f"no nvidia/cuda {p.cuda} image is known")
    if p.forward_compat and p.driver is not None:
        forward = _resolve_forward_compat(m, p, rel, patch, v, t, fw)
        if forward is not None:
            return forward
    if p.base is not None:
        on_base = _resolve_nvidia_base if p.base.nvidia else _resolve_plain_cuda
        return on_base(m, p, rel, patch, v, t, fw)
    # The image's CUDA from the driver: its reasons go in the trace only if an nvidia/cuda image
    # is the base (a plain base has no CUDA of its own).
    minor_trace = _Trace()
    image_minor = p.cuda_minor or _image_minor_for_driver(m, v, p, minor_trace, fw.last_branch)
    cuda_rel = m.cuda_release(image_minor)
    assert cuda_rel is not None
    image_version = cuda_rel.image
    if _plain_base(m, p, image_version):
        return _resolve_plain_cuda(m, p, rel, patch, v, t, fw)
    t.lines.extend(minor_trace.lines)
    if p.cuda and p.cuda.count(".") == 2:
        image_version = p.cuda
    if not image_version:
        raise _Reject(f"no nvidia/cuda image is known for CUDA {image_minor}")
    _check_gpus(v, p.gpus, t)
    min_driver = _min_driver(m, image_minor, v.version, t, fw)
    if p.driver is not None and version_key(p.driver) < version_key(min_driver):
        raise _Reject(f"driver {p.driver} is older than the {min_driver} that CUDA {image_minor} "
                      f"images need (torch {rel.version} {v.tag})")
    max_driver = _driver_cap(fw, min_driver, f"CUDA {image_minor} images with the {v.tag} wheel",
                             t)
    images = [i for i in m.images_for(image_version) if p.flavor in i.flavors]
    what = f"nvidia/cuda:{image_version}-{p.flavor}"
    os_info = _pick_os(m, [i.os for i in images], rel, p, t, what)
    python, source = _pick_python(m, rel, os_info, p, t)
    repo = str(m.meta.get("cuda", {}).get("image_repo", "nvidia/cuda"))
    img: CudaImage = next(i for i in images if i.os == os_info.id)
    t.add(f"base image {repo}:{image_version}-{p.flavor}-{os_info.id}: "
          + ("CUDA runtime only; the torch wheel brings cuDNN, cuBLAS and NCCL as pip packages, "
             "so a runtime/cudnn image would duplicate gigabytes" if p.flavor == "base" else
             f"the {p.flavor} flavor as requested"
             + (" (nvcc and headers for compiling extensions)" if p.flavor == "devel" else "")
             + ": it duplicates the CUDA libraries the torch wheel's nvidia-* packages bring "
             "(cuBLAS, cuFFT, cuSPARSE, cuSOLVER, NCCL, ...: `envbuild render` lists them with "
             "their sizes)"))
    if cuda_rel.eol:
        t.add(f"note: NVIDIA marks the CUDA {image_minor} images end-of-life; they may be deleted "
              "from registries (mirror the base image, or choose a maintained CUDA)")
    return _spec(m, p, rel, patch, v, t, python=python, python_source=source, os_id=os_info.id,
                 base_image=f"{repo}:{image_version}-{p.flavor}-{os_info.id}",
                 cuda_image=image_version, min_driver=min_driver, max_driver=max_driver,
                 verified=(img.verified and cuda_rel.verified))


def _resolve_rocm(m: Matrix, p: Parsed, rel: TorchRelease, patch: TorchPatch, v: Variant,
                  t: _Trace) -> Spec:
    if p.rocm is not None and not (v.version == p.rocm or v.version.startswith(p.rocm + ".")):
        raise _Reject(f"torch {rel.version} {v.tag} is not a ROCm {p.rocm} wheel", narrow=True)
    rocm_rel = m.rocm_release(v.version)
    assert rocm_rel is not None
    _check_gpus(v, p.gpus, t)
    dev_images = rocm_images(rocm_rel.base_image, rocm_rel.os)
    matrix_os = next(iter(dev_images), None)  # the image the matrix names leads; siblings follow
    meta = m.meta.get("rocm", {})
    if p.flavor == "devel":
        os_info = _pick_os(m, sorted(dev_images), rel, p, t,
                           f"the ROCm {v.version} development image", first=matrix_os)
        python, source = _pick_python(m, rel, os_info, p, t)
        base = dev_images[os_info.id]
        t.add(f"base image {base}: AMD's ROCm {v.version} development image for {os_info.id}, as "
              f"requested (--flavor devel: hipcc and headers for HIP extensions); it costs "
              f"{meta.get('devel_image_gb', 'gigabytes')} and stores the ROCm userspace a second "
              "time, next to the copy in the torch wheel")
    else:
        plain = [o for o in rocm_rel.os if m.os_info(o) is not None]
        os_info = _pick_os(m, plain, rel, p, t, f"ROCm {v.version}", first=matrix_os)
        python, source = _pick_python(m, rel, os_info, p, t)
        base = os_info.image
        bundles = "; ".join(str(x) for x in meta.get("wheel_bundles", []))
        t.add(f"base image {base}: the plain {os_info.id} image; the torch {v.tag} wheel bundles "
              f"the ROCm userspace ({bundles or 'see rocm.toml'}), the host gives only the "
              "kernel driver (/dev/kfd, /dev/dri). --flavor devel builds on AMD's dev image "
              "instead (hipcc)")
    return _spec(m, p, rel, patch, v, t, python=python, python_source=source, os_id=os_info.id,
                 base_image=base, verified=rocm_rel.verified)


_ROCM_DEV = re.compile(r"^(?P<repo>.*/dev-)ubuntu-(?P<ver>\d+\.\d+)(?P<tag>:.+)$")


def rocm_images(base_image: str, oses: Iterable[str]) -> dict[str, str]:
    """OS id -> ROCm dev image: the matrix's image, plus its Ubuntu siblings (same tag scheme)."""
    m = _ROCM_DEV.match(base_image)
    if m is None:
        return {}
    out = {f"ubuntu{m.group('ver')}": base_image}
    for os_id in oses:
        u = re.fullmatch(r"ubuntu(\d+\.\d+)", os_id)
        if u:
            out.setdefault(os_id, f"{m.group('repo')}ubuntu-{u.group(1)}{m.group('tag')}")
    return out


def _resolve_cpu(m: Matrix, p: Parsed, rel: TorchRelease, patch: TorchPatch, v: Variant,
                 t: _Trace) -> Spec:
    os_info = _pick_os(m, [o.id for o in m.oses], rel, p, t, "a CPU image")
    python, source = _pick_python(m, rel, os_info, p, t)
    t.add(f"base image {os_info.image}: a slim {os_info.id} image; the CPU wheel needs no GPU "
          "libraries")
    return _spec(m, p, rel, patch, v, t, python=python, python_source=source, os_id=os_info.id,
                 base_image=os_info.image)


def _resolve_mps(m: Matrix, p: Parsed, rel: TorchRelease, patch: TorchPatch, v: Variant,
                 t: _Trace) -> Spec:
    if not rel.macos_arm64:
        raise _Reject(f"torch {rel.version} has no macOS arm64 wheels")
    python, _ = _pick_python(m, rel, None, p, t)
    t.add(f"native macOS arm64 environment (no container: macOS GPUs cannot be reached from "
          f"Docker); MPS needs macOS >= {rel.mps_min_macos} with torch {rel.version}")
    return _spec(m, p, rel, patch, v, t, python=python, python_source="native", os_id="macos",
                 base_image=None, min_macos=rel.mps_min_macos, variant_tag="mps",
                 index_url=str(m.meta["torch"].get("pypi_index", "")))


def _spec(m: Matrix, p: Parsed, rel: TorchRelease, patch: TorchPatch, v: Variant, t: _Trace,
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
        raise _Reject(f"--base-image {base.ref} has glibc {base.glibc}, older than the {need} "
                      f"that torch {rel.version}'s manylinux wheels need")


# The target registry (envbuild/targets.py) names each target's wheel kind and resolver part.
_KIND = {name: t.wheel_kind for name, t in targets.REGISTRY.items()}
_PARTS = {"cuda": _resolve_cuda, "rocm": _resolve_rocm, "cpu": _resolve_cpu,
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
    that fit (each one resolved here), else it is raised bare (the alternatives' own probes)."""
    if p.target == "cuda":
        check_host(m, p)
    releases = _releases(m, p)
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
        return found
    raise _conflict(m, p, releases, found, alternatives)


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
            t = _Trace()
            t.add(p.target_reason)
            try:
                spec = _RESOLVERS[p.target](m, p, rel, patch, v, t)
            except _Reject as why:
                rejections.append((rel, v, str(why)))
                if why.narrow:
                    narrow.add((rel.version, v.tag))
                continue
            reasons = _why_this(m, p, rel, patch, v, rejections, narrow)
            return dataclasses.replace(
                spec, trace=(*spec.trace[:1], *p.notes, *reasons, *spec.trace[1:]))
    relevant = [r for r in rejections if (r[0].version, r[1].tag) not in narrow]
    return relevant or rejections


def _resolve_major(m: Matrix, p: Parsed, alternatives: bool = True) -> Spec:
    """`--cuda 12`: any CUDA 12.x. The newest torch with a 12.x wheel that fits, on the image
    the resolver picks without --cuda (the wheel's own CUDA, or the newest one the driver runs
    natively): a newer 12.x image would only raise the driver floor."""
    major = p.cuda_major
    found = _search(m, p, _releases(m, p))
    if isinstance(found, Spec):
        note = (f"CUDA {major}.x: --cuda {major} means any CUDA {major}.x, so the {found.variant} "
                f"wheel (the newest {major}.x wheel that fits) on the CUDA "
                f"{minor_of(found.cuda_image or found.torch_cuda or '')} image, the oldest "
                "driver floor that carries it")
        return dataclasses.replace(found, trace=(found.trace[0], note, *found.trace[1:]))
    minors = sorted((r.version for r in m.cuda if major_of(r.version) == major and r.image),
                    key=version_key, reverse=True)
    q = dataclasses.replace(p, cuda=minors[0], cuda_minor=minors[0]) if minors else p
    err = _conflict(m, q, _releases(m, q), _search_rejections(m, q), alternatives=False)
    err.message = f"no CUDA {major}.x fits; with the newest, {q.cuda_minor}: {err.message}"
    raise _with_alternatives(err, m, p, alternatives)


def _search_rejections(m: Matrix, p: Parsed) -> list[tuple[TorchRelease, Variant, str]]:
    found = _search(m, p, _releases(m, p))
    return [] if isinstance(found, Spec) else found


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
    return ConflictError(first, _RELAX_HINT)


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


_RELAX = ("torch", "cuda", "rocm", "python", "driver", "gpus", "os", "flavor")
_TRIES = 24  # values tried per option, nearest first (it stops at the first that fits)


@dataclass(frozen=True)
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


def apply_changes(request: Request, changes: Iterable[tuple[str, object]]) -> Request:
    """The request with one alternative's changes made (what the user would type)."""
    return dataclasses.replace(request, **dict(changes))  # type: ignore[arg-type]


def _with_alternatives(err: ConflictError, m: Matrix, p: Parsed,
                       enabled: bool) -> ConflictError:
    if not enabled:
        return err
    alts = alternatives(m, p)
    err.alternatives = [a.text for a in alts]
    err.fixes = [a.to_json() for a in alts]
    if not err.hint or err.hint == _RELAX_HINT:
        err.hint = _RELAX_HINT if alts else (
            "no change of one option fits: start from `envbuild resolve` (no options) and add "
            "your constraints one at a time to see which pair conflicts")
    return err


_RELAX_HINT = "change one option as below (nearest first); each alternative resolves"


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


def alternatives(m: Matrix, p: Parsed) -> list[Alternative]:
    """The requests nearest to `p` that resolve, each changing one option (or splitting a
    fleet), ordered by how little they change. Every one was resolved here."""
    out: list[Alternative] = []
    for key in _RELAX:
        if key not in p.given:
            continue
        if key == "gpus":
            out += _gpu_alternatives(m, p)
            continue
        for value in _nearby(m, p, key):
            s = _fits(m, _set(p, key, value))
            if s is not None:
                asked = _asked_version(p, key)
                out.append(Alternative(f"--{key} {value}: {_core(s)}", (((key, value),),),
                                       (1, _steps(m, key, value, asked) if asked else 1.0)))
                break
        s = _fits(m, _drop(p, key))
        if s is not None:
            out.append(Alternative(_describe_drop(key, s), (((key, _DROPPED[key]),),),
                                   (1, _resolved_distance(m, key, s, p))))
    out += _image_alternatives(m, p)
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


def _gpu_alternatives(m: Matrix, p: Parsed) -> list[Alternative]:
    """Drop only the GPUs that block (the largest fitting run of the fleet in architecture
    order: one wheel covers a window of architectures), or split the fleet into one image per
    generation; drop them all only when no part of the fleet fits."""
    fleet_ = sorted(p.gpus, key=_gpu_order)
    n = len(fleet_)

    def with_gpus(gs: Iterable[GpuRef]) -> Spec | None:
        gs = tuple(gs)
        return _fits(m, dataclasses.replace(p, gpus=gs, given=p.given if gs else
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


def _image_alternatives(m: Matrix, p: Parsed) -> list[Alternative]:
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
        s = _fits(m, _set(p, "cuda", r.version))
        if s is not None:
            mvc = s.torch_cuda and version_key(s.torch_cuda) > version_key(r.version)
            out.append(Alternative(f"--cuda {r.version}: {_core(s)}" + (
                f" (the {s.variant} wheel runs on this older image through minor version "
                "compatibility)" if mvc else ""), ((("cuda", r.version),),),
                (1, _steps(m, "cuda", r.version, minor))))
    plain = [o for o in m.meta.get("os", {}).get("preference", [])
             if not any(i.os == o for i in m.images)]
    for os_id in plain[:1]:
        s = _fits(m, dataclasses.replace(p, os=os_id, given=p.given | {"os"}))
        if s is not None:
            out.append(Alternative(f"--os {os_id}: {_core(s)} on the plain {s.base_image} base "
                                   "(no nvidia/cuda image needed)", ((("os", os_id),),),
                                   (1, 0.5)))
    return out


def _core(s: Spec) -> str:
    core = f"torch {s.torch} ({s.variant}), Python {s.python}"
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
