"""The registry client against a real registry (Debian's docker-registry, no engine needed) and
the bearer-token flow against a small local token-auth server."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.common.errors import EnvbuildError, UsageError
from envbuild.common.http import Denied, RegistryAuth, Reply, loopback, parse_challenge
from envbuild.engine import registry
from tests.conftest import IN_CI, run_cli


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


def serve(started: tuple[subprocess.Popen[bytes], str]) -> Iterator[str]:
    """A fixture's body: the address while the test runs, then the registry is stopped."""
    proc, addr = started
    try:
        yield addr
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def reg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from serve(start_registry(tmp_path_factory.mktemp("registry")))


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


@pytest.fixture(scope="module")
def authreg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from serve(start_login_registry(tmp_path_factory.mktemp("authreg")))


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


@pytest.mark.parametrize("how", ["auths", "credHelpers", "credsStore"])
def test_a_login_from_the_credential_store_pushes_and_reads_the_report(
        authreg: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """issue 11: the report push used `auths` only; a credential helper (credHelpers, or the
    credsStore of Docker Desktop / pass / secretservice) is asked now, as docker asks it."""
    env, calls = _store(tmp_path, monkeypatch, how, authreg)
    repo = f"team/{how.lower()}"
    digest = push_tiny_image(authreg, repo, "v1", salt=how)
    registry.attach_report(f"{authreg}/{repo}:v1", digest, REPORT)
    r = run_cli("validate", "--from-registry", f"{authreg}/{repo}:v1", env=env)
    assert r.returncode == 0, r.stderr
    assert "facts.torch" in r.stdout
    assert PASSWORD not in r.stdout + r.stderr
    if how == "auths":
        assert not calls.exists()
    else:  # asked with the registry host on stdin, once per client (not once per request)
        asked = calls.read_text().splitlines()
        assert asked and set(asked) == {f"get {authreg}"} and len(asked) <= 4


@pytest.mark.parametrize(("how", "password", "needle"), [
    ("none", PASSWORD, "asks for a login and has none here"),
    ("auths", WRONG, "refused access to repository:team/x:pull"),
    ("credHelpers", WRONG, "refused access to repository:team/x:pull"),
    ("credsStore", WRONG, "refused access to repository:team/x:pull"),
])
def test_no_or_a_wrong_login_is_exit_3(authreg: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch, how: str, password: str,
                                       needle: str) -> None:
    env, _ = _store(tmp_path, monkeypatch, how, authreg, password)
    r = run_cli("validate", "--from-registry", f"{authreg}/team/x:1", env=env)
    assert r.returncode == 3, r.stderr
    assert r.stderr.startswith(f"error: the registry {authreg} ") and needle in r.stderr
    assert f"docker login {authreg}" in r.stderr
    assert "Traceback" not in r.stderr and password not in r.stdout + r.stderr


def test_a_helper_without_this_registry_is_no_login(authreg: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    env, calls = _store(tmp_path, monkeypatch, "credsStore", "other.example:5000")
    r = run_cli("validate", "--from-registry", f"{authreg}/team/x:1", env=env)
    assert r.returncode == 3 and "asks for a login and has none here" in r.stderr
    assert "native keychain" not in r.stderr  # the helper's own output is never shown
    assert calls.read_text().split() == ["get", authreg]


@pytest.mark.parametrize(("helper", "code", "needle"), [
    ("not-installed", 3, "docker-credential-not-installed (config.json) is not installed"),
    ("../../bin/sh", 2, "not a helper name"),
    ("x;rm -rf /", 2, "not a helper name"),
    ("a b", 2, "not a helper name"),
    ("-v", 2, "not a helper name"),
])
def test_a_missing_or_hostile_helper_is_one_clear_error(authreg: str, tmp_path: Path,
                                                        helper: str, code: int,
                                                        needle: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"credHelpers": {authreg: helper}}))
    r = run_cli("validate", "--from-registry", f"{authreg}/team/x:1",
                env={"DOCKER_CONFIG": str(tmp_path)})
    assert r.returncode == code and needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.splitlines()) <= 2


# -- the token flow without a network: what is sent where ---------------------------------------
class _Fake:
    """A registry behind a token service, as a Send: tokens are numbered; `accept` says which
    the registry takes; `realm` is what its challenge names."""

    def __init__(self, realm: str, accept: set[str] | None = None) -> None:
        self.realm, self.accept, self.issued = realm, accept, 0
        self.sent: list[tuple[str, dict[str, str]]] = []

    def __call__(self, method: str, url: str, headers: Any, body: bytes | None) -> Reply:
        self.sent.append((url, dict(headers)))
        if url.startswith(self.realm):
            self.issued += 1
            return Reply(200, {}, json.dumps({"token": f"t{self.issued}"}).encode(), url)
        got = headers.get("Authorization", "")
        if got.startswith("Bearer ") and (self.accept is None or got[7:] in self.accept):
            return Reply(200, {}, b"{}", url)
        return Reply(401, {"www-authenticate": f'Bearer realm="{self.realm}",service="s"'},
                     b"", url)


