"""The resolver on the shipped matrix: table-driven specs, errors, and properties."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.common.errors import EXIT_FAILED, EXIT_USAGE, ConflictError, EnvbuildError, UsageError
from envbuild.common.versions import major_of, minor_of, version_key
from envbuild.core.compat import arch_covers
from envbuild.core.request import Request, known_drivers
from envbuild.core.resolve import resolve
from envbuild.matrix import Matrix

# (request, expected subset of the spec). Each row is a decision a CUDA engineer would sign.
CASES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"cuda": "12.2"}, {"target": "cuda", "torch": "2.5.1", "variant": "cu121",
                        "torch_cuda": "12.1", "cuda_image": "12.2.2", "cudnn": "9.1.0.70",
                        "torchvision": "0.20.1", "torchaudio": "2.5.1", "python": "3.10",
                        "os": "ubuntu22.04",
                        "base_image": "nvidia/cuda:12.2.2-base-ubuntu22.04",
                        "index_url": "https://download.pytorch.org/whl/cu121",
                        "min_driver": "535.54.03"}),
    ({"cuda": "11.8"}, {"torch": "2.7.1", "variant": "cu118", "cuda_image": "11.8.0",
                        "min_driver": "520.61.05"}),
    ({"cuda": "12.4", "torch": "2.4"}, {"torch": "2.4.1", "variant": "cu124",
                                        "cuda_image": "12.4.1"}),
    ({"cuda": "12.4", "torch": ">=2.3,<2.5", "python": "3.11"},
     {"torch": "2.4.1", "variant": "cu124", "python": "3.11"}),
    ({"cuda": "12.2", "flavor": "devel"},
     {"base_image": "nvidia/cuda:12.2.2-devel-ubuntu22.04", "flavor": "devel"}),
    ({"cuda": "12.4", "torch": "2.5", "os": "rockylinux9"},
     {"os": "rockylinux9", "base_image": "nvidia/cuda:12.4.1-base-rockylinux9"}),
    # Pascal (sm_61) runs the sm_60 cubin; CUDA 13 wheels dropped Pascal, so cu126 it is.
    ({"gpus": ("GTX 1080",)}, {"variant": "cu126", "torch_cuda": "12.6"}),
    # Blackwell consumer (sm_120) needs a wheel with sm_120: CUDA 12.8+.
    ({"cuda": "12.8", "gpus": ("RTX 5090",), "torch": "2.7"}, {"variant": "cu128"}),
    # Only the driver given: a wheel newer than the driver's CUDA runs on an older image (MVC).
    ({"gpus": ("H100",), "driver": "535.104.05", "torch": "2.7"},
     {"torch": "2.7.1", "variant": "cu126", "cuda_image": "12.2.2", "min_driver": "535.54.03"}),
    ({"target": "cpu", "torch": "2.13.0", "os": "debian12"},
     {"target": "cpu", "variant": "cpu", "torch": "2.13.0", "python": "3.11",
      "base_image": "debian:bookworm-slim", "torch_cuda": None, "cuda_image": None,
      "min_driver": None, "index_url": "https://download.pytorch.org/whl/cpu"}),
    ({"rocm": "6.2"}, {"target": "rocm", "variant": "rocm6.2.4", "rocm": "6.2.4",
                       "torch_cuda": None, "os": "ubuntu22.04"}),
    ({"gpus": ("MI300X",), "torch": "2.9"}, {"target": "rocm", "variant": "rocm6.4"}),
    # ROCm: the plain OS by default (the wheel bundles ROCm), AMD's dev image for devel.
    ({"rocm": "6.2", "torch": "2.5.1"}, {"base_image": "ubuntu:22.04", "flavor": "base"}),
    ({"rocm": "6.2", "torch": "2.5.1", "os": "ubuntu24.04"}, {"base_image": "ubuntu:24.04"}),
    ({"rocm": "6.2", "torch": "2.5.1", "flavor": "devel"},
     {"base_image": "rocm/dev-ubuntu-22.04:6.2-complete", "flavor": "devel"}),
    ({"target": "mps", "torch": "2.5"}, {"target": "mps", "variant": "mps", "os": "macos",
                                         "min_macos": "13.0", "base_image": None}),
    ({"target": "mps", "torch": "2.9"}, {"min_macos": "14.0"}),
]


@pytest.mark.parametrize(("req", "expected"), CASES, ids=[json.dumps(c[0]) for c in CASES])
def test_resolved_specs(matrix: Matrix, req: dict[str, Any], expected: dict[str, Any]) -> None:
    spec = resolve(Request(**req), matrix).to_json()
    for key, value in expected.items():
        assert spec[key] == value, (key, spec[key], spec["trace"])
    assert spec["trace"], "every spec explains itself"


def test_trace_explains_the_choice(matrix: Matrix) -> None:
    trace = resolve(Request(cuda="12.2"), matrix).trace
    text = "\n".join(trace)
    assert "torch 2.5.1 is the newest release with a CUDA 12.x wheel <= 12.2" in text
    assert "cu121" in text and "NVIDIA_REQUIRE_CUDA" in text
    assert "skipped cu124" in text


ERRORS: list[tuple[dict[str, Any], type[EnvbuildError], str, list[str]]] = [
    ({"torch": "2.8", "cuda": "11.8"}, ConflictError,
     "torch 2.8 has no CUDA 11.x wheel <= 11.8; torch 2.8 offers cu126, cu128, cu129",
     ["--torch 2.7"]),
    ({"cuda": "12.2", "driver": "470.82.01"}, ConflictError, "driver 470.82.01 is older", []),
    ({"cuda": "12.2", "gpus": ("RTX 5090",)}, ConflictError,
     "RTX 5090 (sm_120) needs a CUDA >= 12.8 wheel", []),
    ({"torch": "2.5", "python": "3.14", "target": "cpu"}, ConflictError, "Python 3.14", []),
    ({"torch": ">=9"}, ConflictError, "no torch release", []),
    ({"cuda": "12.7"}, UsageError, "CUDA 12.7 is not a CUDA release", ["12.6", "12.8"]),
    ({"cuda": "twelve"}, UsageError, "is not a CUDA version", []),
    ({"torch": "2.x"}, UsageError, "is not a version or specifier", []),
    ({"python": "3"}, UsageError, "is not a CPython version", []),
    ({"gpus": ("RTX 4909",)}, UsageError, "unknown GPU", ["RTX 4090"]),
    ({"os": "ubuntu22.4"}, UsageError, "is not an operating system", ["ubuntu22.04"]),
    ({"cuda": "12.2", "rocm": "6.2"}, UsageError, "cannot be combined", []),
    ({"target": "cpu", "cuda": "12.2"}, UsageError, "--cuda needs --target cuda", []),
    ({"target": "cuda", "gpus": ("MI300X",)}, UsageError, "AMD GPUs cannot run a CUDA", []),
    ({"driver": "abc"}, UsageError, "not an NVIDIA driver version", []),
    ({"flavor": "slim"}, UsageError, "--flavor", []),
    ({"rocm": "6.2", "flavor": "runtime"}, UsageError, "--flavor runtime applies to CUDA", []),
]


@pytest.mark.parametrize(("req", "kind", "message", "alternatives"), ERRORS,
                         ids=[json.dumps(e[0]) for e in ERRORS])
def test_errors(matrix: Matrix, req: dict[str, Any], kind: type[EnvbuildError], message: str,
                alternatives: list[str]) -> None:
    with pytest.raises(kind) as info:
        resolve(Request(**req), matrix)
    err = info.value
    assert message in err.message
    assert "\n" not in err.message
    assert err.exit_code == (EXIT_USAGE if kind is UsageError else EXIT_FAILED)
    for alt in alternatives:
        assert any(alt in a for a in err.alternatives), err.alternatives


def test_conflict_hint_names_the_fix(matrix: Matrix) -> None:
    with pytest.raises(ConflictError) as info:
        resolve(Request(torch="2.8", cuda="11.8"), matrix)
    assert info.value.hint == "for CUDA 11.8 use torch <= 2.7"


@pytest.mark.parametrize(("sass", "ptx", "cc", "expected"), [
    (["5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "9.0"], [], "8.9", "sm_86"),
    (["5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "9.0"], [], "6.1", "sm_60"),
    (["5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "9.0"], [], "12.0", None),
    (["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"], ["12.0"], "12.1", "sm_120"),
    (["7.5", "8.0", "8.6", "9.0"], ["9.0"], "10.0", "compute_90"),
    (["7.5", "8.0"], [], "3.7", None),
    (["8.0"], [], "7.5", None),
])
def test_arch_coverage(sass: list[str], ptx: list[str], cc: str, expected: str | None) -> None:
    assert arch_covers(sass, ptx, cc) == expected


# --- properties --------------------------------------------------------------------------

def _requests(m: Matrix) -> st.SearchStrategy[Request]:
    cudas = st.sampled_from([None, *[r.version for r in m.cuda], "12.7", "99.1", "x",
                             "11", "12", "13", "14", "12.22", "１２.２"])
    torches = st.sampled_from([None, *[r.version for r in m.torch],
                               *[p.torch for p in m.patches], ">=2.3,<2.6", ">=9", "~=2.4.0"])
    pythons = st.sampled_from([None, "3.9", "3.10", "3.11", "3.12", "3.13", "3.14", "3.99"])
    gpus = st.lists(st.sampled_from([g.name for g in m.gpus] + ["sm_37", "sm_61", "sm_120",
                                                                  "gfx942"]),
                    max_size=2).map(tuple)
    drivers = st.sampled_from([None, "450.80.02", "470.82.01", "525.60.13", "535.104.05",
                               "560.35.03", "570.124.06", "580.65.06", "590.44.01", "999",
                               "470", "535", "390.157", "390", "５３５.１０４.０５"])
    targets = st.sampled_from([None, "cuda", "rocm", "cpu", "mps"])
    oses = st.sampled_from([None, *[o.id for o in m.oses]])
    rocms = st.sampled_from([None, *[r.version for r in m.rocm]])
    flavors = st.sampled_from([None, "base", "devel"])
    return st.builds(Request, target=targets, cuda=cudas, torch=torches, python=pythons,
                     gpus=gpus, driver=drivers, os=oses, rocm=rocms, flavor=flavors)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_spec_satisfies_the_matrix(matrix: Matrix, data: st.DataObject) -> None:
    req = data.draw(_requests(matrix))
    try:
        spec = resolve(req, matrix)
    except EnvbuildError as err:  # every failure is a clean, one-line error
        assert err.exit_code in (EXIT_FAILED, EXIT_USAGE)
        assert err.message and "\n" not in err.message
        return
    rel = matrix.torch_release(minor_of(spec.torch))
    assert rel is not None
    patch = next(p for p in matrix.patches if p.torch == spec.torch)
    if spec.torchvision:
        assert spec.torchvision == patch.torchvision
    if req.torch:
        from envbuild.core.request import torch_specifier
        assert torch_specifier(req.torch).contains(spec.torch, prereleases=True)
    if req.python:
        assert spec.python == req.python
    assert spec.python in rel.python
    if spec.target == "mps":
        assert spec.min_macos == rel.mps_min_macos
        return
    variant = next(v for v in matrix.variants_of(rel.version) if v.tag == spec.variant)
    os_info = matrix.os_info(spec.os)
    assert os_info is not None
    if req.os:
        assert spec.os == req.os
    if spec.python_source == "os":
        assert spec.python in (os_info.python, *os_info.extra_python)
    if spec.target == "cuda" and spec.require_cuda:  # a plain OS base: no nvidia/cuda image
        floor = matrix.compat_floor(major_of(variant.version))
        assert floor is not None and spec.cuda_image is None and spec.min_driver
        assert spec.base_image == os_info.image
        if req.cuda and "." in req.cuda:  # the asked CUDA has no nvidia/cuda image for the OS
            assert not any(i.os == spec.os for i in matrix.images
                           if minor_of(i.cuda) == minor_of(req.cuda))
        assert spec.require_cuda == f"{major_of(variant.version)}.0"
        assert version_key(spec.min_driver) >= version_key(floor.min_driver_linux)
        if req.cuda and "." in req.cuda:
            assert major_of(variant.version) == major_of(req.cuda)
            assert version_key(variant.version) <= version_key(minor_of(req.cuda))
        for g in spec.gpus:
            assert arch_covers(variant.sass, variant.ptx, g["cc"]) is not None
    elif spec.target == "cuda":
        assert spec.torch_cuda == variant.version and spec.cuda_image and spec.min_driver
        image_minor = minor_of(spec.cuda_image)
        if req.cuda and "." not in req.cuda:  # --cuda 12: any 12.x
            assert major_of(image_minor) == major_of(variant.version) == int(req.cuda)
        elif req.cuda:
            assert image_minor == minor_of(req.cuda)
            assert major_of(variant.version) == major_of(req.cuda)
            assert version_key(variant.version) <= version_key(image_minor)
        assert any(i.os == spec.os for i in matrix.images_for(spec.cuda_image))
        cuda_rel = matrix.cuda_release(image_minor)
        floor = matrix.compat_floor(major_of(variant.version))
        assert cuda_rel is not None and floor is not None
        assert version_key(spec.min_driver) >= version_key(cuda_rel.ga_driver_linux)
        assert version_key(spec.min_driver) >= version_key(floor.min_driver_linux)
        if req.driver:  # a bare branch reads as the oldest driver of it the matrix knows
            same = [d for d in known_drivers(matrix) if major_of(d) == major_of(req.driver)]
            driver = req.driver if "." in req.driver or not same else same[0]
            assert version_key(driver) >= version_key(spec.min_driver)
        for g in spec.gpus:
            assert arch_covers(variant.sass, variant.ptx, g["cc"]) is not None
        _assert_driver_window(matrix, spec, variant)
    if spec.target == "rocm":
        assert spec.rocm == variant.version
        rocm_rel = matrix.rocm_release(variant.version)
        assert rocm_rel is not None
        if spec.flavor == "devel":  # AMD's dev image only when asked
            assert spec.base_image.startswith("rocm/dev-")
        else:  # the plain OS image of an OS the release supports: the wheel brings ROCm
            os_info = matrix.os_info(spec.os)
            assert os_info is not None and spec.os in rocm_rel.os
            assert spec.base_image == os_info.image
        for g in spec.gpus:
            assert g["gfx"] in variant.gfx


def _assert_driver_window(matrix: Matrix, spec: Any, variant: Any) -> None:
    """The resolved driver range is non-empty and inside every requested GPU's window."""
    from envbuild.core.gpu_window import branch_of, window

    assert spec.min_driver
    if spec.max_driver is not None:
        assert branch_of(spec.min_driver) <= int(spec.max_driver)
    for g in spec.gpus:
        w = window(matrix, g["cc"], g["name"])
        assert w is not None
        assert version_key(variant.version) >= version_key(w.min_cuda)
        assert not w.too_old(spec.min_driver)
        if w.last_branch is not None:
            assert spec.max_driver is not None and int(spec.max_driver) <= w.last_branch


