"""What the README documents works as documented (issue 20, class 4): `--torch X.Y.Z+TAG` as
`pip list` prints it, `resolve --python-source`, the packages envbuild installs itself refused
as user packages, and an option given an empty value refused instead of ignored."""

from __future__ import annotations

import contextlib
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.common.errors import ConflictError, EnvbuildError, UsageError
from envbuild.common.versions import version_key
from envbuild.core import targets
from envbuild.core.request import COMPONENTS, Request
from envbuild.core.resolve import resolve
from envbuild.matrix import Matrix


def _builds(matrix: Matrix) -> list[tuple[str, str]]:
    """(patch, variant tag) of every wheel the matrix lists."""
    return [(p.torch, v.tag) for rel in matrix.torch for p in matrix.patches_of(rel.version)
            for v in matrix.variants_of(rel.version)]


# ---------------------------------------------------------------- --torch X.Y.Z+TAG


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_pip_list_version_resolves_to_that_build(matrix: Matrix, data: st.DataObject) -> None:
    """Every torch build of the matrix, written as pip list / torch.__version__ print it: the
    spec is that patch and that variant (or the request conflicts for another reason, naming
    it), never a usage error."""
    patch, tag = data.draw(st.sampled_from(_builds(matrix)))
    spelling = data.draw(st.sampled_from(["{p}+{t}", "=={p}+{t}", " {p}+{t} ", "{p}+{T}"]))
    text = spelling.format(p=patch, t=tag, T=tag.upper())
    try:
        spec = resolve(Request(torch=text), matrix)
    except ConflictError as exc:  # e.g. a variant with no image for the default OS
        assert exc.hint, exc.message
        return
    assert (spec.torch, spec.variant) == (patch, tag)
    kind = next(v.kind for v in matrix.variants if v.tag == tag)
    assert targets.get(spec.target).wheel_kind == kind
    assert any(tag in line for line in spec.trace)


@pytest.mark.parametrize(("torch", "says"), [
    ("2.5.1+cu999", "'cu999' is not a torch wheel variant envbuild knows"),
    ("2.5+cu121", "goes with one exact version"),
    (">=2.4+cu121", "goes with one exact version"),
    ("2.5.1+cu121+cpu", "goes with one exact version"),
    ("2.5.1+", "goes with one exact version"),
])
def test_malformed_local_versions_are_usage_errors(matrix: Matrix, torch: str, says: str) -> None:
    with pytest.raises(UsageError) as exc:
        resolve(Request(torch=torch), matrix)
    assert says in exc.value.message and exc.value.hint


def test_a_variant_the_release_lacks_names_what_it_has(matrix: Matrix) -> None:
    """Generated over every (release, tag) pair the matrix does not have: a ConflictError that
    lists the release's variants, and a hint whose --torch values each resolve."""
    tags = sorted({v.tag for v in matrix.variants})
    checked = 0
    for rel in matrix.torch:
        have = {v.tag for v in matrix.variants_of(rel.version)}
        patch = matrix.patches_of(rel.version)[-1].torch
        for tag in sorted(set(tags) - have):
            with pytest.raises(ConflictError) as exc:
                resolve(Request(torch=f"{patch}+{tag}"), matrix)
            assert all(t in exc.value.message for t in have), exc.value.message
            for word in exc.value.hint.replace(",", " ").split():
                if "+" in word and word[0].isdigit():
                    resolve(Request(torch=word), matrix)  # raises if the suggestion does not
            checked += 1
    assert checked > 20


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_variant_against_cuda_and_target(matrix: Matrix, data: st.DataObject) -> None:
    """A CUDA variant and --cuda: the wheel's CUDA must have the image's major and be <= it
    (else a usage error with a hint); any variant against a --target of another wheel kind, or
    against mps (PyPI's macOS wheels have no variant), is a usage error; otherwise the request
    resolves with that variant or conflicts for a reason of its own."""
    patch, tag = data.draw(st.sampled_from(_builds(matrix)))
    v = next(x for x in matrix.variants if x.tag == tag)
    target = data.draw(st.sampled_from([None, *targets.NAMES]))
    cuda = data.draw(st.sampled_from([None, *[r.version for r in matrix.cuda]]))
    if cuda is not None and target not in (None, "cuda"):
        target = None
    req = Request(torch=f"{patch}+{tag}", target=target, cuda=cuda)
    contradicts = (target is not None and (targets.get(target).wheel_kind != v.kind
                                           or not targets.get(target).container)) or (
        cuda is not None and (v.kind != "cuda" or v.version.split(".")[0] != cuda.split(".")[0]
                              or version_key(v.version) > version_key(cuda)))
    try:
        spec = resolve(req, matrix)
    except UsageError as exc:
        assert contradicts, exc.message
        assert exc.hint and f"--torch {patch}" in exc.hint
        for other in re.findall(r"--cuda (\d+\.\d+)", exc.hint):  # the --cuda it suggests
            with contextlib.suppress(ConflictError):  # may conflict for another reason
                resolve(Request(torch=f"{patch}+{tag}", cuda=other), matrix)
        return
    except ConflictError as exc:
        assert not contradicts and exc.hint
        return
    assert not contradicts
    assert (spec.torch, spec.variant) == (patch, tag)


