"""Builds through a real HTTP proxy (Debian's tinyproxy, with a login) on a real engine.

The proxy listens on docker's bridge gateway; the torch index is served on the host's
127.0.0.1, which no build container can reach directly (its 127.0.0.1 is itself): pip inside the
build can only have got torch through the proxy, and the proxy's log shows the requests. apt's
Debian mirror stays reachable directly too, so for apt the proof is the proxy log alone (apt with
http_proxy set sends every request to the proxy). The proxy login is a secret: it must be in no
layer, no history entry, no image config, no output and no build log.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import IN_CI, run_cli
from tests.test_build import BASE, docker, fixtures, image_exists  # noqa: F401
from tests.test_corp_mirror import _gateway, _Handler, simple_index

pytestmark = [pytest.mark.docker, pytest.mark.slow]

USER, PASSWORD = "alice", "S3CRETpr0xy"


@dataclass
class Proxy:
    url: str  # with the login
    log: Path
    mirror: str
    mirror_seen: list[str]


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def proxy(fixtures: Path, tmp_path_factory: pytest.TempPathFactory  # noqa: F811
          ) -> Iterator[Proxy]:
    binary = shutil.which("tinyproxy")
    if binary is None:
        msg = "tinyproxy is not installed (.ci/system-deps.sh installs it)"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    root = tmp_path_factory.mktemp("proxy")
    simple_index(fixtures, root)
    seen: list[str] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0),
                                 partial(type("H", (_Handler,), {"seen": seen}),
                                         directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    gw = _gateway()
    port = _free_port(gw)
    log = root / "tinyproxy.log"
    conf = root / "tinyproxy.conf"
    conf.write_text(f'Port {port}\nListen {gw}\nTimeout 600\nLogFile "{log}"\nLogLevel Info\n'
                    f"MaxClients 20\nBasicAuth {USER} {PASSWORD}\n")
    p = subprocess.Popen([binary, "-d", "-c", str(conf)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):  # wait until it listens (a start-up wait, not a timing assert)
            with socket.socket() as s:
                if s.connect_ex((gw, port)) == 0:
                    break
            time.sleep(0.1)
        host, mport = server.server_address[:2]
        yield Proxy(f"http://{USER}:{PASSWORD}@{gw}:{port}", log,
                    f"http://{host}:{mport}/simple", seen)
    finally:
        p.terminate()
        p.wait(timeout=30)
        server.shutdown()
        server.server_close()


def _build_log(stdout: str) -> str:
    try:
        return Path(json.loads(stdout)["image"]["log"]).read_text()
    except (ValueError, KeyError, OSError):
        return ""


def test_build_goes_through_the_proxy_and_keeps_no_trace(proxy: Proxy, tmp_path: Path) -> None:
    tag = "envbuild-corp/proxy:cpu"
    ctx = tmp_path / "ctx"
    args = ["make", "--target", "cpu", "--torch", "2.13.0", "--python", "3.11", "--os",
            "debian12", "--without", "torchvision", "--without", "torchaudio", "--base-image",
            BASE, "--progress", "plain", "--json", "--no-validate", "--rebuild", "--tag", tag,
            # an OS package, so that the apt step runs (not a cache hit) and must use the proxy
            "--apt", "netbase",
            "--torch-index-url", proxy.mirror, "--torch-index-kind", "pytorch",
            "--out", str(ctx)]
    try:
        # the proxy comes from the environment, as behind a corporate proxy
        r = run_cli(*args, env={"HTTP_PROXY": proxy.url, "HTTPS_PROXY": proxy.url,
                                "NO_PROXY": "localhost"})
        assert r.returncode == 0, (r.stderr + r.stdout)[-4000:]
        log = proxy.log.read_text()
        # pip: the torch index on the host's loopback was fetched by the proxy, for the build
        assert f"GET {proxy.mirror}/torch/" in log, log[-3000:]
        assert any(s.startswith("GET /simple/torch/") for s in proxy.mirror_seen)
        # apt: when its step ran (BuildKit caches it across runs, and proxy args are not part
        # of its cache key: on a fresh CI machine it always runs), every fetch went through
        apt_ran = "Get:1 http" in r.stdout + r.stderr or "Get:1 http" in _build_log(r.stdout)
        if apt_ran:
            assert "/dists/bookworm" in log and "netbase" in log, log[-3000:]
        # the login never lands: history, config, output, build log
        history = docker("history", "--no-trunc", "--format", "{{.CreatedBy}}", tag).stdout
        config = docker("image", "inspect", tag).stdout
        data = json.loads(r.stdout)
        build_log = Path(str(data["image"]["log"]))
        assert build_log.is_file(), data["image"]
        texts = {"history": history, "config": config, "stdout": r.stdout, "stderr": r.stderr,
                 "build log": build_log.read_text()}
        assert "# proxy: HTTPS_PROXY=http://***@" in texts["build log"]
        for where, text in texts.items():
            assert PASSWORD not in text, f"proxy password in {where}"
        hostport = proxy.url.rsplit("@", 1)[1]
        for where in ("history", "config"):
            for needle in (hostport, "_PROXY=", "_proxy="):
                assert needle not in texts[where], (where, needle)
        saved = subprocess.run(["/usr/bin/docker", "save", tag], capture_output=True,
                               check=True, timeout=600).stdout
        assert PASSWORD.encode() not in saved, "proxy password in an image layer"
    finally:
        if image_exists(tag):
            docker("image", "rm", tag, check=False)
