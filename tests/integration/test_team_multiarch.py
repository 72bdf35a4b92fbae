"""A two-platform team image on the real engine and a real local registry (issue 22): one tag,
an OCI image index over a linux/amd64 and a linux/arm64 CUDA image (the arm64 one built and
checked under emulation), the lock pinning the index and each platform's digest, `team check`
passing and then catching a platform manifest that moved, and a pull of each platform running its
own architecture.

The platform images' inputs equal test_cuda_image's and test_arm64_image's (same bases, wheels and
options, and requirements.txt holds no spec hash), so BuildKit's cache serves their layers when
those ran first; the pushes are the new cost, and `--jobs 2` runs the two platforms' at once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import IN_CI, run_cli, work_dir
from tests.support.docker_helpers import BASE, docker
from tests.support.registry import start_registry
from tests.support.team import TeamRun, remove_images

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ARM_BASE = os.environ.get("ENVBUILD_TEST_BASE_ARM64", "local/debian:bookworm-arm64")
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
PLATFORMS = ["linux/amd64", "linux/arm64"]


class Multi(TeamRun):
    @property
    def index(self) -> dict[str, Any]:
        (ix,) = self.data["indexes"]
        return dict(ix)


def team_file(reg: str, amd_wheels: Path, arm_wheels: Path) -> str:
    return f"""
[defaults]
registry = "{reg}/team-arm"
target = "cuda"
torch = "2.13.0"
python = "3.11"
os = "debian12"
without = ["torchvision", "torchaudio"]

[image.gpu]
platforms = {json.dumps(PLATFORMS)}
base_image = "{reg}/base/debian:bookworm"
wheelhouse = "{amd_wheels}"

