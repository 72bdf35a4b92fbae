"""`envbuild matrix refresh` against recorded answers served from 127.0.0.1 (never the network)."""

from __future__ import annotations

import json
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from envbuild.common.errors import EnvironmentProblem
from envbuild.common.http import Http
from tests.support import refresh as shared
from tests.support import run_cli
from tests.support.refresh import MUTATIONS, Handler, Route, Server, _mutate, _status

_server = shared._server  # a fixture, shared with the other kind's test_refresh.py
mdir = shared.mdir  # a fixture, shared with the other kind's test_refresh.py
server = shared.server  # a fixture, shared with the other kind's test_refresh.py

# ------------------------------------------------------------------------ CLI end to end


def test_cli_refresh_pypi_agrees_and_json(server: Server, mdir: Path) -> None:
    r = run_cli("matrix", "refresh", "--source", "pypi", "--dir", str(mdir), "--pypi-url",
                server.url, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["changes"] == [] and out["checked"]["pypi"]["torch_releases"] == 26


def test_cli_check_compares_every_release_and_never_writes(server: Server, mdir: Path) -> None:
    base = ("matrix", "refresh", "--check", "--dir", str(mdir), "--pypi-url", server.url)
    r = run_cli(*base, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["checked"]["pypi"]["torch_releases"] == 26
    _mutate(mdir, *MUTATIONS[0][:4])
    before = (mdir / "torch.toml").read_text()
    r = run_cli(*base)
    assert r.returncode == 1 and "cudnn: \"9.17.1.4\" -> \"9.19.0.56\"" in r.stdout, r.stdout
    assert (mdir / "torch.toml").read_text() == before
    r = run_cli(*base, "--write")
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr


def test_cli_write_corrects_and_exit_codes(server: Server, mdir: Path) -> None:
    _mutate(mdir, *MUTATIONS[0][:4])
    args = ("matrix", "refresh", "--source", "pypi", "--dir", str(mdir), "--pypi-url", server.url)
    r = run_cli(*args)
    assert r.returncode == 1, r.stderr
    assert "cudnn: \"9.17.1.4\" -> \"9.19.0.56\"" in r.stdout
    assert "1 difference(s): 1 applicable with --write" in r.stdout
    r = run_cli(*args, "--write")
    assert r.returncode == 0 and "wrote 1 change(s)" in r.stdout, r.stdout + r.stderr
    assert 'cudnn = "9.19.0.56"' in (mdir / "torch.toml").read_text()


@pytest.mark.parametrize(("route", "needle"), [
    (_status(404), "answered HTTP 404"),
    (_status(500), "unreachable: HTTP 500"),
    ((200, {}, b"{not json"), "did not answer valid JSON"),
])
def test_cli_errors_exit_3_without_traceback(route: Route, needle: str, server: Server,
                                             mdir: Path) -> None:
    server.routes["/pypi/torch/json"] = route
    r = run_cli("matrix", "refresh", "--source", "pypi", "--dir", str(mdir), "--pypi-url",
                server.url, "--retries", "2", "--timeout", "5")
    assert r.returncode == 3
    assert needle in r.stderr and "Traceback" not in r.stderr + r.stdout
    assert r.stderr.startswith("error: ") and "\nhint: " in r.stderr


def test_cli_timeout_exit_3(server: Server, mdir: Path) -> None:
    def slow(_: Handler) -> tuple[int, dict[str, str], bytes]:
        time.sleep(1.0)
        return (200, {}, b"{}")

    server.routes["/pypi/torch/json"] = slow
    r = run_cli("matrix", "refresh", "--source", "pypi", "--dir", str(mdir), "--pypi-url",
                server.url, "--retries", "1", "--timeout", "0.2", "--json")
    assert r.returncode == 3 and "Traceback" not in r.stderr
    assert "no answer within 0.2 s" in json.loads(r.stdout)["error"]["message"]


@pytest.mark.parametrize("bad", ["", "PyPI", "pypi,nvidia-tags", "../x", "all "])
def test_cli_unknown_source_is_usage_error(bad: str) -> None:
    r = run_cli("matrix", "refresh", "--source", bad)
    assert r.returncode == 2 and "unknown source" in r.stderr


def test_cli_refresh_does_not_import_requests_at_startup() -> None:
    import subprocess
    import sys

    code = ("import sys; from envbuild.cli import run; run(['matrix', 'refresh', '--help']); "
            "print('HEAVY', 'requests' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY False" in p.stdout


def test_untrusted_tls_certificate_is_one_clear_error(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A TLS-intercepting proxy whose CA is not trusted: exit 3 naming REQUESTS_CA_BUNDLE."""
    import ssl
    import subprocess

    key, crt = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(crt)],
                   check=True, capture_output=True)
    for k in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(k, raising=False)
    state = Server("", routes={"/x": (200, {}, b"{}")})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (Handler,), {"server_state": state}))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with pytest.raises(EnvironmentProblem) as exc:
            Http(timeout=5, retries=3, backoff=0).get(f"https://127.0.0.1:{httpd.server_address[1]}/x")
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert exc.value.message.startswith("TLS verification failed for 127.0.0.1:")
    assert "certificate verify failed" in exc.value.message
    assert "REQUESTS_CA_BUNDLE" in exc.value.hint
