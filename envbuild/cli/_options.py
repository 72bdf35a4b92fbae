"""Options shared by resolve, render, build and make (Annotated aliases, declared once)."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import click
import typer

from envbuild.common.echo import shown
from envbuild.core.request import COMPONENTS, Request, check_given

if TYPE_CHECKING:
    from envbuild.render.pipeline import ContextInputs

WEEK = 7 * 24 * 3600.0


if TYPE_CHECKING:  # generic from click 8.3; a plain class before
    _ParamType = click.ParamType[float, Any]
else:
    _ParamType = click.ParamType


class SecondsType(_ParamType):
    """A duration in seconds: a finite number from `low` (above 0) to `high` (NaN, infinity,
    zero, negative and vanishing durations are bad input, not a timer that fires at once or
    never)."""

    name = "SECONDS"

    def __init__(self, low: float = 1.0, high: float = WEEK) -> None:
        assert 0 < low <= high
        self.low, self.high = low, high

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{shown(str(value))} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds) or not self.low <= seconds <= self.high:
            self.fail(f"{shown(str(value))} is not a number of seconds from {self.low:g} to "
                      f"{self.high:g}", param, ctx)
        return seconds


def seconds(help: str, low: float = 1.0, high: float = WEEK) -> Any:
    """A --timeout option in seconds (SecondsType)."""
    return typer.Option("--timeout", help=help, click_type=SecondsType(low, high))


Target = Annotated[str | None, typer.Option(
    "--target", help="cuda | rocm | cpu | mps (inferred: --cuda implies cuda, --rocm rocm).")]
Cuda = Annotated[str | None, typer.Option(
    "--cuda", help="CUDA toolkit of the environment, X.Y or X.Y.Z (e.g. 12.2); X alone: the "
    "newest X.y that fits.")]
Rocm = Annotated[str | None, typer.Option("--rocm", help="ROCm release, X.Y (e.g. 6.2).")]
Torch = Annotated[str | None, typer.Option(
    "--torch", help="torch version or specifier: 2.4, 2.4.1, '>=2.3,<2.6'.")]
Python = Annotated[str | None, typer.Option("--python", help="CPython version, 3.X.")]
Driver = Annotated[str | None, typer.Option(
    "--driver", help="Oldest NVIDIA driver the image must run on (e.g. 535.104.05); a branch "
    "alone (535) means its oldest release envbuild knows.")]
Gpu = Annotated[list[str] | None, typer.Option(
    "--gpu", help="GPU the image must run on: a name (H100, 'RTX 4090'), sm_XY or gfxNNN. "
    "Repeat for a fleet.")]
Os = Annotated[str | None, typer.Option("--os", help="Container OS, e.g. ubuntu22.04.")]
Flavor = Annotated[str | None, typer.Option(
    "--flavor", help="Base image flavor: base (default; ROCm: the plain OS) | runtime (CUDA) | "
    "devel (nvcc / hipcc).")]
Without = Annotated[list[str] | None, typer.Option(
    "--without", help="Leave out a companion: torchvision or torchaudio. Repeatable.")]
With = Annotated[list[str] | None, typer.Option(
    "--with", help="A CUDA extension with a prebuilt wheel that fits: NAME or NAME==VERSION "
    "(xformers, flash-attn, bitsandbytes, vllm, transformer-engine). Repeatable.")]
BuildExtensions = Annotated[bool, typer.Option(
    "--build-extensions", help="Where no prebuilt wheel of a --with extension fits, compile it "
    "from its PyPI sdist in a builder stage for exactly the --gpu archs (flash-attn, xformers; "
    "needs a CUDA 13 torch and --gpu). A prebuilt wheel on an older torch still comes first.")]
ForwardCompat = Annotated[bool, typer.Option(
    "--forward-compat", help="Allow a CUDA newer than --driver runs natively, through NVIDIA's "
    "forward-compatibility libraries (data-center GPUs only; needs --driver and --gpu).")]
Platform = Annotated[str | None, typer.Option(
    "--platform", help="Platform of the image: linux/amd64 | linux/arm64 (Grace Hopper, Grace "
    "Blackwell, DGX Spark, Graviton); default: this host's.")]
Json = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
Junit = Annotated[Path | None, typer.Option(
    "--junit", metavar="FILE", help="Also write the checks as JUnit XML to FILE for CI (one "
    "testcase per check; a failure, an error, skipped or not run; written atomically, also when "
    "checks fail, without changing the exit code; an old FILE is removed first). A directory, a "
    "special file, a symlink, the command's own input or an unwritable place is exit 2.")]
Size = Annotated[bool, typer.Option(
    "--size", help="Estimate the image size per layer (asks the package indexes and the base "
    "image's registry; what cannot be reached is reported unknown).")]


def make_request(target: str | None, cuda: str | None, rocm: str | None, torch: str | None,
                 python: str | None, driver: str | None, gpu: list[str] | None,
                 os: str | None, flavor: str | None, without: list[str] | None,
                 forward_compat: bool = False, platform: str | None = None,
                 with_: list[str] | None = None, build_extensions: bool = False) -> Request:
    check_given(target=target, cuda=cuda, rocm=rocm, torch=torch, python=python, driver=driver,
                os=os, flavor=flavor, platform=platform)
    left_out = set(without or ())
    # Target names are case-insensitive (--target CPU); the resolver checks the value.
    return Request(target=target.strip().lower() if target else target, cuda=cuda, rocm=rocm,
                   torch=torch, python=python, driver=driver, gpus=tuple(gpu or ()), os=os,
                   flavor=flavor, forward_compat=forward_compat, platform=platform,
                   extensions=tuple(with_ or ()), build_extensions=build_extensions,
                   components=tuple(c for c in COMPONENTS if c not in left_out)
                   + tuple(sorted(left_out - set(COMPONENTS))))


RequestMaker = Callable[[], Request]  # what a command with request_options() gets

_REQUEST_OPTIONS: tuple[tuple[str, Any, bool | None], ...] = (
    ("target", Target, None), ("cuda", Cuda, None), ("rocm", Rocm, None), ("torch", Torch, None),
    ("python", Python, None), ("driver", Driver, None), ("gpu", Gpu, None), ("os", Os, None),
    ("flavor", Flavor, None), ("without", Without, None), ("with_", With, None),
    ("build_extensions", BuildExtensions, False),
    ("forward_compat", ForwardCompat, False), ("platform", Platform, None))


def request_options(*, forward_compat: bool = True) -> Callable[[Callable[..., None]],
                                                                 Callable[..., None]]:
    """A command's request options (--target ... --without, and --forward-compat unless told
    not), declared once: they stand in the command's signature where its parameter `request`
    stands, and the command gets `request`, a function that makes the Request from them (called
    where the command checks them)."""
    names = [n for n, _, _ in _REQUEST_OPTIONS if forward_compat or n != "forward_compat"]

    def wrap(command: Callable[..., None]) -> Callable[..., None]:
        sig = inspect.signature(command, eval_str=True)
        params = list(sig.parameters.values())
        at = [p.name for p in params].index("request")
        options = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default,
                                     annotation=annotation)
                   for n, annotation, default in _REQUEST_OPTIONS if n in names]
        params[at:at + 1] = options

        @functools.wraps(command)
        def run(**kwargs: Any) -> None:
            given = {n: kwargs.pop(n) for n in names}
            command(request=functools.partial(make_request, **given), **kwargs)

        run.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
        return run

    return wrap


# Options of the rendered build context, shared by render, build and make.
Pip = Annotated[list[str] | None, typer.Option(
    "--pip", help="Extra pip requirement (PEP 508). Repeatable.")]
Apt = Annotated[list[str] | None, typer.Option(
    "--apt", help="Extra OS package (name or name=version). Repeatable.")]
Conda = Annotated[list[str] | None, typer.Option(
    "--conda", help="Extra conda package for environment.yml (MatchSpec). Repeatable.")]
AllowUrl = Annotated[bool, typer.Option(
    "--allow-url", help="Allow direct-URL pip requirements (name @ https://...).")]
User = Annotated[str, typer.Option(
    "--user", help="User the image runs as; 'root' to opt out of the non-root default.")]
PipIndex = Annotated[str | None, typer.Option(
    "--pip-index-url", help="Index for user packages (default PyPI); credentials in the URL "
    "go into a BuildKit secret, never into the image.")]
PipExtraIndex = Annotated[list[str] | None, typer.Option(
    "--pip-extra-index-url", help="Extra index for all pip installs. Repeatable.")]
TorchIndex = Annotated[str | None, typer.Option(
    "--torch-index-url", help="Index for torch and its companions: a mirror of the PyTorch "
    "wheel index for the resolved variant, or a PyPI-like index (a path ending in /simple: "
    "only the release's PyPI default variant, pinned without +cuXXX).")]
Proxy = Annotated[str | None, typer.Option(
    "--proxy", help="HTTP(S) proxy for apt, dnf and pip inside the build (default: HTTP_PROXY / "
    "HTTPS_PROXY / NO_PROXY from the environment); never stored in the image.")]
TorchIndexKind = Annotated[str | None, typer.Option(
    "--torch-index-kind", help="pypi | pytorch: the layout of --torch-index-url when its URL "
    "shape misleads (e.g. an Artifactory mirror of download.pytorch.org ending in /simple).")]
CudaRedist = Annotated[str | None, typer.Option(
    "--cuda-redist-url", help="A mirror of NVIDIA's redist root (developer.download.nvidia.com/"
    "compute/cuda/redist/) for --forward-compat: its redistrib_<ver>.json gives the archive's "
    "checksum.")]
CaCert = Annotated[Path | None, typer.Option(
    "--ca-cert", help="CA bundle for HTTPS inside the build (a BuildKit secret, never stored).")]
Wheelhouse = Annotated[Path | None, typer.Option(
    "--wheelhouse", help="Directory of wheels for a fully offline install (--no-index).")]
BaseImage = Annotated[str | None, typer.Option(
    "--base-image", help="Override the base image (a mirror, an offline base).")]
BuildBaseImage = Annotated[str | None, typer.Option(
    "--build-base-image", help="Another platform's torch stage runs on the build machine, in "
    "this image (default: the base image, then multi-platform).")]
BuildExtension = Annotated[list[Path] | None, typer.Option(
    "--build-extension", help="A CUDA extension's source directory (setup.py or "
    "pyproject.toml) to compile in a builder stage, for the --gpu archs, with nvcc from PyPI; "
    "only its wheel reaches the image. Repeatable.")]
PythonSource = Annotated[str | None, typer.Option(
    "--python-source", help="os | standalone: where the image's Python comes from.")]


def context_inputs(pip: list[str] | None, apt: list[str] | None, conda: list[str] | None,
                   allow_url: bool, user: str, pip_index_url: str | None,
                   pip_extra_index_url: list[str] | None, torch_index_url: str | None,
                   ca_cert: Path | None, wheelhouse: Path | None, base_image: str | None,
                   python_source: str | None, apptainer: bool = False,
                   torch_index_kind: str | None = None,
                   cuda_redist_url: str | None = None,
                   build_base_image: str | None = None,
                   build_extension: list[Path] | None = None) -> ContextInputs:
    check_given(pip_index_url=pip_index_url, torch_index_url=torch_index_url, user=user,
                base_image=base_image, build_base_image=build_base_image,
                python_source=python_source,
                torch_index_kind=torch_index_kind, cuda_redist_url=cuda_redist_url)
    for url in pip_extra_index_url or ():
        check_given(pip_extra_index_url=url)
    from envbuild.render.pipeline import ContextInputs  # not on `envbuild resolve`'s path

    return ContextInputs(pip=tuple(pip or ()), apt=tuple(apt or ()), conda=tuple(conda or ()),
                         allow_url=allow_url, user=user, pip_index_url=pip_index_url,
                         pip_extra_index_urls=tuple(pip_extra_index_url or ()),
                         torch_index_url=torch_index_url, torch_index_kind=torch_index_kind,
                         ca_cert=ca_cert, wheelhouse=wheelhouse,
                         base_image=base_image, build_base_image=build_base_image,
                         python_source=python_source, apptainer=apptainer,
                         cuda_redist_url=cuda_redist_url,
                         extension_sources=tuple(build_extension or ()))
