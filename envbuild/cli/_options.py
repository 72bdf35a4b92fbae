"""Options shared by resolve, render, build and make (Annotated aliases, declared once)."""

from __future__ import annotations

from typing import Annotated

import typer

from envbuild.request import COMPONENTS, Request

Target = Annotated[str | None, typer.Option(
    "--target", help="cuda | rocm | cpu | mps (inferred: --cuda implies cuda, --rocm rocm).")]
Cuda = Annotated[str | None, typer.Option(
    "--cuda", help="CUDA toolkit of the environment, X.Y or X.Y.Z (e.g. 12.2).")]
Rocm = Annotated[str | None, typer.Option("--rocm", help="ROCm release, X.Y (e.g. 6.2).")]
Torch = Annotated[str | None, typer.Option(
    "--torch", help="torch version or specifier: 2.4, 2.4.1, '>=2.3,<2.6'.")]
Python = Annotated[str | None, typer.Option("--python", help="CPython version, 3.X.")]
Driver = Annotated[str | None, typer.Option(
    "--driver", help="Oldest NVIDIA driver the image must run on (e.g. 535.104.05).")]
Gpu = Annotated[list[str] | None, typer.Option(
    "--gpu", help="GPU the image must run on: a name (H100, 'RTX 4090'), sm_XY or gfxNNN. "
    "Repeat for a fleet.")]
Os = Annotated[str | None, typer.Option("--os", help="Container OS, e.g. ubuntu22.04.")]
Flavor = Annotated[str | None, typer.Option(
    "--flavor", help="CUDA base image flavor: base (default) | runtime | devel.")]
Without = Annotated[list[str] | None, typer.Option(
    "--without", help="Leave out a companion: torchvision or torchaudio. Repeatable.")]
Json = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]


def make_request(target: str | None, cuda: str | None, rocm: str | None, torch: str | None,
                 python: str | None, driver: str | None, gpu: list[str] | None,
                 os: str | None, flavor: str | None, without: list[str] | None) -> Request:
    left_out = set(without or ())
    return Request(target=target, cuda=cuda, rocm=rocm, torch=torch, python=python,
                   driver=driver, gpus=tuple(gpu or ()), os=os, flavor=flavor,
                   components=tuple(c for c in COMPONENTS if c not in left_out)
                   + tuple(sorted(left_out - set(COMPONENTS))))