# --- issue 9: inputs accepted today that break later; messages that point the wrong way -------

UNICODE_DIGITS = [("driver", "５３５.１０４.０５"), ("driver", "٥٣٥.١٠٤.٠٥"),
                  ("driver", "५३५.१०४.०५"), ("driver", "535.１04.05"),
                  ("driver", "５３５"), ("driver", "𝟓𝟑𝟓.104.05"),
                  ("cuda", "１２.２"), ("cuda", "1２"), ("cuda", "١٢.٢"), ("python", "3.１１"),
                  ("python", "٣.١١"), ("rocm", "６.２"), ("gpus", ("sm_８６",)),
                  ("torch", "２.５")]


@pytest.mark.parametrize(("key", "value"), UNICODE_DIGITS, ids=[repr(v) for _, v in UNICODE_DIGITS])
def test_non_ascii_digits_are_refused(matrix: Matrix, key: str, value: Any) -> None:
    with pytest.raises(UsageError) as info:
        resolve(Request(**{key: value}), matrix)
    assert info.value.exit_code == EXIT_USAGE


# (request, the message must contain each of these); none may blame "CUDA 13.2" (a data gap).
WRONG_WAY: list[tuple[dict[str, Any], list[str]]] = [
    ({"driver": "390.157"}, ["driver 390.157 is older than any CUDA image", ">= 470.42.01"]),
    ({"driver": "390"}, ["driver 390 is older than any CUDA image", "CUDA 11.4"]),
    ({"driver": "418.87.01"}, ["older than any CUDA image"]),
    ({"driver": "465.19.01", "gpus": ("T4",)}, ["older than any CUDA image"]),
    ({"driver": "390.157", "torch": "2.4"}, ["older than any CUDA image"]),
    ({"python": "3.7"}, ["no torch release envbuild knows supports Python 3.7"]),
    ({"python": "3.6", "target": "cpu"}, ["supports Python 3.6"]),
    ({"python": "3.7", "target": "rocm"}, ["supports Python 3.7"]),
    ({"python": "3.7", "target": "mps"}, ["supports Python 3.7"]),
    ({"python": "3.99"}, ["supports Python 3.99"]),
    ({"python": "3.8", "os": "ubuntu24.04", "flavor": "devel"}, ["Python 3.8 needs torch <= 2.4"]),
    ({"cuda": "13", "python": "3.9"}, ["no CUDA 13.x fits",
                                       "supports Python 3.9 (torch <= 2.8) has a CUDA 13.x"]),
    ({"cuda": "13.0", "python": "3.8"}, ["Python 3.8"]),
]


