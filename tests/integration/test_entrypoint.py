"""An image whose ENTRYPOINT prints (nvidia/cuda's: the "== CUDA ==" banner, "NVIDIA Driver was
not detected") or fails: the runs that read a program's output from an image (the SBOM probe,
the lock's package list) replace it, and the host reads only what follows the probe's marker.

No build: the images are the test base with a changed ENTRYPOINT (`docker commit --change`),
one with a stand-in /opt/venv/bin/python that prints what the probe prints (the base has no
Python)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from envbuild.engine import docker as engine
from envbuild.engine import image_facts
from envbuild.engine.sbom_probe import MARKER
from tests.support import IN_CI
from tests.support.docker_helpers import BASE, docker

pytestmark = pytest.mark.docker

BANNER = ('["/bin/sh", "-c", "echo == CUDA ==; echo NVIDIA Driver was not detected; '
          'exec \\"$@\\"", "x"]')
FAILING = '["/bin/sh", "-c", "echo == CUDA ==; exit 3", "x"]'
DISTS = {"format": 1, "dists": [
    {"name": "torch", "version": "2.13.0+cu130", "direct": ""},
    {"name": "flash_attn", "version": "2.8.3", "direct": "archive"},  # ext-wheels/*.whl by path
    {"name": "pip", "version": "25.2", "direct": ""}]}
# what the probe prints, from a stand-in for the venv's Python (it ignores its arguments)
STANDIN = f"#!/bin/sh\nprintf '\\n%s\\n%s\\n' '{MARKER}' '{json.dumps(DISTS)}'\n"

SETUP = ("mkdir -p /opt/venv/bin && printf '%s' \"$0\" > /opt/venv/bin/python "
         "&& chmod 755 /opt/venv/bin/python")  # $0: STANDIN


def _image(entrypoint: str) -> Iterator[str]:
    if docker("image", "inspect", BASE, check=False).returncode != 0:
        msg = f"base image {BASE} missing (run `make fixtures`)"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    tag = f"local/envbuild-test-entrypoint:{uuid.uuid4().hex[:12]}"
    name = f"envbuild-test-entrypoint-{uuid.uuid4().hex[:12]}"
    docker("run", "--name", name, "--network", "none", BASE, "/bin/sh", "-c", SETUP, STANDIN)
    try:
        docker("commit", "--change", f"ENTRYPOINT {entrypoint}", name, tag)
    finally:
        docker("rm", "-f", name, check=False)
    try:
        yield tag
    finally:
        docker("rmi", "-f", tag, check=False)


@pytest.fixture(scope="module")
def banner_image(docker_engine: None) -> Iterator[str]:
    yield from _image(BANNER)


@pytest.fixture(scope="module")
def failing_image(docker_engine: None) -> Iterator[str]:
    yield from _image(FAILING)


def _run(image: str, command: list[str], **kw: object) -> engine.RunResult:
    return engine.run_container(image, command, target="cpu", gpus=False, timeout=60,
                                labels={engine.LABEL_ROLE: "test"}, network=False, **kw)


def test_run_container_replaces_the_entrypoint(banner_image: str) -> None:
    kept = _run(banner_image, ["/bin/echo", "hello"])
    assert kept.output.startswith("== CUDA ==\nNVIDIA Driver was not detected\n")  # the image's
    replaced = _run(banner_image, ["hello"], entrypoint=["/bin/echo"])
    assert (replaced.exit_code, replaced.output) == (0, "hello\n")


def test_the_banner_before_the_marker_is_skipped(banner_image: str) -> None:
    """Through the image's own entrypoint (not replaced): the banner, then the probe's output."""
    r = _run(banner_image, ["/opt/venv/bin/python"])
    assert r.output.startswith("== CUDA ==")
    assert image_facts.probe_output(r.output) == DISTS


def test_the_lock_lists_every_distribution_past_the_entrypoint(banner_image: str,
                                                               failing_image: str) -> None:
    from envbuild.features import team

    for image in (banner_image, failing_image):  # one that never runs the command at all
        assert image_facts.installed(image) == DISTS
        frozen = team.freeze(image)
        assert frozen.packages == ("flash_attn==2.8.3", "pip==25.2", "torch==2.13.0+cu130")
        assert frozen.direct == ("flash_attn",)
