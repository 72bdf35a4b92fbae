"""A PyPI-like torch index: the PyPI default variant pinned without its local tag, any other
variant refused before a build; the URL-shape guess and its --torch-index-kind override."""

from __future__ import annotations

import shlex

import pytest

from envbuild.common.errors import ConflictError, UsageError
from envbuild.core.request import Request
from envbuild.core.resolve import resolve
from envbuild.core.torch_index import index_kind, plan
from envbuild.matrix import Matrix
from envbuild.render.context import RenderOptions, render

PYPI_LIKE = [
    "https://pypi.org/simple", "https://pypi.org/simple/", "https://PYPI.org/simple",
    "https://artifactory.example.com/artifactory/api/pypi/pypi-remote/simple",
    "https://nexus.example.com/repository/pypi-proxy/simple/",
    "http://127.0.0.1:8080/simple", "https://user:tok@devpi.example.com/root/pypi/simple",
]
PYTORCH_LIKE = [
    "https://download.pytorch.org/whl/cu130", "https://download.pytorch.org/whl",
    "https://mirror.example.com/whl/cu126/", "https://mirror.example.com/pytorch/cpu",
    "https://mirror.example.com/torch/rocm6.4", "https://mirror.example.com/whl/CU130",
    "https://mirror.example.com/anything",  # not telling: the option's documented meaning
]


@pytest.mark.parametrize("url", PYPI_LIKE)
def test_pypi_like_urls(matrix: Matrix, url: str) -> None:
    assert index_kind(url, matrix)[0] == "pypi"


@pytest.mark.parametrize("url", [*PYTORCH_LIKE, None])
def test_pytorch_layout_urls(matrix: Matrix, url: str | None) -> None:
    assert index_kind(url, matrix)[0] == "pytorch"


@pytest.mark.parametrize("url", PYPI_LIKE[:3] + PYTORCH_LIKE[:3])
@pytest.mark.parametrize("kind", ["pypi", "pytorch"])
def test_override_wins(matrix: Matrix, url: str, kind: str) -> None:
    assert index_kind(url, matrix, kind) == (kind, "--torch-index-kind")


@pytest.mark.parametrize("bad", ["", "PyPI", "conda", "pypi ", "pytorch\n", "x" * 100])
def test_unknown_kind_refused(matrix: Matrix, bad: str) -> None:
    with pytest.raises(UsageError):
        index_kind("https://pypi.org/simple", matrix, bad)


def _variant_requests(m: Matrix) -> list[tuple[str, str, Request]]:
    """(release, variant tag, request) for every CUDA/ROCm/CPU variant of every release."""
    out = []
    for rel in m.torch:
        patch = m.patches_of(rel.version)[-1].torch
        for v in m.variants_of(rel.version):
            if v.kind == "cuda":
                req = Request(target="cuda", cuda=v.version, torch=patch)
            elif v.kind == "rocm":
                req = Request(target="rocm", rocm=v.version, torch=patch)
            else:
                req = Request(target="cpu", torch=patch)
            out.append((rel.version, v.tag, req))
    return out


def test_every_variant_of_every_release(matrix: Matrix) -> None:
    """The class of requests: on a PyPI-like index the release's default variant renders
    without local tags, every other variant is a conflict (exit 1) that names the fix."""
    checked_default = checked_refused = 0
    for release, tag, req in _variant_requests(matrix):
        try:
            spec = resolve(req, matrix)
        except (ConflictError, UsageError):
            continue  # the resolver refuses it whatever the index (e.g. no fitting OS)
        if spec.variant != tag:
            continue
        default = matrix.torch_release(release).default_variant  # type: ignore[union-attr]
        if tag == default:
            assert plan(spec, matrix, "https://pypi.org/simple").local_tag is False
            checked_default += 1
        else:
            with pytest.raises(ConflictError) as exc:
                plan(spec, matrix, "https://mirror.example.com/simple")
            assert exc.value.exit_code == 1
            assert f"/whl/{tag}" in exc.value.hint and "--torch-index-kind pytorch" in \
                exc.value.hint, exc.value.hint
            checked_refused += 1
        # the PyTorch layout keeps the exact local tag, whatever the variant
        assert plan(spec, matrix, f"https://mirror.example.com/whl/{tag}").local_tag is True
        assert plan(spec, matrix, "https://m.example.com/simple", "pytorch").local_tag is True
    assert checked_default >= 10 and checked_refused >= 30, (checked_default, checked_refused)


def test_pins_without_local_tag(matrix: Matrix) -> None:
    spec = resolve(Request(target="cuda", cuda="13.0", torch="2.13.0"), matrix)
    mirror = "https://nexus.example.com/repository/pypi/simple"
    local = plan(spec, matrix, mirror).local_tag
    files = render(spec, RenderOptions(torch_index_url=mirror, torch_local_tag=local), matrix)
    for name in ("requirements.txt", "constraints.txt"):
        pins = [x for x in files[name].content.splitlines() if x and not x.startswith("#")]
        assert pins and all("==" in p and "+" not in p for p in pins), pins
    assert f"--index-url {mirror}" in files["Dockerfile"].content
    exact = render(spec, RenderOptions(torch_index_url=mirror), matrix)
    assert "torch==2.13.0+cu130" in exact["requirements.txt"].content


def test_mps_unaffected(matrix: Matrix) -> None:
    spec = resolve(Request(target="mps", torch="2.9.1"), matrix)
    assert plan(spec, matrix, "https://pypi.org/simple").local_tag is False
    assert plan(spec, matrix, "https://mirror.example.com/simple", "pytorch").local_tag is False


@pytest.mark.parametrize("url,host", [
    ("http://172.17.0.1:8765/simple", "172.17.0.1:8765"),
    ("http://devpi.internal/root/pypi/+simple", "devpi.internal"),
    ("http://u:SECRET@mirror.corp:8080/simple", "mirror.corp:8080"),
    ("http://[fd00::1]:3141/simple", "[fd00::1]:3141"),
    ("https://mirror.corp/simple", None),
])
@pytest.mark.parametrize("flag", ["torch", "pip", "extra"])
def test_plain_http_index_is_trusted_for_its_host_only(matrix: Matrix, url: str,
                                                       host: str | None, flag: str) -> None:
    """pip ignores a plain-http index on another host unless --trusted-host names it (found by
    the served-mirror test: 'not a trusted or secure host and is being ignored')."""
    from envbuild.render.pipeline import ContextInputs, render_options

    ci = ContextInputs(torch_index_url=url if flag == "torch" else None,
                       pip_index_url=url if flag == "pip" else None,
                       pip_extra_index_urls=(url,) if flag == "extra" else (),
                       pip=("six",))  # the user-packages RUN exists only with packages
    opts, _ = render_options(ci)
    spec = resolve(Request(target="cpu", torch="2.13.0"), matrix)
    docker = render(spec, opts, matrix)["Dockerfile"].content
    assert "SECRET" not in docker
    if host is None:
        assert "--trusted-host" not in docker
    else:
        assert f"--trusted-host {shlex.quote(host)} " in docker  # [ ] are shell glob chars
        assert docker.count("--trusted-host") == (2 if flag == "extra" else 1)