@pytest.mark.parametrize(("req", "says"), WRONG_WAY, ids=[json.dumps(w[0]) for w in WRONG_WAY])
def test_conflicts_name_what_excludes_the_request(matrix: Matrix, req: dict[str, Any],
                                                  says: list[str]) -> None:
    with pytest.raises(ConflictError) as info:
        resolve(Request(**req), matrix)
    for text in says:
        assert text in info.value.message, info.value.message
    assert "CUDA 13.2" not in info.value.message


@pytest.mark.parametrize(("branch", "reads_as"), [
    ("470", "470.42.01"), ("535", "535.54.03"), ("580", "580.65.06"), ("525", "525.60.13"),
])
def test_bare_driver_branch_is_its_oldest_known_driver(matrix: Matrix, branch: str,
                                                       reads_as: str) -> None:
    spec = resolve(Request(driver=branch), matrix)
    assert f"read as {reads_as}, the oldest {branch}.x driver" in "\n".join(spec.trace)
    assert version_key(spec.min_driver or "") <= version_key(reads_as)
    full = resolve(Request(driver=reads_as), matrix)
    assert (spec.torch, spec.variant, spec.cuda_image) == (full.torch, full.variant,
                                                           full.cuda_image)


def test_unknown_driver_branch_says_so(matrix: Matrix) -> None:
    spec = resolve(Request(driver="999"), matrix)
    assert "knows no 999.x release" in "\n".join(spec.trace)