[image.gpu.arm64]
base_image = "{reg}/base/debian:bookworm-arm64"
build_base_image = "{reg}/base/debian:bookworm"
wheelhouse = "{arm_wheels}"
"""


def _get(reg: str, path: str, accept: str) -> tuple[dict[str, Any], str]:
    req = urllib.request.Request(f"http://{reg}/v2/{path}", headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=30) as r:
        return dict(json.loads(r.read())), str(r.headers.get("Docker-Content-Digest", ""))


def _repo_ref(reg: str, tag: str) -> tuple[str, str]:
    repo, _, reference = tag.removeprefix(f"{reg}/").rpartition(":")
    return repo, reference


@pytest.fixture(scope="module")
def multi(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Multi]:
    amd_wheels = work_dir() / "cuda-wheelhouse"
    arm_wheels = work_dir() / "cuda-wheelhouse-arm64"
    missing = [str(p) for p in (amd_wheels, arm_wheels) if not list(p.glob("torch-2.13.0-*.whl"))]
    missing += [b for b in (BASE, ARM_BASE)
                if docker("image", "inspect", b, check=False).returncode != 0]
    if missing:
        msg = f"missing for the two-platform team image: {', '.join(missing)} (make fixtures)"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    storage = tmp_path_factory.mktemp("multi-registry")
    proc, reg = start_registry(storage)
    made = []
    data: dict[str, Any] = {}
    try:
        for local, remote in ((BASE, f"{reg}/base/debian:bookworm"),
                              (ARM_BASE, f"{reg}/base/debian:bookworm-arm64")):
            docker("tag", local, remote)
            docker("push", remote)
            made.append(remote)
        d = tmp_path_factory.mktemp("multi")
        (d / "envbuild.toml").write_text(team_file(reg, amd_wheels, arm_wheels))
        # --jobs 2: the two platform images build, validate and push at once (distinct torch
        # stacks); each push's gzip is single-threaded, so the two overlap on two cores
        r = run_cli("team", "build", "--file", str(d / "envbuild.toml"), "--push", "--json",
                    "--jobs", "2", timeout=3600)
        assert r.returncode == 0, r.stderr[-4000:]
        data = json.loads(r.stdout)
        yield Multi(reg, d, data, r.stderr)
    finally:
        for i in data.get("images", []):
            made += [i["tag"], i["tag"].removeprefix(f"{reg}/team-arm/")]
        made += [ix["tag"] for ix in data.get("indexes", [])]
        docker("rmi", *made, check=False)
        remove_images("gpu")  # the platform images' local tags and the pulled index's
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(storage, ignore_errors=True)  # two CUDA images' blobs: gigabytes
        docker("builder", "prune", "--filter", "type=source.local", "-f", check=False)


def test_both_platform_images_build_validate_and_push(multi: Multi) -> None:
    images = multi.data["images"]
    assert [(i["name"], i["platform"]) for i in images] == [("gpu", p) for p in PLATFORMS]
    for i in images:
        assert i["validation"]["status"] == "pass" and i["pushed"] is True, i
        assert i["digest"].startswith("sha256:")
    assert "-arm64-" in images[1]["tag"] and "arm64" not in images[0]["tag"]
    for p in PLATFORMS:
        assert f"[gpu@{p}] pass" in multi.stderr


def test_one_tag_is_an_oci_index_over_both_platforms(multi: Multi) -> None:
    ix = multi.index
    repo, reference = _repo_ref(multi.registry, ix["tag"])
    body, digest = _get(multi.registry, f"{repo}/manifests/{reference}", OCI_INDEX)
    assert digest == ix["digest"] and body["mediaType"] == OCI_INDEX
    listed = {f"{m['platform']['os']}/{m['platform']['architecture']}": m["digest"]
              for m in body["manifests"]}
    assert listed == {i["platform"]: i["digest"] for i in multi.data["images"]}
    # each entry is the platform image itself, whose config says its architecture
    for platform, d in listed.items():
        m, _ = _get(multi.registry, f"{repo}/manifests/{d}",
                    "application/vnd.docker.distribution.manifest.v2+json")
        cfg = urllib.request.urlopen(f"http://{multi.registry}/v2/{repo}/blobs/"
                                     f"{m['config']['digest']}", timeout=30).read()
        assert json.loads(cfg)["architecture"] == platform.split("/")[1]


def test_the_lock_pins_the_index_and_each_platform(multi: Multi) -> None:
    e = multi.lock["image"]["gpu"]
    assert (e["tag"], e["digest"]) == (multi.index["tag"], multi.index["digest"])
    assert sorted(e["platforms"]) == PLATFORMS
    for i in multi.data["images"]:
        pe = e["platforms"][i["platform"]]
        assert (pe["digest"], pe["tag"]) == (i["digest"], i["tag"])
        assert pe["validation"]["status"] == "pass"
        assert pe["pins"] == ["torch==2.13.0"]
    arm = e["platforms"]["linux/arm64"]["validation"]["gpu"]
    assert "compile.smoke" in arm["not_run_emulated"]  # what emulation could not judge, said


def test_each_platform_pull_runs_its_own_architecture(multi: Multi) -> None:
    tag = multi.index["tag"]
    for platform, machine in (("linux/arm64", "aarch64"), ("linux/amd64", "x86_64")):
        docker("pull", "--platform", platform, tag)
        out = docker("run", "--rm", "--platform", platform, tag, "uname", "-m").stdout.strip()
        assert out == machine, (platform, out)


# -- changes the registry: last ---------------------------------------------------------------
def test_check_passes_then_catches_a_platform_manifest_that_moved(multi: Multi) -> None:
    f = str(multi.dir / "envbuild.toml")
    r = run_cli("team", "check", "--file", f, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(r.stdout)["images"]
    assert [x["name"] for x in rows] == ["gpu"] + [f"gpu@{p}" for p in PLATFORMS]
    assert [x["report"]["status"] for x in rows[1:]] == ["pass", "pass"]
    # someone pushes the tag again with another linux/arm64 manifest (here: the amd64 one)
    ix = multi.index
    repo, reference = _repo_ref(multi.registry, ix["tag"])
    body, _ = _get(multi.registry, f"{repo}/manifests/{reference}", OCI_INDEX)
    amd = ix["platforms"]["linux/amd64"]
    for m in body["manifests"]:
        if m["platform"]["architecture"] == "arm64":
            m["digest"] = amd
            m["size"] = next(x["size"] for x in body["manifests"] if x["digest"] == amd)
    put = urllib.request.Request(f"http://{multi.registry}/v2/{repo}/manifests/{reference}",
                                 data=json.dumps(body).encode(), method="PUT",
                                 headers={"Content-Type": OCI_INDEX})
    moved = urllib.request.urlopen(put, timeout=30).headers["Docker-Content-Digest"]
    r = run_cli("team", "check", "--file", f)
    assert r.returncode == 1
    assert f"problem: gpu: the tag {ix['tag']} moved: locked index {ix['digest']}, now " \
           f"{moved}" in r.stderr
    assert re.search(rf"problem: gpu: the linux/arm64 manifest moved: locked "
                     rf"{ix['platforms']['linux/arm64']}, the index at \S+ now lists {amd}",
                     r.stderr), r.stderr
