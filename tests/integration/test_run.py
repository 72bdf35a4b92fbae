"""`envbuild run` on a real Docker engine with an image `envbuild make` built (the CPU target, the
offline wheelhouse): the too-small /dev/shm is caught before the start and fixed by the flag, the
exit code passes through, a failing command's output is decoded, Ctrl-C, SIGTERM, SIGHUP and
even SIGKILL leave no container."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ROOT, run_cli, work_dir
from tests.support.docker_helpers import cpu_args, docker

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TAG = "envbuild-test/cpu:run"


@pytest.fixture(scope="module")
def image(fixtures: Path) -> Iterator[str]:
    """The CPU image of test_build's pipeline (same spec and context: after that module, make
    finds it built and only tags it), under this module's tag."""
    r = run_cli("make", *cpu_args(fixtures, "--tag", TAG), "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    yield TAG
    docker("rmi", TAG, check=False)


def run_containers() -> str:
    return docker("ps", "-a", "--filter", "label=io.envbuild.role=run", "--format",
                  "{{.ID}} {{.Status}}").stdout.strip()


def test_the_small_shm_is_caught_before_the_start_and_fixed(image: str) -> None:
    check = run_cli("run", "--check", image, "--", "df", "-m", "/dev/shm")
    assert check.returncode == 0, check.stderr
    assert "Docker's default 64 MB, under the 1024 MB" in check.stdout
    assert check.stdout.count("adds       --shm-size=8g") == 1  # each flag printed once
    r = run_cli("run", image, "--", "sh", "-c", "df -m /dev/shm | tail -1")
    assert r.returncode == 0, r.stderr
    size_mb = int(r.stdout.split()[1])
    assert size_mb == 8192  # the container got the flag, not Docker's 64 MB
    assert "adds       --shm-size=8g" in r.stderr and r.stdout.count("\n") == 1
    own = run_cli("run", "--shm-size", "32m", image, "--", "sh", "-c", "df -m /dev/shm")
    assert own.returncode == 0 and "--shm-size 32m is under the 1024 MB" in own.stderr
    assert "adds" not in own.stderr and " 32 " in own.stdout


def test_the_exit_code_passes_through_and_json_tells_whose_it_is(image: str) -> None:
    for code in (0, 3, 42, 130):
        r = run_cli("run", image, "--", "sh", "-c", f"echo out; echo err >&2; exit {code}")
        assert r.returncode == code, r.stderr
        assert r.stdout == "out\n" and "err\n" in r.stderr
    r = run_cli("run", "--json", image, "--", "sh", "-c", "echo out; exit 5")
    assert r.returncode == 5
    data = json.loads(r.stdout)  # the command's stdout went to stderr: stdout is the JSON
    assert data["started"] is True and data["exit_code"] == 5 and "out" in r.stderr
    assert data["preflight"]["added"][0]["flag"] == "--shm-size=8g"
    missing = run_cli("run", image, "--", "no-such-command")
    assert missing.returncode == 127 and "no-such-command" in missing.stderr


def test_a_failing_commands_output_is_decoded(image: str) -> None:
    r = run_cli("run", image, "--", "python", "-c", "import torch; torch.zeros(1).cuda()")
    assert r.returncode == 1
    assert "Torch not compiled with CUDA enabled" in r.stderr
    assert "envbuild run: the command exited 1" in r.stderr
    assert "cause  torch_cpu_only:" in r.stderr
    assert "nearest variant that runs here: envbuild make --target cpu --torch 2.13.0" in r.stderr


def test_mounts_and_env_reach_the_container_and_no_value_is_printed(image: str) -> None:
    data = Path(tempfile.mkdtemp(dir=work_dir()))  # the image's user (uid 1000) may read it
    try:
        data.chmod(0o755)
        (data / "data.txt").write_text("mounted\n")
        secret = "s3cr3t-value-9f8e7d"
        r = run_cli("run", "-v", f"{data}:/data:ro", "-e", f"TOKEN={secret}", "-e", "FROM_HERE",
                    image, "--", "sh", "-c", 'cat /data/data.txt; echo "$TOKEN $FROM_HERE"; '
                    "grep -q ' /data [^ ]* ro,' /proc/mounts && echo read-only",
                    env={"FROM_HERE": "here"})
    finally:
        shutil.rmtree(data)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["mounted", f"{secret} here", "read-only"]
    assert secret not in r.stderr and "-e TOKEN -e FROM_HERE" in r.stderr


def test_bad_input_and_an_unknown_image(image: str) -> None:
    cases = [
        (["run", "no-such/image:tag"], 2, "no image 'no-such/image:tag'"),
        (["run", "Bad Name!"], 2, "is not an image reference"),
        (["run", "-v", "/nonexistent-dir-xyz:/data", image], 2, "does not exist"),
        (["run", "-v", "/tmp:relative", image], 2, "must be absolute"),
        (["run", "-e", "1BAD=x", image], 2, "not an environment variable name"),
        (["run", "--ipc", "private", image], 2, "only `--ipc host`"),
        (["run", "--facts", "/tmp", image], 2, "add --check"),
        (["run", "local/debian:bookworm"], 2, "not built by envbuild"),
    ]
    for argv, code, says in cases:
        r = run_cli(*argv)
        assert r.returncode == code, (argv, r.stderr)
        assert says in r.stderr and "hint:" in r.stderr and "Traceback" not in r.stderr
    down = run_cli("run", image, env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert down.returncode == 3 and "cannot reach the Docker engine" in down.stderr


def _started(image: str, *command: str) -> subprocess.Popen[str]:
    """`envbuild run IMAGE -- COMMAND` in its own process, once its container is up."""
    assert run_containers() == ""
    p = subprocess.Popen([sys.executable, "-m", "envbuild", "run", image, "--", *command],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ})
    deadline = time.monotonic() + 60
    while "Up" not in run_containers():
        if time.monotonic() > deadline or p.poll() is not None:
            p.kill()
            raise AssertionError(p.communicate())
        time.sleep(0.2)
    return p


@pytest.mark.parametrize(("sig", "code", "said"), [
    (signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)"),
    (signal.SIGHUP, 129, "terminated (SIGHUP)")])
def test_ctrl_c_sigterm_and_sighup_stop_and_remove_the_container(
        image: str, sig: signal.Signals, code: int, said: str) -> None:
    p = _started(image, "sleep", "300")
    try:
        p.send_signal(sig)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == code, err
    assert f"{said}; the container is stopped and removed" in err
    assert run_containers() == ""


def test_a_killed_envbuild_leaves_no_container_once_the_command_ends(image: str) -> None:
    """SIGKILL cannot be caught: the engine removes the container when its command ends (--rm)."""
    p = _started(image, "sleep", "4")
    p.kill()
    p.communicate(timeout=30)
    deadline = time.monotonic() + 30
    while run_containers():
        assert time.monotonic() < deadline, run_containers()
        time.sleep(0.5)


@pytest.mark.parametrize(("size", "mb"), [("2GiB", 2048), ("96 MiB", 96), ("1048576", 1)])
def test_every_size_spelling_reaches_the_container(image: str, size: str, mb: int) -> None:
    r = run_cli("run", "--shm-size", size, image, "--", "sh", "-c", "df -m /dev/shm | tail -1")
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.split()[1]) == mb
