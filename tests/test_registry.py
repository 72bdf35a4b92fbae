"""The registry client against a real registry (Debian's docker-registry, no engine needed) and
the bearer-token flow against a small local token-auth server."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild import registry
from envbuild.errors import EnvbuildError, UsageError
from envbuild.http import parse_challenge
from tests.conftest import run_cli


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_registry(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cfg = root / "config.yml"
    cfg.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\n"
                   f"  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n")
    proc = subprocess.Popen(["docker-registry", "serve", str(cfg)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    return proc, f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def reg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc, addr = start_registry(tmp_path_factory.mktemp("registry"))
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


REPORT = {"schema": 1, "checks": [{"id": "facts.torch", "status": "pass", "title": "torch"}],
          "summary": {"pass": 1, "fail": 0, "warn": 0, "skip": 0}}


def test_attach_and_read_back_a_report(reg: str) -> None:
    digest = push_tiny_image(reg, "team/tiny", "v1")
    assert registry.resolve_digest(f"{reg}/team/tiny:v1") == digest
    assert registry.fetch_report(f"{reg}/team/tiny:v1") is None  # nothing attached yet
    ref = registry.attach_report(f"{reg}/team/tiny:v1", digest, REPORT)
    assert ref == f"{reg}/team/tiny:sha256-{digest[7:]}.envbuild"
    # the artifact: one layer of the report's media type, subject = the image
    raw = registry.client(reg).get_manifest(registry.parse_ref(ref), (registry.OCI_MANIFEST,))
    assert raw is not None
    m = json.loads(raw[0])
    assert m["artifactType"] == registry.REPORT_TYPE
    assert [x["mediaType"] for x in m["layers"]] == [registry.REPORT_TYPE]
    assert m["subject"]["digest"] == digest
    assert m["subject"]["mediaType"] == registry.DOCKER_MANIFEST
    for image in (f"{reg}/team/tiny:v1", f"{reg}/team/tiny@{digest}"):
        att = registry.fetch_report(image)
        assert att is not None and att.report == REPORT and att.via in ("tag", "referrers")
    # the CLI prints it without running anything (no engine involved)
    r = run_cli("validate", "--from-registry", f"{reg}/team/tiny:v1",
                env={"DOCKER_HOST": "unix:///nope"})
    assert r.returncode == 0, r.stderr
    assert "facts.torch" in r.stdout and "1 passed" in r.stdout
    r = run_cli("validate", "--from-registry", f"{reg}/team/tiny@{digest}", "--json")
    assert json.loads(r.stdout) == REPORT


def test_a_failing_attached_report_exits_1(reg: str) -> None:
    digest = push_tiny_image(reg, "team/failing", "v1", salt="f")
    bad = {**REPORT, "checks": [{"id": "facts.torch", "status": "fail", "title": "torch"}],
           "summary": {"pass": 0, "fail": 1}}
    registry.attach_report(f"{reg}/team/failing:v1", digest, bad)
    r = run_cli("validate", "--from-registry", f"{reg}/team/failing:v1")
    assert r.returncode == 1 and "fail" in r.stdout


def test_missing_things_are_clean_errors(reg: str) -> None:
    r = run_cli("validate", "--from-registry", f"{reg}/team/nothing:here")
    assert r.returncode == 1 and "is not in the registry" in r.stderr
    push_tiny_image(reg, "team/bare", "v1", salt="b")
    r = run_cli("validate", "--from-registry", f"{reg}/team/bare:v1")
    assert r.returncode == 1 and "no validation report" in r.stderr
    r = run_cli("validate", "--from-registry", f"127.0.0.1:{free_port()}/x/y:z")
    assert r.returncode == 3 and "cannot reach the registry" in r.stderr
    r = run_cli("validate", "img", "--from-registry", f"{reg}/x:y")
    assert r.returncode == 2


def test_a_report_digest_mismatch_is_refused(reg: str) -> None:
    c = registry.client(reg)
    push_tiny_image(reg, "team/blob", "v1", salt="m")
    digest = c.put_blob("team/blob", b"real")
    with pytest.raises(EnvbuildError):
        c.get_blob("team/blob", digest.replace(digest[-4:], "0000"))


@pytest.mark.parametrize(("text", "want"), [
    ("ubuntu:22.04", ("docker.io", "library/ubuntu", "22.04", "")),
    ("nvidia/cuda:12.4.1-base-ubuntu22.04", ("docker.io", "nvidia/cuda",
                                             "12.4.1-base-ubuntu22.04", "")),
    ("nvcr.io/nvidia/pytorch:24.05-py3", ("nvcr.io", "nvidia/pytorch", "24.05-py3", "")),
    ("127.0.0.1:5000/a/b", ("127.0.0.1:5000", "a/b", "", "")),
    ("localhost/x@sha256:" + "a" * 64, ("localhost", "x", "", "sha256:" + "a" * 64)),
    ("ghcr.io/o/r:t@sha256:" + "b" * 64, ("ghcr.io", "o/r", "t", "sha256:" + "b" * 64)),
])
def test_parse_ref(text: str, want: tuple[str, str, str, str]) -> None:
    r = registry.parse_ref(text)
    assert (r.host, r.repo, r.tag, r.digest) == want


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=40).filter(lambda s: any(c in s for c in " \n;$`'\"|&<>")),
                 st.just("x@sha256:short"), st.just("UPPER/case"), st.just("a/../b"),
                 st.just("x" * 600)))
def test_hostile_refs_refused(text: str) -> None:
    with pytest.raises(UsageError):
        registry.parse_ref(text)


def test_report_tag_needs_a_digest() -> None:
    assert registry.report_tag("sha256:" + "c" * 64) == "sha256-" + "c" * 64 + ".envbuild"
    with pytest.raises(UsageError):
        registry.report_tag("sha256:../../x")


# -- the token flow (Docker Hub, GHCR, NGC): 401 + WWW-Authenticate Bearer -> token -------------
class _TokenAuth(BaseHTTPRequestHandler):
    seen: ClassVar[list[dict[str, Any]]] = []
    digest = "sha256:" + "d" * 64

    def log_message(self, *_args: object) -> None:
        pass

    def _send(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        host = f"127.0.0.1:{self.server.server_address[1]}"
        if self.path.startswith("/token"):
            self.seen.append({"path": self.path, "auth": self.headers.get("Authorization")})
            self._send(200, json.dumps({"token": "tok-123"}).encode())
            return
        if self.headers.get("Authorization") != "Bearer tok-123":
            self._send(401, b"{}", {"WWW-Authenticate":
                                    f'Bearer realm="http://{host}/token",service="fake",'
                                    'scope="repository:team/x:pull"'})
            return
        self._send(200, b"{}", {"Docker-Content-Digest": self.digest,
                                "Content-Type": registry.DOCKER_MANIFEST})

    do_HEAD = do_GET


def test_bearer_token_flow_with_docker_config_credentials(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    server = HTTPServer(("127.0.0.1", 0), _TokenAuth)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = f"127.0.0.1:{server.server_address[1]}"
    auth = base64.b64encode(b"alice:s3cret").decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {host: {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    try:
        assert registry.resolve_digest(f"{host}/team/x:1") == _TokenAuth.digest
    finally:
        server.shutdown()
    (call,) = _TokenAuth.seen
    assert "service=fake" in call["path"] and "scope=repository%3Ateam%2Fx%3Apull" in call["path"]
    assert call["auth"] == f"Basic {auth}"


@pytest.mark.parametrize(("header", "want"), [
    ('Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
     'scope="repository:library/ubuntu:pull"',
     ("bearer", {"realm": "https://auth.docker.io/token", "service": "registry.docker.io",
                 "scope": "repository:library/ubuntu:pull"})),
    ('Bearer realm="https://nvcr.io/proxy_auth",scope="repository:nvidia/cuda:pull"',
     ("bearer", {"realm": "https://nvcr.io/proxy_auth", "scope": "repository:nvidia/cuda:pull"})),
    ('bearer Realm=https://x/t, service=s', ("bearer", {"realm": "https://x/t", "service": "s"})),
    ('Basic realm="envbuild-test"', ("basic", {"realm": "envbuild-test"})),
    ('Negotiate abc', ("", {})), ("", ("", {})), ("Bearer", ("bearer", {})),
])
def test_parse_challenge(header: str, want: tuple[str, dict[str, str]]) -> None:
    assert parse_challenge(header) == want
