"""Helpers shared by the size tests and others (moved out of test_size.py)."""

from __future__ import annotations

import gzip
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support import FIXTURES

FIX = FIXTURES / "size"
TORCH = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
MANIFEST_LAYERS = json.loads((FIX / "registry-debian-bookworm-manifest.json").read_text())


class _Server:
    """Recorded payloads: /pt/ (PyTorch-style HTML), /pypi/ (PEP 691 JSON), /v2/ (registry)."""

    def __init__(self) -> None:
        self.tails: dict[str, Any] = json.loads((FIX / "tails.json").read_text())
        self.registry: dict[str, tuple[int, dict[str, str], bytes]] = {}
        self.require_token = True
        self.requests: list[str] = []
        self.override: dict[str, tuple[int, dict[str, str], bytes]] = {}

    def handle(self, path: str, headers: Any) -> tuple[int, dict[str, str], bytes]:
        self.requests.append(path)
        if path in self.override:
            return self.override[path]
        if path.startswith("/v2/") or path.startswith("/token"):
            return self._registry(path, headers)
        if path == "/pt/torch/":
            href = f"/pt/files/{TORCH.replace('+', '%2B')}#sha256={'0' * 64}"
            body = (f'<!DOCTYPE html><html><body><h1>Links for torch</h1>'
                    f'<a href="{href}" data-dist-info-metadata="sha256={"1" * 64}">{TORCH}</a>'
                    f'<a href="/pt/files/torch-2.13.0%2Bcpu-cp312-cp312-win_amd64.whl">x</a>'
                    '</body></html>')
            return 200, {"Content-Type": "text/html"}, body.encode()
        m = re.fullmatch(r"/(?:pt|pypi)/([a-z0-9-]+)/", path)
        if m and path.startswith("/pypi/") and (FIX / f"pypi-{m.group(1)}.json").exists():
            doc = json.loads((FIX / f"pypi-{m.group(1)}.json").read_text())
            for f in doc["files"]:
                f["url"] = f"/pypi/files/{f['filename']}"
            return 200, {"Content-Type": "application/vnd.pypi.simple.v1+json"}, \
                json.dumps(doc).encode()
        m = re.fullmatch(r"/(?:pt|pypi)/files/(.+?)(\.metadata)?", path)
        if m:
            name = m.group(1).replace("%2B", "+")
            if m.group(2):
                meta = FIX / f"{name}.metadata"
                return (200, {}, meta.read_bytes()) if meta.exists() else (404, {}, b"")
            return self._range(name, headers.get("Range", ""))
        return 404, {}, b""

    def _range(self, name: str, rng: str) -> tuple[int, dict[str, str], bytes]:
        rec = self.tails.get(name)
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", rng)
        if rec is None or m is None:
            return 404 if rec is None else 200, {}, b""
        size, offset = rec["size"], rec["tail_offset"]
        tail = gzip.decompress((FIX / f"{name}.tail.gz").read_bytes())
        first, last = int(m.group(1)), int(m.group(2))
        if (first, last) == (0, 0):
            return 206, {"Content-Range": f"bytes 0-0/{size}"}, b"P"
        # bytes before the recorded tail are not recorded: zeros stand in (never parsed)
        data = b"\0" * max(0, offset - first) + tail[max(0, first - offset):last + 1 - offset]
        return 206, {"Content-Range": f"bytes {first}-{last}/{size}"}, data

    def _registry(self, path: str, headers: Any) -> tuple[int, dict[str, str], bytes]:
        if path.startswith("/token"):
            return 200, {}, json.dumps({"token": "t0k"}).encode()
        if self.require_token and headers.get("Authorization") != "Bearer t0k":
            realm = f"http://{headers.get('Host')}/token"
            return 401, {"WWW-Authenticate": f'Bearer realm="{realm}",service="reg",'
                                              f'scope="repository:library/debian:pull"'}, b""
        return self.registry.get(path, (404, {}, b""))


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, _Server]]:
    state = _Server()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, hdrs, body = state.handle(self.path, self.headers)
            self.send_response(status)
            for k, v in hdrs.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"127.0.0.1:{httpd.server_address[1]}", state
    httpd.shutdown()
    httpd.server_close()

