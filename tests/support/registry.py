"""Helpers shared by the registry tests and others (moved out of test_registry.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envbuild.engine import registry
from tests.support import IN_CI


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_registry(root: Path, htpasswd: Path | None = None
                   ) -> tuple[subprocess.Popen[bytes], str]:
    """docker-registry on a free port; with htpasswd, it asks for a login (Basic, bcrypt)."""
    port = free_port()
    cfg = root / "config.yml"
    auth = (f"auth:\n  htpasswd:\n    realm: envbuild-test\n    path: {htpasswd}\n"
            if htpasswd else "")
    cfg.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\n"
                   f"  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n{auth}")
    proc = subprocess.Popen(["docker-registry", "serve", str(cfg)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1)
            break
        except urllib.error.HTTPError:  # 401: up, and asking for a login
            break
        except OSError:
            time.sleep(0.1)
    return proc, f"127.0.0.1:{port}"


# -- a registry that asks for a login (htpasswd): the docker credential store ------------------
USER, PASSWORD, WRONG = "ci-bot", "Reg1stryPa55", "not-the-password"


def start_login_registry(root: Path, user: str = USER, password: str = PASSWORD
                         ) -> tuple[subprocess.Popen[bytes], str]:
    """A registry that asks for a login (htpasswd, bcrypt) for user/password."""
    missing = [t for t in ("docker-registry", "htpasswd") if shutil.which(t) is None]
    if missing:
        msg = f"{', '.join(missing)} not installed (.ci/system-deps.sh installs them)"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    subprocess.run(["htpasswd", "-Bbc", str(root / "htpasswd"), user, password], check=True,
                   capture_output=True)
    return start_registry(root, root / "htpasswd")


def _store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, host: str,
           password: str = PASSWORD) -> tuple[dict[str, str], Path]:
    """DOCKER_CONFIG as `docker login` leaves it (auths, or a credential helper on PATH that
    knows only `host`); the env for run_cli and the file the helper logs its calls to."""
    bin_dir, cfg, calls = tmp_path / "bin", tmp_path / "cfg", tmp_path / "helper-calls"
    bin_dir.mkdir()
    cfg.mkdir()
    helper = bin_dir / "docker-credential-envbuildtest"
    helper.write_text(  # the protocol: `get`, the server on stdin, JSON on stdout
        "#!/bin/sh\n"
        'read -r server\n'
        f'echo "$1 $server" >> {calls}\n'
        f'if [ "$1" = get ] && [ "$server" = "{host}" ]; then\n'
        f'  printf \'{{"ServerURL":"%s","Username":"{USER}","Secret":"{password}"}}\' "$server"\n'
        "else echo 'credentials not found in native keychain'; exit 1; fi\n")
    helper.chmod(0o755)
    login = base64.b64encode(f"{USER}:{password}".encode()).decode()
    doc: dict[str, Any] = {
        "auths": {"auths": {host: {"auth": login}}},
        "credHelpers": {"auths": {host: {}}, "credHelpers": {host: "envbuildtest"}},
        "credsStore": {"auths": {host: {}}, "credsStore": "envbuildtest"},
        "none": {},
    }[how]
    (cfg / "config.json").write_text(json.dumps(doc))
    env = {"DOCKER_CONFIG": str(cfg), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env, calls


def serve(started: tuple[subprocess.Popen[bytes], str]) -> Iterator[str]:
    """A fixture's body: the address while the test runs, then the registry is stopped."""
    proc, addr = started
    try:
        yield addr
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def push_tiny_image(addr: str, repo: str, tag: str, salt: str = "") -> str:
    """A minimal docker v2 image (a config and one layer) pushed through the client."""
    c = registry.client(addr)
    layer = f"layer {salt}".encode()
    config = json.dumps({"architecture": "amd64", "os": "linux", "salt": salt}).encode()
    manifest = {"schemaVersion": 2, "mediaType": registry.DOCKER_MANIFEST,
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                           "digest": c.put_blob(repo, config), "size": len(config)},
                "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                            "digest": c.put_blob(repo, layer), "size": len(layer)}]}
    body = json.dumps(manifest).encode()
    r = c.put_manifest(repo, tag, body, registry.DOCKER_MANIFEST)
    assert r.status == 201, r.text
    return "sha256:" + hashlib.sha256(body).hexdigest()
