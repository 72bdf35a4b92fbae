"""Helpers shared by the refresh tests and others (moved out of test_refresh.py)."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from envbuild.common.resources import matrix_dir
from tests.support import FIXTURES

FIX = FIXTURES / "refresh"
PYPI = FIX / "pypi"

Route = tuple[int, dict[str, str], bytes] | Callable[["Handler"], tuple[int, dict[str, str], bytes]]


@dataclass
class Server:
    url: str
    routes: dict[str, Route] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)


class Handler(BaseHTTPRequestHandler):
    server_state: Server

    def do_GET(self) -> None:
        st_ = self.server_state
        st_.hits[self.path] = st_.hits.get(self.path, 0) + 1
        route = st_.routes.get(self.path) or st_.routes.get(self.path.split("?")[0])
        status, headers, body = (route(self) if callable(route) else route) if route else (
            404, {}, b"")
        try:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout tests)

    def log_message(self, *args: Any) -> None:
        pass


def pypi_routes() -> dict[str, Route]:
    """PyPI's recorded answers: torch and its companions (pypi/), the CUDA extensions
    (extensions/), each directory with its manifest."""
    out: dict[str, Route] = {}
    for d in (PYPI, FIX / "extensions"):
        manifest = json.loads((d / "manifest.json").read_text())
        ranges: dict[str, dict[str, tuple[bytes, str]]] = {}
        for key, name in manifest.items():
            if " " in key:  # "PATH bytes=A-B" -> "FILE bytes A-B/TOTAL": a recorded 206 answer
                path, rng = key.split(" ", 1)
                fname, cr = name.split(" ", 1)
                ranges.setdefault(path, {})[rng] = ((d / fname).read_bytes(), cr)
        for path, recorded in ranges.items():
            out[path] = _recorded_ranges(recorded)
        for path, name in manifest.items():
            if " " in path:
                continue
            ctype = ("application/vnd.pypi.simple.v1+json" if name.startswith("simple-")
                     else "application/json" if name.endswith(".json") else "text/plain")
            out[path] = (200, {"Content-Type": ctype}, (d / name).read_bytes())
    return out


def _recorded_ranges(recorded: dict[str, tuple[bytes, str]]) -> Route:
    def serve(h: Handler) -> tuple[int, dict[str, str], bytes]:
        hit = recorded.get(h.headers.get("Range", ""))
        return (206, {"Content-Range": hit[1]}, hit[0]) if hit else (404, {}, b"")
    return serve


@pytest.fixture(scope="module")
def _server() -> Iterator[Server]:
    state = Server("")
    handler = type("H", (Handler,), {"server_state": state})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def server(_server: Server) -> Server:
    _server.routes = pypi_routes()
    _server.hits = {}
    return _server


@pytest.fixture
def mdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the shipped matrix (and a private matrix cache)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    d = tmp_path / "matrix"
    shutil.copytree(matrix_dir(), d)
    return d


MUTATIONS = [
    # (file, row header match, old line, new line, expected (kind, field, old, new))
    ("torch.toml", 'release = "2.11"\ntag = "cu130"', 'cudnn = "9.19.0.56"', 'cudnn = "9.17.1.4"',
     ("changed", "cudnn", "9.17.1.4", "9.19.0.56")),
    ("torch.toml", 'release = "2.8"\ntag = "cu128"', 'nccl = "2.27.3"', 'nccl = "2.26.2"',
     ("changed", "nccl", "2.26.2", "2.27.3")),
    ("torch.toml", 'torch = "2.2.1"', 'torchaudio = "2.2.1"', 'torchaudio = "2.2.0"',
     ("changed", "torchaudio", "2.2.0", "2.2.1")),
    ("torch.toml", 'torch = "2.2.1"', "torchaudio_pinned = true", "torchaudio_pinned = false",
     ("changed", "torchaudio_pinned", False, True)),
    ("torch.toml", 'version = "2.7"\nreleased', 'default_variant = "cu126"',
     'default_variant = "cu118"', ("changed", "default_variant", "cu118", "cu126")),
    ("torch.toml", 'version = "2.9"\nreleased', 'python = ["3.10", "3.11", "3.12", "3.13", "3.14"]',
     'python = ["3.10", "3.11", "3.12", "3.13"]',
     ("changed", "python", ["3.10", "3.11", "3.12", "3.13"],
      ["3.10", "3.11", "3.12", "3.13", "3.14"])),
    ("torch.toml", 'torch = "2.13.0"', 'torchvision = "0.28.0"', 'torchvision = "0.28.1"',
     ("changed", "torchvision", "0.28.1", "0.28.0")),
]


def _mutate(d: Path, file: str, anchor: str, old: str, new: str) -> str:
    path = d / file
    text = path.read_text()
    start = text.index(anchor)
    at = text.index(old, start)
    path.write_text(text[:at] + new + text[at + len(old):])
    return text


# ------------------------------------------------------------------ HTTP errors -> exit 3


def _status(code: int) -> Route:
    return (code, {"Content-Type": "text/html"}, b"<html>error</html>")

