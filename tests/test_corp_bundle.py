"""Air-gapped builds on a real engine: `envbuild bundle` on the connected side, then
`envbuild make --from-bundle` run inside a network namespace with no route (`unshare -n`).

What this proves: the envbuild process and its docker client have no network at all (the netns);
every RUN step of the build has none either (`docker build --network none`, in the build log's
command line); pip installs torch from the bundle's wheelhouse in hash-checking mode (every line
of requirements.txt has --hash); the system image comes from the bundle's archive (its tag is
removed first, so it is loaded and its id checked); the image validates. The daemon itself stays
in the host's namespace (it must: it is the engine), so "no network" means no network for envbuild
and for every build step, not for dockerd. A per-run user name makes the offline steps run for
real instead of coming from BuildKit's cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import IN_CI, ROOT, run_cli
from tests.test_build import BASE, docker, fixtures, image_exists  # noqa: F401

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _unshare() -> list[str]:
    exe = shutil.which("unshare")
    if exe is None or subprocess.run([exe, "-n", "true"], capture_output=True).returncode:
        msg = "unshare -n is not available (util-linux, root)"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    return [exe, "-n"]


@pytest.fixture(scope="module")
def bundle(fixtures: Path, tmp_path_factory: pytest.TempPathFactory  # noqa: F811
           ) -> Iterator[tuple[Path, dict[str, object]]]:
    out = tmp_path_factory.mktemp("bundle") / "b"
    user = "corp" + uuid.uuid4().hex[:8]  # a new system image: the offline steps really run
    r = run_cli("bundle", "--target", "cpu", "--torch", "2.13.0", "--python", "3.11", "--os",
                "debian12", "--without", "torchvision", "--without", "torchaudio",
                "--base-image", BASE, "--wheelhouse", str(fixtures), "--user", user,
                "--out", str(out), "--json")
    assert r.returncode == 0, (r.stderr + r.stdout)[-3000:]
    data = json.loads(r.stdout)
    try:
        yield out, data
    finally:
        docker("image", "rm", str(data["system_ref"]), check=False)


def test_bundle_contents(bundle: tuple[Path, dict[str, object]]) -> None:
    out, data = bundle
    meta = json.loads((out / "bundle.json").read_text())
    assert meta["system_id"] == data["system_id"] and (out / "system.tar").is_file()
    reqs = [x for x in (out / "context" / "requirements.txt").read_text().splitlines()
            if x and not x.startswith("#")]
    assert reqs and all(" --hash=sha256:" in x for x in reqs)
    assert any(x.startswith("torch==2.13.0+cpu ") for x in reqs)
    assert (out / "matrix" / "torch.toml").is_file()
    assert (out / "context" / "Dockerfile").read_text().count("apt-get") == 0
    assert set(meta["files"]) >= {"system.tar", "context/requirements.txt",
                                  "matrix/torch.toml"}


def test_offline_make_in_a_netns_with_no_route(bundle: tuple[Path, dict[str, object]]) -> None:
    out, data = bundle
    ns = _unshare()
    probe = subprocess.run([*ns, sys.executable, "-c",
                            "import socket; socket.create_connection(('1.1.1.1', 80), 3)"],
                           capture_output=True, text=True)
    assert probe.returncode != 0 and "unreachable" in probe.stderr.lower(), probe.stderr
    docker("image", "rm", str(data["system_ref"]))  # must come from the bundle's archive
    tag = "envbuild-corp/bundle:offline"
    try:
        p = subprocess.run([*ns, sys.executable, "-m", "envbuild", "make", "--from-bundle",
                            str(out), "--tag", tag, "--json", "--rebuild"],
                           capture_output=True, text=True, cwd=ROOT, timeout=1800,
                           env=dict(os.environ))
        assert p.returncode == 0, (p.stderr + p.stdout)[-3000:]
        summary = json.loads(p.stdout)
        assert summary["network"] == "none" and summary["validation"]["summary"]["status"] == \
            "pass", summary["validation"]["summary"]
        assert image_exists(str(data["system_ref"]))  # loaded from system.tar
        log = Path(summary["log"]).read_text()
        assert " --network none " in log.splitlines()[1]
        assert "Processing /run/envbuild/wheelhouse/torch-2.13.0+cpu" in log, log[-2000:]
    finally:
        docker("image", "rm", tag, check=False)


def test_a_changed_bundle_is_refused(bundle: tuple[Path, dict[str, object]]) -> None:
    out, _ = bundle
    req = out / "context" / "requirements.txt"
    original = req.read_bytes()
    try:
        req.write_bytes(original + b"evil==1.0\n")
        r = run_cli("make", "--from-bundle", str(out))
        assert r.returncode == 2, r.stderr
        assert "does not match its recorded sha256" in r.stderr
    finally:
        req.write_bytes(original)


def test_not_a_bundle(tmp_path: Path) -> None:
    r = run_cli("make", "--from-bundle", str(tmp_path))
    assert r.returncode == 2 and "no readable bundle.json" in r.stderr, r.stderr


def test_bundle_needs_a_wheelhouse(tmp_path: Path) -> None:
    r = run_cli("bundle", "--target", "cpu", "--out", str(tmp_path / "b"))
    assert r.returncode == 2 and "--wheelhouse" in r.stderr, r.stderr
    assert not (tmp_path / "b").exists()
