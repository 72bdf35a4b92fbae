"""The resolver's CUDA part: the driver floor and cap, the base image's CUDA, nvidia/cuda and
plain bases, and forward compatibility."""

from __future__ import annotations

from collections.abc import Iterable

from envbuild.common.errors import ConflictError
from envbuild.common.versions import branch_of, major_of, version_key
from envbuild.core import compat
from envbuild.core.candidate import Reject, Trace, check_gpus, make_spec, pick_os, pick_python
from envbuild.core.gpu_window import FleetWindow, fleet, window
from envbuild.core.request import GpuRef, Parsed
from envbuild.core.spec import Spec
from envbuild.matrix import (
    CompatPackage,
    CudaImage,
    Matrix,
    TorchPatch,
    TorchRelease,
    Variant,
)
from envbuild.validator import rules


def _min_driver(m: Matrix, image_minor: str, wheel_cuda: str, t: Trace,
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


def _image_minor_for_driver(m: Matrix, v: Variant, p: Parsed, t: Trace,
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
            raise Reject(f"{w.label} needs a CUDA >= {w.min_cuda} wheel (its architecture, "
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


def _driver_cap(fw: FleetWindow, min_driver: str, what: str, t: Trace) -> str | None:
    """The newest driver branch a capping GPU allows (None: no cap); refused when the image
    needs a newer driver than that GPU is driven by."""
    capping = fw.capping()
    if capping is None or capping.last_branch is None:
        return None
    if branch_of(min_driver) > capping.last_branch:
        raise Reject(f"{what} need a driver >= {min_driver}, but {capping.label} is driven "
                     f"only by {capping.describe()}")
    t.add(f"driver branch R{capping.last_branch} or older: {capping.label} is not driven by "
          f"newer branches (R{capping.last_branch} is the last that supports "
          f"{capping.arch_name})")
    return str(capping.last_branch)


def _resolve_plain_cuda(m: Matrix, p: Parsed, rel: TorchRelease, patch: TorchPatch,
                        v: Variant, t: Trace, fw: FleetWindow) -> Spec:
    """The CUDA wheel on the plain `--os` image (see _plain_base), or on an inspected
    --base-image that does not set NVIDIA_REQUIRE_CUDA itself."""
    os_info = m.os_info(p.os or "")
    assert os_info is not None
    base = p.base.ref if p.base is not None else os_info.image
    require = f"{major_of(v.version)}.0"
    check_gpus(v, p.gpus, t)
    min_driver = _min_driver(m, require, v.version, t, fw, plain=True)
    if p.driver is not None and version_key(p.driver) < version_key(min_driver):
        raise Reject(f"driver {p.driver} is older than the {min_driver} that the {v.tag} wheel "
                     f"needs (torch {rel.version})")
    max_driver = _driver_cap(fw, min_driver, f"the {v.tag} wheel", t)
    if p.base is None:
        t.add(f"OS {os_info.id} as requested: NVIDIA publishes no nvidia/cuda "
              f"{p.cuda_minor or ''} base image for it, so the plain {os_info.image} image is "
              "the base".replace("  ", " "))
    python, source = pick_python(m, rel, os_info, p, t)
    t.add(f"base image {base}: the {v.tag} wheel's nvidia-* packages bring the CUDA "
          "userspace; envbuild writes what the container runtime reads (NVIDIA_VISIBLE_DEVICES, "
          "NVIDIA_DRIVER_CAPABILITIES, NVIDIA_REQUIRE_CUDA) and the loader paths of the driver "
          "libraries it mounts (/usr/local/nvidia/lib64). Saved: the base image's own CUDA "
          "runtime and a registry pull of nvidia/cuda. Left out: NVIDIA's forward-compatibility "
          "libraries (/usr/local/cuda/compat), the brand clauses of NVIDIA_REQUIRE_CUDA, and "
          "nvcc (`--flavor devel` needs an nvidia/cuda OS)")
    return make_spec(m, p, rel, patch, v, t, python=python, python_source=source, os_id=os_info.id,
                     base_image=base, min_driver=min_driver, max_driver=max_driver,
                     require_cuda=require, verified=os_info.verified)


def _resolve_nvidia_base(m: Matrix, p: Parsed, rel: TorchRelease, patch: TorchPatch,
                         v: Variant, t: Trace, fw: FleetWindow) -> Spec:
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
        raise Reject(f"--base-image {b.ref} requires CUDA {image_minor} (its "
                     f"NVIDIA_REQUIRE_CUDA); torch {rel.version} {v.tag} is a CUDA "
                     f"{major_of(v.version)}.x wheel", narrow=True)
    check_gpus(v, p.gpus, t)
    min_driver = _min_driver(m, image_minor, v.version, t, fw)
    if p.driver is not None and version_key(p.driver) < version_key(min_driver):
        raise Reject(f"driver {p.driver} is older than the {min_driver} that --base-image "
                     f"{b.ref} with the {v.tag} wheel needs")
    max_driver = _driver_cap(fw, min_driver, f"--base-image {b.ref} with the {v.tag} wheel", t)
    python, source = pick_python(m, rel, os_info, p, t)
    t.add(f"base image {b.ref}: an nvidia/cuda base (its environment sets "
          f"NVIDIA_REQUIRE_CUDA=cuda>={image_minor}"
          + (f" and CUDA_VERSION={b.cuda_version}" if b.cuda_version else "")
          + "): its CUDA runtime, cuda-compat and brand clauses stay; the wheel brings the "
          "libraries torch uses")
    return make_spec(m, p, rel, patch, v, t, python=python, python_source=source, os_id=os_info.id,
                     base_image=b.ref, cuda_image=b.cuda_version or image_minor,
                     min_driver=min_driver, max_driver=max_driver, verified=os_info.verified)


def compat_refusal(m: Matrix, gpus: Iterable[GpuRef]) -> str | None:
    """Why NVIDIA's forward compatibility cannot serve these GPUs (None: it can)."""
    fc = m.meta.get("cuda", {}).get("forward_compat", {})
    allowed = set(fc.get("gpus", []))
    jetson = {g.name for g in m.gpus if g.family == "jetson"}
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
                            v: Variant, t: Trace, fw: FleetWindow) -> Spec | None:
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
        raise Reject(f"no forward-compatibility package of CUDA {v.version}+ serves driver "
                     f"branch R{branch} (the known ones serve R{', R'.join(known) or ' none'})")
    check_gpus(v, p.gpus, t)
    t.add(f"the {v.tag} wheel needs a CUDA {major_of(v.version)}.x driver >= "
          f"{floor}; the {p.driver} driver (R{branch}) runs it through NVIDIA's "
          f"forward-compatibility libraries {pkg.version} (CUDA {pkg.cuda}, from "
          f"redistrib_{pkg.redist}.json), which serve R{', R'.join(pkg.host_branches)}")
    t.add(f"{', '.join(g.label for g in p.gpus)}: data-center GPUs, which NVIDIA supports "
          "forward compatibility on; the NVIDIA container toolkit loads the libraries from "
          "/usr/local/cuda/compat when the host driver is older than they are")
    os_info = pick_os(m, [o.id for o in m.oses], rel, p, t, "a plain OS base")
    python, source = pick_python(m, rel, os_info, p, t)
    base = p.base.ref if p.base is not None else os_info.image
    t.add(f"base image {base}: plain, with the forward-compatibility libraries in "
          f"/usr/local/cuda-{pkg.cuda}/compat and NVIDIA_REQUIRE_CUDA=cuda>="
          f"{major_of(v.version)}.0 plus brand clauses for R{', R'.join(pkg.host_branches)} "
          "(as NVIDIA's own base images write them)")
    return make_spec(m, p, rel, patch, v, t, python=python, python_source=source, os_id=os_info.id,
                     base_image=base, min_driver=p.driver, require_cuda=f"{major_of(v.version)}.0",
                     forward_compat=pkg.version, verified=pkg.verified and os_info.verified)


def resolve_cuda(m: Matrix, p: Parsed, rel: TorchRelease, patch: TorchPatch, v: Variant,
                 t: Trace) -> Spec:
    fw = _gpu_fleet(m, p)
    _check_gpu_toolkit(v, fw)
    if p.cuda_minor is None and p.cuda_major is not None and major_of(v.version) != p.cuda_major:
        raise Reject(f"torch {rel.version} {v.tag} is a CUDA {major_of(v.version)}.x wheel",
                     narrow=True)
    if p.cuda_minor is not None:
        if major_of(v.version) != major_of(p.cuda_minor):
            raise Reject(f"torch {rel.version} {v.tag} is a CUDA {major_of(v.version)}.x wheel",
                         narrow=True)
        if version_key(v.version) > version_key(p.cuda_minor):
            raise Reject(f"torch {rel.version} {v.tag} needs CUDA {v.version} > {p.cuda_minor}",
                         narrow=True)
    if p.cuda and p.cuda.count(".") == 2 and not m.images_for(p.cuda):
        raise Reject(f"no nvidia/cuda {p.cuda} image is known")
    if p.forward_compat and p.driver is not None:
        forward = _resolve_forward_compat(m, p, rel, patch, v, t, fw)
        if forward is not None:
            return forward
    if p.base is not None:
        on_base = _resolve_nvidia_base if p.base.nvidia else _resolve_plain_cuda
        return on_base(m, p, rel, patch, v, t, fw)
    # The image's CUDA from the driver: its reasons go in the trace only if an nvidia/cuda image
    # is the base (a plain base has no CUDA of its own).
    minor_trace = Trace()
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
        raise Reject(f"no nvidia/cuda image is known for CUDA {image_minor}")
    check_gpus(v, p.gpus, t)
    min_driver = _min_driver(m, image_minor, v.version, t, fw)
    if p.driver is not None and version_key(p.driver) < version_key(min_driver):
        raise Reject(f"driver {p.driver} is older than the {min_driver} that CUDA {image_minor} "
                     f"images need (torch {rel.version} {v.tag})")
    max_driver = _driver_cap(fw, min_driver, f"CUDA {image_minor} images with the {v.tag} wheel",
                             t)
    images = [i for i in m.images_for(image_version) if p.flavor in i.flavors]
    what = f"nvidia/cuda:{image_version}-{p.flavor}"
    os_info = pick_os(m, [i.os for i in images], rel, p, t, what)
    python, source = pick_python(m, rel, os_info, p, t)
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
    return make_spec(m, p, rel, patch, v, t, python=python, python_source=source, os_id=os_info.id,
                     base_image=f"{repo}:{image_version}-{p.flavor}-{os_info.id}",
                     cuda_image=image_version, min_driver=min_driver, max_driver=max_driver,
                     verified=(img.verified and cuda_rel.verified))


