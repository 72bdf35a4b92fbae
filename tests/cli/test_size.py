"""Size estimate from the CLI (`resolve --size`, `render --size`): the printed estimate and its
unknowns. Recorded answers over HTTP: tests/integration/test_size_server.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import run_cli
from tests.support import size as shared
from tests.support.size import MANIFEST_LAYERS, _Server

server = shared.server  # a fixture, shared with the other kind's test_size.py


def test_render_prints_duplicates_and_size(server: tuple[str, _Server], tmp_path: Path) -> None:
    host, state = server
    state.registry = {"/v2/library/debian/manifests/bookworm":
                      (200, {}, json.dumps(MANIFEST_LAYERS).encode())}
    r = run_cli("render", "--cuda", "12.4", "--torch", "2.6.0", "--flavor", "runtime",
                "--out", str(tmp_path / "a"))
    assert r.returncode == 0 and "duplicates what the torch wheel" in r.stdout
    r = run_cli("render", "--target", "cpu", "--torch", "2.13.0", "--python", "3.11",
                "--os", "debian12", "--without", "torchvision", "--without", "torchaudio",
                "--base-image", f"{host}/library/debian:bookworm", "--torch-index-url",
                f"http://{host}/pt", "--pip-index-url", f"http://{host}/pypi", "--size",
                "--json", "--out", str(tmp_path / "b"))
    assert r.returncode == 0, r.stderr
    size = json.loads(r.stdout)["size"]
    assert [row["layer"].split(" ")[0] for row in size["rows"]] == \
        ["base", "OS", "Python", "torch", "user", "envbuild"]
    assert size["rows"][0]["compressed"] == sum(x["size"] for x in MANIFEST_LAYERS["layers"])


@pytest.mark.parametrize("args", [
    ["--target", "cpu", "--torch", "2.13.0", "--os", "debian12"],
    ["--rocm", "6.2", "--torch", "2.5.1"],
    ["--cuda", "12.4", "--torch", "2.6.0", "--flavor", "runtime"],
])
def test_resolve_size_offline_exits_0_with_unknowns(args: list[str]) -> None:
    dead = "http://127.0.0.1:9"  # every index and registry request fails at once: offline
    env = {"https_proxy": dead, "HTTPS_PROXY": dead, "http_proxy": dead, "HTTP_PROXY": dead,
           "no_proxy": "", "NO_PROXY": ""}
    r = run_cli("resolve", *args, "--size", "--json", env=env)
    assert r.returncode == 0, r.stderr
    size = json.loads(r.stdout)["size"]
    assert not size["complete"] and "torch stack" in size["unknown"]
    assert all(row["how"] for row in size["rows"])
    human = run_cli("resolve", *args, "--size", env=env)
    assert human.returncode == 0 and "lower bound" in human.stdout
    assert "Traceback" not in human.stderr
