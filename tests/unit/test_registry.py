"""The registry client against a real registry (Debian's docker-registry, no engine needed) and
the bearer-token flow against a small local token-auth server."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.common.errors import EnvbuildError, UsageError
from envbuild.common.http import Denied, RegistryAuth, Reply, loopback, parse_challenge
from envbuild.engine import registry
from tests.support.registry import PASSWORD, USER


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
    from tests.support.local_server import LocalServer

    srv = LocalServer()
    srv.routes["/v2/team/x/blobs/uploads/"] = lambda _h: (202, {}, b"")
    try:
        with pytest.raises(EnvbuildError, match="no Location for the upload"):
            registry.client(srv.url.split("//")[1]).put_blob("team/x", b"data")
    finally:
        srv.close()
    assert [m for m, _, _ in srv.seen] == ["HEAD", "POST"]  # nothing PUT to the API root


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