def test_make_with_a_variant_builds_that_variant_not_the_hosts() -> None:
    """`make --torch 2.5.1+cu121` asks for hardware (the variant): no doctor recommendation."""
    from envbuild.features.make import wants_recommendation

    assert wants_recommendation(Request(torch="2.5.1"))
    assert not wants_recommendation(Request(torch="2.5.1+cu121"))
    assert not wants_recommendation(Request(torch="2.5.1+cpu"))


# ---------------------------------------------------------------- what envbuild installs itself


CONDA_OWNED = ["python", *COMPONENTS, "pytorch", "pytorch-cuda", "cudatoolkit", "pytorch-gpu",
               "libtorch", "cpuonly"]


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(CONDA_OWNED),
       channel=st.sampled_from(["", "conda-forge::", "pytorch::", "nvidia/label/x::"]),
       version=st.sampled_from(["", "=3.8", ">=2", " 11.8.*", "[version='>=2']"]),
       upper=st.booleans())
def test_conda_packages_envbuild_installs_are_refused(name: str, channel: str, version: str,
                                                      upper: bool) -> None:
    from envbuild.core.packages import conda_spec

    spec = f"{channel}{name.upper() if upper else name}{version}"
    with pytest.raises(UsageError) as exc:
        conda_spec(spec)
    assert "would be a second" in exc.value.message and exc.value.hint.startswith("choose")


@pytest.mark.parametrize("spec", ["numpy", "conda-forge::ffmpeg", "python-dateutil",
                                  "pytorch-lightning", "torchmetrics", "cuda-nvcc"])
def test_conda_packages_of_other_names_pass(spec: str) -> None:
    from envbuild.core.packages import conda_spec

    assert conda_spec(spec) == spec


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(COMPONENTS), sep=st.sampled_from(["", "-", "_", "."]),
       upper=st.booleans(), version=st.sampled_from(["", "==2.5.1", ">=2", "[extra]"]))
def test_pip_packages_envbuild_installs_are_refused(name: str, sep: str, upper: bool,
                                                    version: str) -> None:
    from envbuild.core.packages import pip_requirement

    spelled = name.upper() if upper else name
    if sep:  # torch_audio, Torch.Vision: pip normalizes to the same project only for - _ .
        spelled = spelled[:5] + sep + spelled[5:] if len(spelled) > 5 else spelled
    text = spelled + version
    from packaging.utils import canonicalize_name

    if canonicalize_name(spelled) not in COMPONENTS:
        pip_requirement(text)  # another project (torch-vision is not torchvision): accepted
        return
    with pytest.raises(UsageError) as exc:
        pip_requirement(text)
    assert "come from the spec" in exc.value.message and exc.value.hint


def test_every_error_class_requires_a_hint() -> None:
    """The hint is a required argument of every error class (mypy refuses a call without one)."""
    import inspect

    from envbuild.common import errors, http, proc

    for cls in (errors.UsageError, errors.ConflictError, errors.EnvironmentProblem,
                errors.EnvbuildError, http.Unreachable, proc.ProcessError):
        hint = inspect.signature(cls).parameters["hint"]
        assert hint.default is inspect.Parameter.empty, cls
    with pytest.raises(TypeError):
        errors.UsageError("no hint")  # type: ignore[call-arg]
    assert isinstance(errors.MatrixError("x").hint, str) and errors.MatrixError("x").hint
    assert issubclass(errors.MatrixError, EnvbuildError)