@pytest.mark.parametrize(("req", "major"), [
    ({"cuda": "12"}, 12), ({"cuda": "11"}, 11), ({"cuda": "13"}, 13),
    ({"cuda": "12", "torch": "2.4"}, 12), ({"cuda": "12", "driver": "535.104.05"}, 12),
    ({"cuda": "11", "python": "3.8"}, 11), ({"cuda": "12", "os": "rockylinux9"}, 12),
])
def test_cuda_major_means_the_newest_minor_that_fits(matrix: Matrix, req: dict[str, Any],
                                                     major: int) -> None:
    """`--cuda 12`: the image of the newest torch and wheel any 12.x image gives; a newer image
    that gives the same wheel only raises the driver floor, so it is not the pick."""
    spec = resolve(Request(**req), matrix)
    assert spec.cuda_image and major_of(spec.cuda_image) == major
    image = minor_of(spec.cuda_image)
    assert f"--cuda {major} means any CUDA {major}.x, so the {spec.variant} wheel" \
        in "\n".join(spec.trace)
    for r in matrix.cuda:
        if major_of(r.version) != major or not r.image or r.version == image:
            continue
        try:
            other = resolve(Request(**{**req, "cuda": r.version}), matrix)
        except ConflictError:
            continue
        assert version_key(other.torch) <= version_key(spec.torch)
        if (other.torch, other.variant) == (spec.torch, spec.variant):
            assert version_key(other.min_driver or "0") >= version_key(spec.min_driver or "0")
    if "driver" in req:  # 535 runs 12.2 natively, and the 12.x wheels through MVC
        assert image == "12.2"
        assert spec == dataclasses.replace(resolve(Request(driver=req["driver"]), matrix),
                                           trace=spec.trace)


