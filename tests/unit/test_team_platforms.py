"""Multi-platform team images (issue 22): the team file's platforms and per-platform tables, one
planned image per platform, the lock's index entry and its TOML, and what check compares."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from envbuild.common.errors import UsageError
from envbuild.features import team, teamfile
from envbuild.matrix import Matrix

F = Path("/team/envbuild.toml")
MULTI = """
[defaults]
registry = "registry.example.com/ml"
target = "cpu"
torch = "2.13.0"
os = "debian12"
without = ["torchvision", "torchaudio"]

[image.train]
platforms = ["linux/amd64", "aarch64"]
base_image = "mirror.example.com/debian:bookworm"

[image.train.arm64]
base_image = "mirror.example.com/debian-arm64:bookworm"
build_base_image = "mirror.example.com/debian:bookworm"
wheelhouse = "wheels-arm64"

[image.cpu]
"""


def test_platforms_and_a_platform_table_make_one_image_per_platform() -> None:
    t = teamfile.parse(MULTI, F)
    train = t.image("train")
    assert train.platforms == ("linux/amd64", "linux/arm64")
    amd, arm = (train.on(p) for p in train.platforms)
    assert amd.request.platform == "linux/amd64" and arm.request.platform == "linux/arm64"
    assert amd.inputs.base_image == "mirror.example.com/debian:bookworm"
    assert arm.inputs.base_image == "mirror.example.com/debian-arm64:bookworm"
    assert arm.inputs.build_base_image == "mirror.example.com/debian:bookworm"
    assert arm.inputs.wheelhouse == Path("/team/wheels-arm64") and amd.inputs.wheelhouse is None
    assert t.image("cpu").platforms == () and t.image("cpu").request.platform is None


@pytest.mark.parametrize("text,words", [
    ('[image.a]\nplatforms = ["linux/riscv64"]\n', ["not a platform"]),
    ('[image.a]\nplatform = "s390x"\n', ["not a platform"]),
    ('[image.a]\nplatforms = ["arm64"]\nplatform = "arm64"\n', ["both platform and platforms"]),
    ('[image.a]\nplatforms = ["amd64"]\n[image.a.arm64]\nbase_image = "x:1"\n',
     ["arm64", "not in its platforms"]),
    ('[image.a]\n[image.a.arm64]\nbase_image = "x:1"\n', ["not in its platforms"]),
    ('[image.a]\nplatforms = ["arm64"]\n[image.a.arm64]\npip = ["six"]\n',
     ["image.a.arm64", "not a per-platform key"]),
    ('[image.a]\nplatforms = ["arm64"]\n[image.a.arm64]\nbase_image = "scratch"\n',
     ["image.a.arm64", "base_image"]),
    ('[image.a]\nplatforms = ["arm64"]\n[image.a.arm64.amd64]\nbase_image = "x:1"\n',
     ["image.a.arm64", "amd64"]),
])
def test_bad_platform_keys_are_one_usage_error(text: str, words: list[str]) -> None:
    with pytest.raises(UsageError) as exc:
        teamfile.parse(text, F)
    assert exc.value.exit_code == 2
    for w in words:
        assert w in exc.value.message, (w, exc.value.message)


def test_plan_has_one_image_per_platform_with_its_own_tag(matrix: Matrix) -> None:
    planned = team.plan(teamfile.parse(MULTI.replace('wheelhouse = "wheels-arm64"\n', ""), F),
                        matrix)
    keys = [p.key for p in planned]
    assert keys == ["train@linux/amd64", "train@linux/arm64", "cpu"]
    amd, arm = planned[0], planned[1]
    assert arm.prepared.spec.platform == "linux/arm64" and "-arm64-" in arm.tag
    assert "arm64" not in amd.tag and amd.tag != arm.tag
    assert arm.layers["os"] != amd.layers["os"]  # never one layer across platforms
    assert "FROM --platform=$BUILDPLATFORM mirror.example.com/debian:bookworm AS torch-stack" \
        in str(arm.prepared.files["Dockerfile"].content)
    tag = team.index_tag([amd, arm])
    assert tag.startswith("train:torch2.13.0-py") and tag not in (amd.tag, arm.tag)
    assert team.index_tag([arm, amd]) == tag  # the order of the platforms does not matter
    data = team.plan_json(planned, team.lock_changes(planned, None), {})
    assert [i["name"] for i in data["images"]] == keys
    assert [i["platform"] for i in data["images"]][:2] == ["linux/amd64", "linux/arm64"]


def _entry(digest: str) -> dict[str, Any]:
    return {"tag": "r.example.com/ml/train:torch2.13.0-py3.11-arm64-abc", "digest": digest,
            "spec_hash": "abc", "torch": "2.13.0", "python": "3.11", "os": "debian12",
            "variant": "cpu", "base_image": "x:1", "base_digest": "sha256:" + "1" * 64,
            "pip": [], "packages": ["torch==2.13.0"],
            "validation": {"status": "pass", "gpu": {"not_run": ["a", "b"]}}}


def test_the_lock_writes_a_multi_platform_image_as_tables_that_read_back() -> None:
    lock = {"format": 1, "envbuild": "0.1.0", "image": {
        "train": {"tag": "r.example.com/ml/train:torch2.13.0-py3.11-def",
                  "digest": "sha256:" + "2" * 64, "torch": "2.13.0",
                  "platforms": {"linux/amd64": _entry("sha256:" + "3" * 64),
                                "linux/arm64": _entry("sha256:" + "4" * 64)}},
        "cpu": _entry("sha256:" + "5" * 64)}}
    text = team.dump_lock(lock)
    assert '[image.train.platforms."linux/arm64"]' in text
    assert tomllib.loads(text) == lock


def test_a_rebuilt_platform_image_changes_the_lock(matrix: Matrix) -> None:
    planned = team.plan(teamfile.parse(MULTI.replace('wheelhouse = "wheels-arm64"\n', ""), F),
                        matrix, ["train"])
    amd, arm = planned
    now = {p.platform: {"spec_hash": p.prepared.spec.hash, "tag": p.remote,
                        "base_image": p.base_image, "torch": "2.13.0",
                        "python": p.prepared.spec.python, "os": "debian12", "variant": "cpu",
                        "pip": []} for p in planned}
    old = {"image": {"train": {"platforms": now}}}
    assert team.lock_changes(planned, old) == {amd.key: [], arm.key: []}
    moved = {"image": {"train": {"platforms": {**now, "linux/arm64": {
        **now["linux/arm64"], "spec_hash": "000000000000"}}}}}
    changes = team.lock_changes(planned, moved)
    assert changes[amd.key] == [] and changes[arm.key][0].startswith("spec_hash: '000000000000'")
    assert team.lock_changes(planned, {"image": {"train": {}}})[arm.key] == ["new image"]


def test_locked_refuses_a_multi_platform_image_saying_so() -> None:
    t = teamfile.parse(MULTI, F)
    lock = {"image": {"train": {"platforms": {}}, "cpu": _entry("sha256:" + "5" * 64)}}
    with pytest.raises(UsageError, match="multi-platform image"):
        team.locked_team(t, lock, F.parent / "envbuild.lock")
