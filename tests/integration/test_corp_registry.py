"""A private registry that needs a login (Debian's docker-registry with htpasswd/bcrypt auth),
on a real engine: envbuild uses the docker credential store (DOCKER_CONFIG's config.json, as
`docker login` writes it) through the engine, for the base image (BuildKit pulls it) and for the
push (docker-py). A wrong password is a clear error, exit 3, and no password is ever printed."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import run_cli
from tests.support.docker_helpers import BASE, cpu_args, docker, image_exists
from tests.support.registry import start_login_registry

pytestmark = [pytest.mark.docker, pytest.mark.slow]

USER, PASSWORD, WRONG = "ci-bot", "Reg1stryPa55", "not-the-password"


@dataclass
class Registry:
    host: str
    good: Path  # DOCKER_CONFIG directories
    wrong: Path
    base: str  # the local Debian base, pushed there


def _config(directory: Path, host: str, password: str) -> Path:
    directory.mkdir()
    token = base64.b64encode(f"{USER}:{password}".encode()).decode()
    (directory / "config.json").write_text(json.dumps({"auths": {host: {"auth": token}}}))
    return directory


def _tags(reg: Registry, repo: str) -> list[str]:
    req = urllib.request.Request(f"http://{reg.host}/v2/{repo}/tags/list")
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return list(json.load(resp).get("tags") or [])
    except urllib.error.HTTPError:
        return []


@pytest.fixture(scope="module")
def registry(fixtures: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[Registry]:
    proc, host = start_login_registry(tmp_path_factory.mktemp("authreg"), USER, PASSWORD)
    try:
        root = tmp_path_factory.mktemp("authreg-config")
        good = _config(root / "good", host, PASSWORD)
        wrong = _config(root / "wrong", host, WRONG)
        base = f"{host}/envbuild-corp/debian:bookworm"
        docker("tag", BASE, base)
        p = subprocess.run(["/usr/bin/docker", "--config", str(good), "push", base],
                           capture_output=True, text=True, timeout=600)
        docker("image", "rm", base, check=False)  # the build must pull it from the registry
        assert p.returncode == 0, p.stderr
        yield Registry(host, good, wrong, base)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _cpu(fixtures: Path, base: str, *extra: str) -> list[str]:
    args = cpu_args(fixtures, *extra)
    args[args.index("--base-image") + 1] = base
    return args


def test_login_from_the_credential_store_pulls_the_base_and_pushes(
        registry: Registry, fixtures: Path) -> None:
    tag = "envbuild-corp/registry:auth"
    target = f"{registry.host}/{tag}"  # --push REGISTRY: the image goes there under its tag
    try:
        r = run_cli("make", *_cpu(fixtures, registry.base, "--tag", tag, "--push",
                                  registry.host), env={"DOCKER_CONFIG": str(registry.good)})
        assert r.returncode == 0, (r.stderr + r.stdout)[-3000:]
        assert "auth" in _tags(registry, "envbuild-corp/registry")
        assert PASSWORD not in r.stdout + r.stderr
    finally:
        for ref in (tag, target):
            if image_exists(ref):
                docker("image", "rm", ref, check=False)


def test_a_credential_helper_is_used(registry: Registry, fixtures: Path,
                                     tmp_path: Path) -> None:
    """config.json names a credential helper (credHelpers) instead of storing the login: the
    base pull (BuildKit, through the docker client) and the push (docker-py) both ask it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "helper-calls"
    helper = bin_dir / "docker-credential-envbuildtest"
    helper.write_text("#!/bin/sh\n"
                      f'echo "$1" >> {calls}\n'
                      'if [ "$1" = get ]; then read -r server; '
                      f'printf \'{{"ServerURL":"%s","Username":"{USER}","Secret":"{PASSWORD}"}}\' '
                      '"$server"; fi\n')
    helper.chmod(0o755)
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    (cfg / "config.json").write_text(json.dumps({"credHelpers": {registry.host: "envbuildtest"}}))
    tag = "envbuild-corp/registry:helper"
    target = f"{registry.host}/{tag}"
    env = {"DOCKER_CONFIG": str(cfg), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    try:
        r = run_cli("make", *_cpu(fixtures, registry.base, "--tag", tag, "--push",
                                  registry.host), env=env)
        assert r.returncode == 0, (r.stderr + r.stdout)[-3000:]
        assert "helper" in _tags(registry, "envbuild-corp/registry")
        assert calls.read_text().split().count("get") >= 1
        assert PASSWORD not in r.stdout + r.stderr
    finally:
        for ref in (tag, target):
            if image_exists(ref):
                docker("image", "rm", ref, check=False)


def test_wrong_password_for_the_base_is_exit_3(registry: Registry, fixtures: Path
                                               ) -> None:
    tag = "envbuild-corp/registry:wrong-base"
    r = run_cli("make", *_cpu(fixtures, registry.base, "--tag", tag, "--no-validate",
                              "--rebuild"), env={"DOCKER_CONFIG": str(registry.wrong)})
    assert r.returncode == 3, (r.stderr + r.stdout)[-3000:]
    assert f"error: the registry {registry.host} refused the login" in r.stderr, r.stderr[-2000:]
    assert f"docker login {registry.host}" in r.stderr
    assert WRONG not in r.stdout + r.stderr and "Traceback" not in r.stderr
    assert not image_exists(tag)


def test_wrong_password_for_the_push_is_exit_3(registry: Registry, fixtures: Path
                                               ) -> None:
    tag = "envbuild-corp/registry:wrong-push"
    target = f"{registry.host}/{tag}"
    try:
        r = run_cli("make", *cpu_args(fixtures, "--tag", tag, "--push", registry.host),
                    env={"DOCKER_CONFIG": str(registry.wrong)})
        assert r.returncode == 3, (r.stderr + r.stdout)[-3000:]
        assert f"refused the login for the push of {target}" in r.stderr, r.stderr[-2000:]
        assert WRONG not in r.stdout + r.stderr and "Traceback" not in r.stderr
        assert "wrong-push" not in _tags(registry, "envbuild-corp/registry")
    finally:
        for ref in (tag, target):
            if image_exists(ref):
                docker("image", "rm", ref, check=False)
