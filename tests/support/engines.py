"""A second Docker engine on this host, standing in for a remote builder (issue 22): its own
socket, data root, exec root and bridge. It never touches the first engine: its bridge is its own
(never --bridge=none, which deletes the first engine's docker0) and it leaves iptables alone, so
its containers have no route out; builds on it come from the registry's cache."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BRIDGE = "envbuild-b0"
SUBNET = "172.31.240.1/24"


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


@contextmanager
def second_engine(root: Path) -> Iterator[str]:
    """Start a dockerd under `root`; yields its DOCKER_HOST address; stopped and removed after."""
    sock = root / "docker.sock"
    for d in ("data", "exec"):
        (root / d).mkdir(parents=True, exist_ok=True)
    if _ip("link", "show", BRIDGE).returncode != 0:
        _ip("link", "add", "name", BRIDGE, "type", "bridge")
        _ip("addr", "add", SUBNET, "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
    log = (root / "dockerd.log").open("w")
    proc = subprocess.Popen(
        ["dockerd", "--host", f"unix://{sock}", "--data-root", str(root / "data"),
         "--exec-root", str(root / "exec"), "--pidfile", str(root / "docker.pid"),
         "--bridge", BRIDGE, "--iptables=false", "--ip-masq=false",
         "--storage-driver=overlay2"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"unix://{sock}"
    try:
        for _ in range(120):
            ok = subprocess.run(["/usr/bin/docker", "-H", url, "version", "--format",
                                 "{{.Server.Version}}"], capture_output=True).returncode == 0
            if ok:
                break
            if proc.poll() is not None:
                break
            time.sleep(0.5)
        else:
            ok = False
        if not ok:
            raise RuntimeError("the second dockerd did not start: "
                               + (root / "dockerd.log").read_text()[-2000:])
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        log.close()
        subprocess.run(["umount", "-R", str(root / "data")], capture_output=True)
        shutil.rmtree(root / "data", ignore_errors=True)
        _ip("link", "delete", BRIDGE)


def engine_docker(url: str, *args: str, check: bool = True,
                  timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """The docker CLI against that engine."""
    return subprocess.run(["/usr/bin/docker", "-H", url, *args], capture_output=True, text=True,
                          check=check, timeout=timeout,
                          env={**os.environ, "DOCKER_BUILDKIT": "1"})