@pytest.mark.parametrize(("cuda", "suggest"), [
    ("12.22", "12.2"), ("11.88", "11.8"), ("12.44", "12.4"), ("12.21", "12.2"), ("13.00", "13.0"),
    ("12.66", "12.6"),
])
def test_cuda_typo_suggests_the_close_release(matrix: Matrix, cuda: str, suggest: str) -> None:
    with pytest.raises(UsageError) as info:
        resolve(Request(cuda=cuda), matrix)
    assert info.value.alternatives[0] == suggest
    assert f"did you mean {suggest}" in info.value.hint


def test_cuda_unknown_major(matrix: Matrix) -> None:
    with pytest.raises(UsageError, match="not a CUDA major"):
        resolve(Request(cuda="14"), matrix)


def test_rocm_trace_says_what_the_wheel_bundles_and_what_devel_costs(matrix: Matrix) -> None:
    meta = matrix.meta["rocm"]
    base = resolve(Request(rocm="6.2", torch="2.5.1"), matrix)
    line = next(t for t in base.trace if t.startswith("base image "))
    assert all(str(item) in line for item in meta["wheel_bundles"]) and "/dev/kfd" in line
    devel = resolve(Request(rocm="6.2", torch="2.5.1", flavor="devel"), matrix)
    line = next(t for t in devel.trace if t.startswith("base image "))
    assert str(meta["devel_image_gb"]) in line and "second time" in line


def test_python_source_override_is_part_of_the_spec(matrix: Matrix) -> None:
    """`--python-source standalone` where the OS ships the version: the spec says standalone (its
    hash, label and trace), so the two images never share a spec hash, tag or validation."""
    from envbuild.core.resolve import with_python_source
    spec = resolve(Request(target="cpu", torch="2.13.0", python="3.11", os="debian12"), matrix)
    assert spec.python_source == "os"
    forced = with_python_source(spec, "standalone", matrix)
    assert forced.python_source == "standalone" and forced.hash != spec.hash
    assert "--python-source standalone" in forced.trace[-1]
    assert with_python_source(spec, None, matrix) is spec
    assert with_python_source(spec, "os", matrix) is spec
    mps = resolve(Request(target="mps", torch="2.13.0"), matrix)
    assert with_python_source(mps, "standalone", matrix) is mps
