"""Builders beyond this machine (issue 22): a team image built and pushed by this machine's engine,
then built by a second Docker engine (its own socket and data root, standing in for a remote
builder) named in the team file: the second engine takes the torch layer from the registry's
cache instead of installing torch again, checks the image and pushes the same digest.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support import run_cli
from tests.support.docker_helpers import BASE, SYSTEM_CA, docker
from tests.support.engines import engine_docker, second_engine
from tests.support.registry import start_registry
from tests.support.team import TeamRun, remove_images

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def team_file(reg: str, wheelhouse: Path, engine: str = "") -> str:
    return f"""
[defaults]
registry = "{reg}/team-b"
target = "cpu"
torch = "2.13.0"
python = "3.11"
os = "debian12"
without = ["torchvision", "torchaudio"]
base_image = "{reg}/base/debian:bookworm"
wheelhouse = "{wheelhouse}"
ca_cert = "{SYSTEM_CA}"
{f'engine = "{engine}"' if engine else ""}

[image.trainer]
"""


@dataclass
class Runs(TeamRun):
    engine: str = ""
    second: dict[str, Any] = field(default_factory=dict)
    second_seconds: float = 0.0
    first_seconds: float = 0.0


def _build(d: Path) -> tuple[dict[str, Any], str, float]:
    t = time.monotonic()
    r = run_cli("team", "build", "--file", str(d / "envbuild.toml"), "--push", "--json",
                timeout=1800)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout), r.stderr, time.monotonic() - t


@pytest.fixture(scope="module")
def runs(fixtures: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    proc, reg = start_registry(tmp_path_factory.mktemp("engines-registry"))
    base = f"{reg}/base/debian:bookworm"
    made = [base]
    try:
        docker("tag", BASE, base)
        docker("push", base)
        d = tmp_path_factory.mktemp("engines")
        (d / "envbuild.toml").write_text(team_file(reg, fixtures))
        first, stderr, first_s = _build(d)  # this machine's engine: pushes with its cache
        made += [i["tag"] for i in first["images"]]
        with second_engine(tmp_path_factory.mktemp("engine-b")) as url:
            (d / "envbuild.toml").write_text(team_file(reg, fixtures, url))
            second, _, second_s = _build(d)  # the other engine, from the registry
            run = Runs(reg, d, first, stderr)
            run.engine, run.second = url, second
            run.first_seconds, run.second_seconds = first_s, second_s
            yield run
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        docker("rmi", *made, check=False)
        remove_images("trainer")


def test_the_second_engine_builds_from_the_registry_cache(runs: Runs) -> None:
    (a,), (b,) = runs.data["images"], runs.second["images"]
    assert a["validation"]["status"] == b["validation"]["status"] == "pass"
    # built there (the first engine's log is not reused), with torch's layer taken from the
    # registry: its pip step is a cache hit there, never run
    log = Path(b["log"]).read_text()
    assert "importing cache manifest from" in log, log[-3000:]
    step = re.search(r"^#(\d+) \[.*\] RUN .*-r /opt/envbuild/requirements\.txt", log, re.M)
    assert step is not None and re.search(rf"^#{step.group(1)} CACHED$", log, re.M), \
        "the second engine installed torch again"
    assert engine_docker(runs.engine, "image", "inspect", b["tag"]).returncode == 0
    # the same image: the same digest in the registry
    assert b["digest"] == a["digest"], (a, b)
    print(f"first engine {runs.first_seconds:.0f} s, second engine from the registry cache "
          f"{runs.second_seconds:.0f} s")


def test_the_lock_written_by_the_second_engine_still_checks(runs: Runs) -> None:
    r = run_cli("team", "check", "--file", str(runs.dir / "envbuild.toml"), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["problems"] == []
