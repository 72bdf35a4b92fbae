"""The formats agree (issue #20, class 1, "formats disagree"): generated requests, every format.

- Which index serves what: the Dockerfile, environment.yml and setup-macos.sh install torch from
  the torch index and the user's packages from the user's index (envbuild.render.context.Indexes).
- apptainer.def bootstraps from the image `build` makes of the same directory: its From: is the
  tag `build` gives (envbuild.core.tags.default_tag), from the local Docker engine.
- `make --help` / `build --help` state the tag format default_tag follows.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from envbuild.core import tags
from tests.support import run_cli
from tests.support.formats import _environment_yml


def test_the_issue_example_environment_yml_uses_the_user_index(tmp_path: Path) -> None:
    r = run_cli("render", "--cuda", "12.2", "--torch", "2.5.1", "--pip", "numpy<2",
                "--pip-index-url", "https://pypi.example.com/simple", "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    call, _ = _environment_yml((tmp_path / "o" / "environment.yml").read_text())
    assert call.index == "https://pypi.example.com/simple"
    assert call.extras == ["https://download.pytorch.org/whl/cu121"]


def test_a_changed_context_changes_the_tag_and_apptainer_def_is_not_an_input(
        tmp_path: Path) -> None:
    r = run_cli("render", "--target", "cpu", "--torch", "2.13.0", "--os", "debian12",
                "--format", "apptainer", "--out", str(tmp_path / "c"))
    assert r.returncode == 0, r.stderr
    ctx = tmp_path / "c"
    before = tags.context_hash(ctx)
    (ctx / "apptainer.def").write_text("Bootstrap: docker-daemon\nFrom: mine:1\n")
    assert tags.context_hash(ctx) == before  # not a build input: it cannot name itself
    (ctx / "user-requirements.txt").write_text("six\n")
    assert tags.context_hash(ctx) != before


def _help_text(*args: str) -> str:
    r = run_cli(*args, "--help", env={"COLUMNS": "80"})
    assert r.returncode == 0
    text = re.sub(r"[│╭╮╰╯─]", " ", r.stdout)
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("command", ["make", "build"])
def test_help_states_the_tag_format(command: str) -> None:
    text = _help_text(command)
    repo, name = tags.DEFAULT_TAG_FORMAT.split(":")
    assert f"default: {repo} tagged {name}" in text, text
    assert "<spec hash>" not in text and "<torch>-<variant>" not in text
