"""Pure parts of a warm make: the default tag, the validation cache, the doctor's default."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.engine.build import context_hash, default_tag, load_spec
from tests.support import run_cli

BASE = ["--target", "cpu", "--torch", "2.13.0", "--python", "3.11", "--os", "debian12",
        "--without", "torchvision", "--without", "torchaudio"]
VARIANTS = {"plain": [], "pip": ["--pip", "six==1.16.0"], "pip2": ["--pip", "six==1.17.0"],
            "apt": ["--apt", "curl"], "conda": ["--conda", "numpy"],
            "base": ["--base-image", "local/debian:bookworm"],
            "base2": ["--base-image", "example.org/debian:12"]}


@pytest.fixture(scope="module")
def tags(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = {}
    for name, extra in VARIANTS.items():
        ctx = tmp_path_factory.mktemp("ctx") / name
        r = run_cli("render", *BASE, *extra, "--out", str(ctx))
        assert r.returncode == 0, r.stderr
        out[name] = default_tag(load_spec(ctx), context_hash(ctx))
    return out


def test_default_tag_is_readable_and_names_the_whole_input(tags: dict[str, str]) -> None:
    """Two builds that differ in user packages or base image never share a default tag."""
    assert len(set(tags.values())) == len(tags), tags
    for tag in tags.values():
        repo, _, name = tag.partition(":")
        assert repo == "envbuild/cpu"
        assert name.startswith("torch2.13.0-py3.11-")
        digest = name.rsplit("-", 1)[1]
        assert len(digest) == 12 and int(digest, 16) >= 0


def test_default_tag_is_stable(tags: dict[str, str], tmp_path: Path) -> None:
    r = run_cli("render", *BASE, "--out", str(tmp_path / "again"))
    assert r.returncode == 0
    again = tmp_path / "again"
    assert default_tag(load_spec(again), context_hash(again)) == tags["plain"]


def test_default_tag_keeps_the_variant_for_gpu_images(tmp_path: Path) -> None:
    r = run_cli("render", "--cuda", "12.8", "--torch", "2.9", "--out", str(tmp_path / "c"))
    assert r.returncode == 0, r.stderr
    spec = load_spec(tmp_path / "c")
    tag = default_tag(spec, context_hash(tmp_path / "c"))
    assert tag.startswith(f"envbuild/cuda:torch{spec.torch}-{spec.variant}-py{spec.python}-")

