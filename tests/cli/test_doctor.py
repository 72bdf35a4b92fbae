"""`envbuild doctor`: pure evaluation on recorded host fixtures, probes on this host, the CLI."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from envbuild.doctor import evaluate, model, probes, record, report
from envbuild.doctor.model import Severity
from envbuild.matrix import Matrix
from tests.support import ROOT, run_cli
from tests.support import doctor as shared
from tests.support.doctor import FIXTURES, RECORDED, _as_other_user

small = shared.small  # a fixture, shared with the other kind's test_doctor.py


@pytest.mark.parametrize("case", sorted(RECORDED))
def test_cli_replays_the_recordings_as_root_and_as_an_ordinary_user(case: str,
                                                                      tmp_path: Path) -> None:
    """`envbuild doctor --facts` on the recordings, and on the same facts as an ordinary user
    sees them (what doctor-nonroot.txt shows): only docker.not_found, which is true there."""
    nonroot = tmp_path / "nonroot"
    record.save(_as_other_user(record.load(FIXTURES / case)), nonroot)
    for facts_dir in (FIXTURES / case, nonroot):
        r = run_cli("doctor", "--json", "--facts", str(facts_dir))
        assert r.returncode == 1, r.stderr  # docker.not_found: no Docker on those hosts
        doc = json.loads(r.stdout)
        assert [f["id"] for f in doc["findings"] if f["severity"] == "error"] == \
            ["docker.not_found"]
        text = run_cli("doctor", "--facts", str(facts_dir))
        assert "nvidia.device_permission" not in text.stdout
        assert "/dev/nvidia-caps" not in text.stdout + text.stderr
        assert "--driver 580.159.04 --gpu sm_90" in text.stdout


def _other_user() -> list[str]:
    """argv prefix that runs a command as nobody/nogroup with no supplementary groups."""
    setpriv = shutil.which("setpriv")
    if os.name != "posix" or os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to run a probe as another user")
    prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    r = subprocess.run([*prefix, sys.executable, "-c", "import envbuild, typer"],
                       capture_output=True, text=True, cwd="/",
                       env={"PYTHONPATH": str(ROOT)})
    if r.returncode != 0:
        pytest.skip(f"this Python cannot run as another user: {r.stderr.strip()[-200:]}")
    return prefix


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A temporary directory an unprivileged user can read (pytest's tmp_path is 0700)."""
    d = Path(tempfile.mkdtemp(prefix="envbuild-doctor-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _node(path: Path, mode: int) -> None:
    """A character device like the driver's (major 195), or a plain file where mknod is not
    allowed: either way owned by root with `mode`, which is what os.access judges."""
    try:
        os.mknod(path, stat.S_IFCHR | mode, os.makedev(195, 255))
    except OSError:
        path.write_text("")
    path.chmod(mode)


def test_probe_detects_a_real_denial_as_an_ordinary_user(shared_tmp: Path, small: Matrix) -> None:
    """Real os.access checks by an unprivileged process on root-owned nodes: the 0600 nodes a
    CUDA process needs are reported, the root-only MIG caps directory is not."""

    prefix = _other_user()
    for name, mode in (("nvidiactl", 0o600), ("nvidia-uvm", 0o666), ("nvidia0", 0o600),
                       ("nvidia1", 0o666), ("nvidia-uvm-tools", 0o600)):
        _node(shared_tmp / name, mode)
    (shared_tmp / "nvidia-caps").mkdir(mode=0o700)
    code = ("import json, sys; from envbuild.doctor import probes; "
            "print(json.dumps({p: [d.gid, d.mode, d.rw] "
            "for p, d in probes.devices(sys.argv[1]).items()}))")
    r = subprocess.run([*prefix, sys.executable, "-c", code, str(shared_tmp)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                            "HOME": str(shared_tmp)})
    assert r.returncode == 0, r.stderr
    seen = {p: model.DevNode(g, m, rw) for p, (g, m, rw) in json.loads(r.stdout).items()}
    assert {p for p, d in seen.items() if not d.rw} == {
        "/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm-tools", "/dev/nvidia-caps"}
    facts = replace(record.load(FIXTURES / "h100-sxm-recorded"), devices=seen)
    found = [f for f in evaluate.evaluate(facts, small) if f.id == "nvidia.device_permission"]
    assert len(found) == 1
    assert found[0].message.startswith("this user cannot open /dev/nvidia0, /dev/nvidiactl,")
    assert [e.split(":")[0] for e in found[0].evidence] == ["/dev/nvidia0", "/dev/nvidiactl"]


def test_doctor_runs_for_real_as_an_ordinary_user(shared_tmp: Path) -> None:
    """The whole `envbuild doctor` as nobody on this host: no traceback, a report, and no
    permission error (this host has no GPU; on a GPU host the same must hold)."""

    prefix = _other_user()
    root = ROOT
    # `sudo -u user` keeps root's HOME: a home this user may not even search
    (shared_tmp / "home" / ".cache" / "envbuild").mkdir(parents=True)
    (shared_tmp / "home").chmod(0o700)
    for args in (["--json"], []):
        r = subprocess.run([*prefix, sys.executable, "-m", "envbuild", "doctor", *args],
                           capture_output=True, text=True, timeout=300, cwd=shared_tmp,
                           env={"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": str(root),
                                "HOME": str(shared_tmp / "home")})
        assert r.returncode in (0, 1), r.stderr
        assert "Traceback" not in r.stderr + r.stdout
        if args:
            doc = json.loads(r.stdout)
            ids = {f["id"]: f["severity"] for f in doc["findings"]}
            assert not any(i.endswith("device_permission") for i in ids), ids
            assert doc["recommendation"]["argv"][:2] == ["envbuild", "make"]
        else:
            assert "Recommended for this host" in r.stdout


# ---------------------------------------------------------------- CLI


def test_cli_json_on_a_fixture() -> None:
    r = run_cli("doctor", "--json", "--facts", str(FIXTURES / "driver-too-old-470"),
                "--matrix", str(FIXTURES / "matrix"), "--cuda", "12.2")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == 1 and doc["summary"]["error"] == 1
    assert set(doc["findings"][0]) == {"id", "severity", "cause", "message", "remediation",
                                       "evidence"}
    causes = {f["id"]: f["cause"] for f in doc["findings"]}
    assert causes["nvidia.driver_too_old"] == "driver_too_old" and causes["nvidia.driver"] == ""
    assert doc["recommendation"]["command"] == \
        "envbuild make --target cuda --driver 470.182.03 --gpu sm_70"
    assert doc["recommendation"]["argv"][:2] == ["envbuild", "make"]


def test_cli_text_on_a_healthy_fixture() -> None:
    r = run_cli("doctor", "--facts", str(FIXTURES / "h100-healthy"),
                "--matrix", str(FIXTURES / "matrix"))
    assert r.returncode == 0, r.stderr
    assert "8 x NVIDIA H100 80GB HBM3 (compute capability 9.0, 80 GiB)" in r.stdout
    assert ("Recommended for this host:\n  envbuild make --target cuda --driver "
            "580.95.05 --gpu sm_90\n") in r.stdout


def test_cli_bad_cuda_is_a_usage_error() -> None:
    r = run_cli("doctor", "--facts", str(FIXTURES / "no-docker"), "--cuda", "1.2")
    assert r.returncode == 2
    assert r.stderr.startswith("error: --cuda '1.2'")


def test_cli_save_then_replay(tmp_path: Path) -> None:
    r = run_cli("doctor", "--json", "--save", str(tmp_path / "rec"))
    assert r.returncode in (0, 1), r.stderr
    replay = run_cli("doctor", "--json", "--facts", str(tmp_path / "rec"))
    assert json.loads(replay.stdout)["findings"] == json.loads(r.stdout)["findings"]


# ---------------------------------------------------------------- this host


def test_real_probes_on_this_host(matrix: Matrix) -> None:
    start = time.monotonic()
    facts = probes.collect()
    assert time.monotonic() - start < 120
    findings, rec = evaluate.diagnose(facts, matrix)
    text = report.render(findings, rec, facts)
    assert "Recommended for this host" in text
    bad = [f.id for f in findings if f.severity is Severity.ERROR
           and f.id.split(".")[0] in ("nvidia", "rocm", "wsl", "macos", "cuda", "libs")]
    assert bad == []
    has_gpu = Path("/proc/driver/nvidia/version").exists() or Path("/dev/kfd").exists()
    if not has_gpu and facts.system == "Linux":
        assert rec.command == "envbuild make --target cpu"
        assert [f.severity for f in findings if f.id == "gpu.none"] == [Severity.INFO]
