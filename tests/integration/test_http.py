"""envbuild/common/http.py, the one HTTP client, against local servers: statuses, retries, the
size cap, redirects, and no secret of a URL in any error (the token flow:
tests/unit/test_registry.py)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from envbuild.common.errors import EXIT_CANNOT_RUN, EnvironmentProblem
from envbuild.common.http import Http, Reply, Unreachable
from tests.support.local_server import Answer, LocalServer


@pytest.fixture
def srv() -> Iterator[LocalServer]:
    s = LocalServer()
    yield s
    s.close()


def _fixed(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> Answer:
    return lambda _h: (status, headers or {}, body)


def test_every_status_comes_back_with_ok_none_after_the_retries(srv: LocalServer) -> None:
    srv.routes["/gone"] = _fixed(404, b"nope")
    srv.routes["/busy"] = _fixed(503, b"later")
    slept: list[float] = []
    http = Http(timeout=5, retries=3, backoff=0.25, sleep=slept.append)
    r = http.request("GET", f"{srv.url}/gone", ok=None)
    assert (r.status, r.body) == (404, b"nope")  # not retried: a 404 is an answer
    r = http.request("GET", f"{srv.url}/busy", ok=None)
    assert (r.status, r.body) == (503, b"later") and slept == [0.25, 0.5]
    assert [p for _, p, _ in srv.seen].count("/busy") == 3 and http.requests == 4


def test_methods_bodies_and_case_blind_headers(srv: LocalServer) -> None:
    srv.routes["/put"] = lambda h: (201, {"Docker-Content-Digest": "sha256:x"},
                                    h.rfile.read(int(h.headers["Content-Length"])))
    r = Http(retries=1).send("PUT", f"{srv.url}/put", {"Content-Type": "a/b"}, b"payload")
    assert r.status == 201 and r.body == b"payload"
    assert r.header("docker-content-digest") == r.header("DOCKER-CONTENT-DIGEST") == "sha256:x"
    assert Reply(200, {"X-A": "1"}, b"").header("x-a") == "1"


def test_an_answer_over_the_cap_is_unreachable(srv: LocalServer) -> None:
    srv.routes["/big"] = _fixed(200, b"x" * 5000)
    with pytest.raises(Unreachable, match="answered more than 4096 bytes") as exc:
        Http(retries=1).get(f"{srv.url}/big", limit=4096)
    assert exc.value.exit_code == EXIT_CANNOT_RUN
    assert len(Http(retries=1, limit=8192).get(f"{srv.url}/big").body) == 5000


def test_a_redirect_to_another_host_drops_the_authorization(srv: LocalServer) -> None:
    """A registry sends blobs to storage elsewhere: the token must not follow (requests' rule,
    kept by the client: the login goes to the host that asked for it only)."""
    other = LocalServer()
    try:
        other.routes["/blob"] = _fixed(200, b"blob")
        srv.routes["/v2/x/blobs/sha256:1"] = _fixed(307, headers={
            "Location": other.url.replace("127.0.0.1", "localhost") + "/blob"})
        r = Http(retries=1).get(f"{srv.url}/v2/x/blobs/sha256:1",
                                headers={"Authorization": "Bearer SECRET-TOKEN"})
        assert r.body == b"blob" and r.url.endswith("/blob")
        assert srv.seen[0][2].get("Authorization") == "Bearer SECRET-TOKEN"
        assert "Authorization" not in other.seen[0][2]
    finally:
        other.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SECRETS = ["hunter2", "ghp_abcDEF123", "p%40ss", "tok/with/slashes", "a:b:c"]


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize("kind", ["status", "unreachable", "scheme", "json", "cap"])
def test_no_error_shows_a_secret_of_the_url(srv: LocalServer, secret: str, kind: str) -> None:
    srv.routes["/p"] = {"status": _fixed(403), "json": _fixed(200, b"<html>"),
                        "cap": _fixed(200, b"x" * 100)}.get(kind, _fixed(200))
    base = {"unreachable": f"http://127.0.0.1:{_closed_port()}", "scheme": "ftp://h"}.get(
        kind, srv.url)
    url = base.replace("://", f"://bob:{secret}@") + f"/p?token={secret}"
    with pytest.raises(EnvironmentProblem) as exc:
        Http(retries=1, limit=10).get(url).json()
    text = json.dumps(exc.value.to_json())
    assert secret not in text and secret.split("/")[0] not in text
    assert exc.value.exit_code == EXIT_CANNOT_RUN and "\n" not in exc.value.message


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://x/y", "gopher://x", "/relative",
                                 "http://", "https:///path", "javascript:alert(1)", ""])
def test_only_http_and_https_urls_are_fetched(url: str) -> None:
    with pytest.raises(Unreachable, match="not an http"):
        Http(retries=1).get(url)
