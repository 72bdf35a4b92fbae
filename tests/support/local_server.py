"""Helpers shared by the http tests and others (moved out of test_http.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[BaseHTTPRequestHandler], tuple[int, dict[str, str], bytes]]


class LocalServer:
    def __init__(self) -> None:
        self.routes: dict[str, Answer] = {}
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        state = self

        class H(BaseHTTPRequestHandler):
            def _any(self) -> None:
                state.seen.append((self.command, self.path, dict(self.headers)))
                route = state.routes.get(self.path.split("?")[0])
                status, headers, body = route(self) if route else (404, {}, b"")
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_HEAD = do_PUT = do_POST = _any

            def log_message(self, *_: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

