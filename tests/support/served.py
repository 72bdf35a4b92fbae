"""A directory served over HTTP for the engine tests (a PEP 503 index, an RPM repository, a
python-build-standalone download list), recording every request: the tests prove from it who
fetched what (a build container directly, or the proxy on the host)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote


@dataclass
class Served:
    url: str  # http://host:port
    seen: list[str] = field(default_factory=list)  # "GET /path-as-sent 200"
    by_client: list[tuple[str, str]] = field(default_factory=list)  # (client, "GET /unquoted")


class _Recorder(SimpleHTTPRequestHandler):
    served: Served

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        self.served.seen.append(f"{self.command} {self.path} {int(code)}")
        self.served.by_client.append((self.client_address[0],
                                      f"{self.command} {unquote(self.path)}"))

    def log_message(self, format: str, *args: Any) -> None:  # no stderr lines in test output
        return None


@contextmanager
def serve(root: Path, host: str) -> Iterator[Served]:
    """Serve root on host (127.0.0.1: only processes on the host, the proxy among them, reach
    it; docker's bridge gateway: containers reach it directly) on a free port."""
    served = Served("")
    handler = partial(type("H", (_Recorder,), {"served": served}), directory=str(root))
    server = ThreadingHTTPServer((host, 0), handler)
    served.url = f"http://{host}:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
