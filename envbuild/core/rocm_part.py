"""The resolver's ROCm part: the wheel's gfx list and the rocm/dev-ubuntu base images."""

from __future__ import annotations

import re
from collections.abc import Iterable

from envbuild.common.lazyre import lazy
from envbuild.core.candidate import Reject, Trace, check_gpus, make_spec, pick_os, pick_python
from envbuild.core.request import Parsed
from envbuild.core.spec import Spec
from envbuild.matrix import (
    Matrix,
    TorchPatch,
    TorchRelease,
    Variant,
)


def resolve_rocm(m: Matrix, p: Parsed, rel: TorchRelease, patch: TorchPatch, v: Variant,
                 t: Trace) -> Spec:
    if p.rocm is not None and not (v.version == p.rocm or v.version.startswith(p.rocm + ".")):
        raise Reject(f"torch {rel.version} {v.tag} is not a ROCm {p.rocm} wheel", narrow=True)
    rocm_rel = m.rocm_release(v.version)
    assert rocm_rel is not None
    check_gpus(v, p.gpus, t)
    dev_images = rocm_images(rocm_rel.base_image, rocm_rel.os)
    matrix_os = next(iter(dev_images), None)  # the image the matrix names leads; siblings follow
    meta = m.meta.get("rocm", {})
    if p.flavor == "devel":
        os_info = pick_os(m, sorted(dev_images), rel, p, t,
                          f"the ROCm {v.version} development image", first=matrix_os)
        python, source = pick_python(m, rel, os_info, p, t)
        base = dev_images[os_info.id]
        t.add(f"base image {base}: AMD's ROCm {v.version} development image for {os_info.id}, as "
              f"requested (--flavor devel: hipcc and headers for HIP extensions); it costs "
              f"{meta.get('devel_image_gb', 'gigabytes')} and stores the ROCm userspace a second "
              "time, next to the copy in the torch wheel")
    else:
        plain = [o for o in rocm_rel.os if m.os_info(o) is not None]
        os_info = pick_os(m, plain, rel, p, t, f"ROCm {v.version}", first=matrix_os)
        python, source = pick_python(m, rel, os_info, p, t)
        base = os_info.image
        bundles = "; ".join(str(x) for x in meta.get("wheel_bundles", []))
        t.add(f"base image {base}: the plain {os_info.id} image; the torch {v.tag} wheel bundles "
              f"the ROCm userspace ({bundles or 'see rocm.toml'}), the host gives only the "
              "kernel driver (/dev/kfd, /dev/dri). --flavor devel builds on AMD's dev image "
              "instead (hipcc)")
    return make_spec(m, p, rel, patch, v, t, python=python, python_source=source, os_id=os_info.id,
                     base_image=base, verified=rocm_rel.verified)


_ROCM_DEV = lazy(r"^(?P<repo>.*/dev-)ubuntu-(?P<ver>\d+\.\d+)(?P<tag>:.+)$")


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


