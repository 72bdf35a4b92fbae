"""envbuild/engine/fitprobe.py's measure_in_image on a real engine: the memory probe run with the
venv Python of the CPU image `envbuild make` builds (test_build's spec: after that module, make
finds it built and only tags it), the entry file's directory mounted read-only, no network. The
image's torch measures the step; its fake peak agrees with the same step on real tensors there,
and broken input is one answer or one EnvbuildError, never a leftover container."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envbuild.common.errors import EnvbuildError
from envbuild.engine import fitprobe
from tests.support import FIXTURES, run_cli
from tests.support.docker_helpers import cpu_args, docker

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TAG = "envbuild-test/cpu:fit"
ENTRY = FIXTURES / "fit" / "mlp_entry.py"
GB = 1 << 30


@pytest.fixture(scope="module")
def image(fixtures: Path) -> Iterator[str]:
    r = run_cli("make", *cpu_args(fixtures, "--tag", TAG), "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    yield TAG
    docker("rmi", TAG, check=False)


def job(fn: str = "tiny", **kw: Any) -> dict[str, Any]:
    return {"format": 1, "model": {"entry": f"{ENTRY}:{fn}"}, "mode": "train", "dtype": "fp32",
            "optimizer": "adamw", "device": "cpu", **kw}


def readable(folder: Path) -> Path:
    """The image runs as its own user: the mounted folder and its files must be readable by
    others (pytest's tmp_path is 0700, as a user's private folder may be)."""
    folder.chmod(0o755)
    for f in folder.iterdir():
        f.chmod(0o644)
    return folder


def fit_containers() -> str:
    return docker("ps", "-a", "--filter", "label=io.envbuild.role=fit", "--format",
                  "{{.ID}}").stdout.strip()


def test_the_images_torch_measures_the_mounted_entry(image: str) -> None:
    fake = fitprobe.measure_in_image(image, job("wide"), ENTRY, timeout=600)
    real = fitprobe.measure_in_image(image, job("wide", real=True), ENTRY, timeout=600)
    assert "error" not in fake and "error" not in real, (fake, real)
    assert fake["torch"].startswith("2.13.0") and fake["device"] == "cpu"
    assert real["peak_bytes"] > GB
    for truth in (real["peak_bytes"], real["rss_growth"]):
        assert abs(fake["peak_bytes"] / truth - 1) < 0.10, (fake["peak_bytes"], truth)
    assert fit_containers() == ""
    print(json.dumps({"fake": fake["peak_bytes"], "real_tracker": real["peak_bytes"],
                      "real_rss_growth": real["rss_growth"]}))


def test_an_entry_the_images_user_cannot_read_is_an_entry_error(image: str,
                                                                tmp_path: Path) -> None:
    entry = tmp_path / "private.py"
    entry.write_text("def build():\n    pass\n")
    entry.chmod(0o600)
    r = fitprobe.measure_in_image(image, job("build"), entry, timeout=300)
    assert r["error"] == "entry" and "Permission denied" in r["message"], r


def test_the_image_has_no_transformers_so_a_config_says_so(image: str) -> None:
    r = fitprobe.measure_in_image(image, {"format": 1, "model": {"config": {
        "model_type": "llama"}}}, None, timeout=300)
    assert r["error"] == "no-transformers", r


def test_the_mount_is_read_only_and_the_network_absent(image: str, tmp_path: Path) -> None:
    entry = tmp_path / "probe_env.py"
    entry.write_text(
        "import os, socket, torch\n"
        "def build():\n"
        "    try:\n"
        "        open(os.path.join(os.path.dirname(__file__), 'x'), 'w')\n"
        "        raise SystemExit('the mount is writable')\n"
        "    except OSError:\n"
        "        pass\n"
        "    try:\n"
        "        socket.create_connection(('1.1.1.1', 53), timeout=3)\n"
        "        raise SystemExit('the network is there')\n"
        "    except OSError:\n"
        "        pass\n"
        "    return torch.nn.Linear(4, 4), (torch.randn(2, 4),)\n")
    readable(tmp_path)
    r = fitprobe.measure_in_image(image, job("build"), entry, timeout=300)
    assert r.get("params") == 20, r
    assert not (tmp_path / "x").exists()


def test_a_probe_that_dies_is_one_error_and_leaves_no_container(image: str,
                                                                tmp_path: Path) -> None:
    entry = tmp_path / "dies.py"
    entry.write_text("import os\ndef build():\n    os._exit(9)\n")
    readable(tmp_path)
    with pytest.raises(EnvbuildError) as died:
        fitprobe.measure_in_image(image, job("build"), entry, timeout=300)
    assert "exit 9" in died.value.message and image in died.value.message
    entry.write_text("import time\ndef build():\n    time.sleep(120)\n")
    with pytest.raises(EnvbuildError, match="did not finish within 5 s"):
        fitprobe.measure_in_image(image, job("build"), entry, timeout=5)
    assert fit_containers() == ""


def test_fit_entry_image_is_within_10_percent_of_the_real_step(image: str) -> None:
    """The issue's check, through the command: `envbuild fit --entry F:wide --image TAG` against
    the same step run for real in that image (MemTracker on real tensors and the fresh process's
    RSS growth). fit's figure is the CUDA one (it adds cuBLAS's workspace, 64 MiB here)."""
    r = run_cli("fit", "--entry", f"{ENTRY}:wide", "--image", image, "--gpu", "H100", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads(r.stdout)
    assert data["method"] == "measured" and data["image"] == image, data
    real = fitprobe.measure_in_image(image, job("wide", real=True), ENTRY, timeout=600)
    for truth in (real["peak_bytes"], real["rss_growth"]):
        assert abs(data["peak_bytes"] / truth - 1) < 0.10, (data["peak_bytes"], truth)
    print(json.dumps({"fit": data["peak_bytes"], "real_tracker": real["peak_bytes"],
                      "real_rss_growth": real["rss_growth"]}))


def test_fit_names_the_folder_the_images_user_cannot_read(image: str, tmp_path: Path) -> None:
    entry = tmp_path / "private.py"
    entry.write_text("def build():\n    pass\n")
    entry.chmod(0o600)
    r = run_cli("fit", "--entry", f"{entry}:build", "--image", image, "--gpu", "H100")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    said = [x for x in r.stderr.splitlines() if not x.startswith("fit: ")]  # not the progress
    assert len(said) == 2 and said[0].startswith("error: ") and "chmod o+rx" in said[1], said
    assert fit_containers() == ""