@pytest.mark.parametrize("realm", [
    "http://auth.example.com/token", "http://10.0.0.1/token", "http://127.0.0.1.example.com/t",
    "http://[::ffff:10.0.0.1]/t", "http://localhost.example/t",
])
def test_no_login_goes_to_a_plain_http_token_service(realm: str) -> None:
    fake = _Fake(realm)
    auth = RegistryAuth(fake, "reg.example.com", lambda: (USER, PASSWORD))
    with pytest.raises(Denied, match="plain http"):
        auth.request("GET", "https://reg.example.com/v2/x/manifests/1", "repository:x:pull")
    assert not any(u.startswith(realm) for u, _ in fake.sent)


@pytest.mark.parametrize("realm", ["https://auth.example.com/token", "http://127.0.0.1:1/t",
                                   "http://localhost:5000/t", "http://[::1]/t"])
def test_a_login_goes_to_https_or_loopback_token_services(realm: str) -> None:
    fake = _Fake(realm)
    auth = RegistryAuth(fake, "reg.example.com", lambda: (USER, PASSWORD))
    r = auth.request("GET", "https://reg.example.com/v2/x/manifests/1", "repository:x:pull")
    assert r.status == 200
    (token_call,) = [h for u, h in fake.sent if u.startswith(realm)]
    assert token_call["Authorization"] == "Basic " + base64.b64encode(
        f"{USER}:{PASSWORD}".encode()).decode()


def test_loopback_is_an_address_not_a_prefix() -> None:
    assert loopback("127.0.0.1") and loopback("127.1.2.3") and loopback("::1")
    assert loopback("LOCALHOST") and loopback("[::1]")
    assert not any(loopback(h) for h in ("127.0.0.1.example.com", "localhost.example", "10.0.0.1",
                                        "", "0x7f.1"))
    assert registry.client("127.0.0.1.example.com:5000").base.startswith("https://")
    assert registry.client("127.0.0.1:5000").base.startswith("http://")


def test_a_token_is_reused_and_asked_again_once_when_refused() -> None:
    fake = _Fake("https://auth.example.com/t", accept={"t1"})
    auth = RegistryAuth(fake, "reg.example.com")
    url, scope = "https://reg.example.com/v2/x/tags/list", "repository:x:pull"
    for _ in range(3):
        assert auth.request("GET", url, scope).status == 200
    assert fake.issued == 1  # one token for every request of the scope
    fake.accept = {"t2"}  # t1 expired: asked again once, then used
    assert auth.request("GET", url, scope).status == 200 and fake.issued == 2
    fake.accept = set()  # nothing is accepted any more: one clear refusal, no loop
    with pytest.raises(Denied, match="refused access to repository:x:pull"):
        auth.request("GET", url, scope)
    assert fake.issued == 3
    token_urls = [u for u, _ in fake.sent if u.startswith(fake.realm)]
    assert all("scope=repository%3Ax%3Apull" in u and "service=s" in u for u in token_urls)


def test_an_upload_without_a_location_is_one_clear_error() -> None:
    from tests.test_http import LocalServer

    srv = LocalServer()
    srv.routes["/v2/team/x/blobs/uploads/"] = lambda _h: (202, {}, b"")
    try:
        with pytest.raises(EnvbuildError, match="no Location for the upload"):
            registry.client(srv.url.split("//")[1]).put_blob("team/x", b"data")
    finally:
        srv.close()
    assert [m for m, _, _ in srv.seen] == ["HEAD", "POST"]  # nothing PUT to the API root


@pytest.mark.parametrize("key", ["index.docker.io", "docker.io", "https://index.docker.io/v1/"])
def test_docker_hub_helpers_are_found_by_the_keys_docker_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    _, calls = _store(tmp_path, monkeypatch, "none", "https://index.docker.io/v1/")
    cfg = {"credHelpers": {key: "envbuildtest"}}
    (tmp_path / "cfg" / "config.json").write_text(json.dumps(cfg))
    assert registry._docker_auth("docker.io") == (USER, PASSWORD)
    assert calls.read_text().split() == ["get", "https://index.docker.io/v1/"]


_HELPER_OK = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


@given(st.one_of(
    st.text(min_size=1, max_size=80).filter(lambda s: not set(s) <= _HELPER_OK),
    st.text(alphabet="._-", min_size=1, max_size=3).map(lambda p: p + "pass"),
    st.just("a" * 65)))
@settings(max_examples=300, deadline=None)
def test_hostile_helper_names_never_reach_a_process(name: str) -> None:
    """Any credHelpers/credsStore value outside [A-Za-z0-9][A-Za-z0-9._-]{0,63} (a path, a shell
    word, an option, Unicode look-alikes, control characters) is refused before any lookup or
    process: `docker-credential-<value>` is never looked up on PATH, let alone run."""
    from envbuild.common import proc
    calls: list[object] = []
    orig_which, orig_run = proc.which, proc.run
    proc.which = lambda *a, **k: calls.append(a) or "/bin/true"  # type: ignore[assignment]
    proc.run = lambda *a, **k: calls.append(a)  # type: ignore[assignment]
    try:
        with pytest.raises(UsageError, match="not a helper name"):
            registry._helper_login(name, "registry.example.com")
    finally:
        proc.which, proc.run = orig_which, orig_run
    assert calls == []
