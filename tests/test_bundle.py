"""Pure parts of air-gapped bundles: the Dockerfile cut, the hashed requirements, the checks
of a bundle directory (the real offline build is tests/test_corp_bundle.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envbuild.bundle import (
    BUNDLE_SCHEMA,
    hashed_requirements,
    offline_dockerfile,
    read_bundle,
    split_dockerfile,
    write_meta,
)
from envbuild.errors import UsageError

GOLDEN = Path(__file__).parent / "golden"
DOCKERFILES = sorted(p.parent.name for p in GOLDEN.glob("*/Dockerfile"))


@pytest.mark.parametrize("name", DOCKERFILES)
def test_every_rendered_dockerfile_splits_after_the_os_steps(name: str) -> None:
    text = (GOLDEN / name / "Dockerfile").read_text()
    system, rest = split_dockerfile(text)
    assert system + rest == text
    assert "FROM " in system and "FROM " not in rest
    assert ("apt-get" in system or "dnf" in system) and "apt-get" not in rest
    assert rest.startswith("COPY ") and "pip install" in rest
    assert offline_dockerfile(rest, "envbuild-bundle/system:x").count("\nFROM ") == 1


def test_no_cut_point_refused() -> None:
    with pytest.raises(UsageError):
        split_dockerfile("FROM x\nRUN true\n")


def test_hashed_requirements() -> None:
    text = hashed_requirements({"torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl": "a" * 64,
                                "typing_extensions-4.16.0-py3-none-any.whl": "b" * 64,
                                "Jinja2-3.1.6-py3-none-any.whl": "c" * 64})
    lines = text.splitlines()[1:]
    assert lines == [f"jinja2==3.1.6 --hash=sha256:{'c' * 64}",
                     f"torch==2.13.0+cpu --hash=sha256:{'a' * 64}",
                     f"typing-extensions==4.16.0 --hash=sha256:{'b' * 64}"]


@pytest.mark.parametrize("bad", ["torch.tar.gz", "x.whl", "torch-2.13.0.whl",
                                 "a b-1-py3-none-any.whl"])
def test_non_wheels_refused(bad: str) -> None:
    with pytest.raises(UsageError):
        hashed_requirements({bad: "0" * 64})


def _bundle(tmp_path: Path) -> Path:
    root = tmp_path / "b"
    (root / "context").mkdir(parents=True)
    (root / "context" / "requirements.txt").write_text("x==1\n")
    (root / "system.tar").write_bytes(b"tar")
    write_meta(root, {"system_ref": "r", "system_id": "sha256:1"})
    return root


def test_round_trip(tmp_path: Path) -> None:
    b = read_bundle(_bundle(tmp_path))
    assert b.system_ref == "r" and b.meta["schema"] == BUNDLE_SCHEMA


@pytest.mark.parametrize("damage", ["change", "remove", "traversal", "schema", "garbage"])
def test_damaged_bundles_refused(tmp_path: Path, damage: str) -> None:
    root = _bundle(tmp_path)
    meta = json.loads((root / "bundle.json").read_text())
    if damage == "change":
        (root / "system.tar").write_bytes(b"tar2")
    elif damage == "remove":
        (root / "context" / "requirements.txt").unlink()
    elif damage == "traversal":
        meta["files"]["../outside"] = "0" * 64
        (root / "bundle.json").write_text(json.dumps(meta))
    elif damage == "schema":
        meta["schema"] = 99
        (root / "bundle.json").write_text(json.dumps(meta))
    else:
        (root / "bundle.json").write_text("{not json")
    with pytest.raises(UsageError) as exc:
        read_bundle(root)
    assert exc.value.exit_code == 2
