"""Builds through a real HTTP proxy (Debian's tinyproxy, with a login) on a real engine, with the
build's direct route to the outside blocked.

The proxy listens on docker's bridge gateway. For the proxy builds an iptables rule in docker's
DOCKER-USER chain rejects everything that leaves the bridge for the outside (DNS included), so a
build step reaches nothing but the host's addresses on the bridge: the proxy, and a NO_PROXY host
served on the gateway. A probe build shows that BuildKit's RUN containers sit on that bridge and
that the rule holds (apt cannot fetch Debian's lists directly, it can through the proxy). Then:

- apt: the build's base keeps its apt lists in a fresh directory (not the lists cache mount), so
  `apt-get update` must fetch them, and can only do so through the proxy; the torch index is served
  on the host's 127.0.0.1, which no build container can reach (its 127.0.0.1 is itself): pip can
  only have got torch through the proxy. The proxy comes from the environment.
- dnf: the rhel-dnf stand-in of tests/integration/test_bases.py (Debian's real dnf 4 and rpm)
  with its repository split in two and served over HTTP: one half on the host's 127.0.0.1 (only
  through the proxy), the other on the bridge gateway, listed in NO_PROXY (fetched directly: its
  server sees the build container's address, the proxy log never names it). The proxy comes from
  --proxy.

The proxy login is a secret: it must be in no layer, no history entry, no image config, no output
and no build log.

Which spelling reaches the steps does not matter under BuildKit: its Dockerfile frontend takes the
predefined proxy arguments in either case and sets both cases in every RUN step (tried: with
envbuild passing only HTTP_PROXY/HTTPS_PROXY, apt and dnf here still went through the proxy,
although apt run with only HTTP_PROXY in a plain container ignores it). These tests fail when no
proxy or no NO_PROXY reaches the build (tried: without no_proxy the dnf test fails).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from ipaddress import ip_address, ip_network
from pathlib import Path

import pytest

from tests.support import Cli, run_cli
from tests.support.bases import STANDINS
from tests.support.docker_helpers import BASE, docker
from tests.support.proxy import (
    BLOCK_COMMENT,
    PASSWORD,
    Bridge,
    Proxy,
    _iptables,
    _our_rules,
    _unblock,
)
from tests.support.served import serve

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@contextmanager
def direct_route_blocked(bridge: Bridge) -> Iterator[None]:
    """While inside: whatever enters the bridge from a container and leaves it for the outside is
    rejected (DOCKER-USER runs before docker's own FORWARD rules). Traffic to the host's own
    addresses (the proxy, a server on the gateway) is INPUT, not FORWARD: unaffected."""
    _unblock()
    _iptables("-I", "DOCKER-USER", "-s", bridge.subnet, "-i", bridge.name, "!", "-o", bridge.name,
              "-m", "comment", "--comment", BLOCK_COMMENT, "-j", "REJECT")
    try:
        yield
    finally:
        _unblock()


def _hostport(proxy: Proxy) -> str:
    return proxy.url.rsplit("@", 1)[1]


# -- helpers --------------------------------------------------------------------------------------

def _build(dockerfile: str, ctx: Path, *args: str, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:
    ctx.mkdir(parents=True, exist_ok=True)
    (ctx / "Dockerfile").write_text(dockerfile)
    return subprocess.run(["/usr/bin/docker", "build", "--progress", "plain", *args, str(ctx)],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "DOCKER_BUILDKIT": "1", **(env or {})})


def _build_log(r: Cli) -> str:
    return Path(str(json.loads(r.stdout)["image"]["log"])).read_text()


def _assert_no_trace(tag: str, r: Cli, proxy: Proxy) -> None:
    """The login never lands: history, config, output, build log, layers; and no proxy setting is
    in the history or config at all."""
    history = docker("history", "--no-trunc", "--format", "{{.CreatedBy}}", tag).stdout
    config = docker("image", "inspect", tag).stdout
    texts = {"history": history, "config": config, "stdout": r.stdout, "stderr": r.stderr,
             "build log": _build_log(r)}
    assert "# proxy: HTTPS_PROXY=http://***@" in texts["build log"]
    for where, text in texts.items():
        assert PASSWORD not in text, f"proxy password in {where}"
    for where in ("history", "config"):
        for needle in (_hostport(proxy), "_PROXY=", "_proxy="):
            assert needle not in texts[where], (where, needle)
    saved = subprocess.run(["/usr/bin/docker", "save", tag], capture_output=True,
                           check=True, timeout=600).stdout
    assert PASSWORD.encode() not in saved, "proxy password in an image layer"


PROBE = """\
FROM {base} AS probe
ARG NONCE
RUN echo "$NONCE" >/dev/null \\
 && awk '/32 host/ {{print f}} {{f=$2}}' /proc/net/fib_trie | grep -v '^127\\.' | sort -u \\
      | sed 's/^/addr /' >/probe.txt \\
 && if timeout 10 bash -c 'exec 3<>/dev/tcp/{mirror_ip}/80' 2>/dev/null; \\
    then echo 'direct-tcp open'; else echo 'direct-tcp blocked'; fi >>/probe.txt \\
 && for how in direct proxy; do \\
      mkdir -p /tmp/$how/partial; \\
      ( if [ $how = direct ]; then unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY; fi; \\
        apt-get -o Dir::State::lists=/tmp/$how -o Acquire::Retries=0 update \\
          >/tmp/$how.log 2>&1 ); \\
      if ls /tmp/$how/*_InRelease >/dev/null 2>&1; then echo "apt-$how fetched"; \\
      else echo "apt-$how failed"; fi >>/probe.txt; \\
    done
FROM scratch
COPY --from=probe /probe.txt /
"""


def test_build_containers_sit_on_the_bridge_and_reach_out_only_through_the_proxy(
        proxy: Proxy, bridge: Bridge, tmp_path: Path) -> None:
    mirror_ip = socket.gethostbyname("deb.debian.org")
    dockerfile = PROBE.format(base=BASE, mirror_ip=mirror_ip)
    out = tmp_path / "out"
    env = {"http_proxy": proxy.url}
    args = ("--build-arg", "http_proxy", "-o", f"type=local,dest={out}")
    nonce = ("--build-arg", f"NONCE={uuid.uuid4().hex}")  # a new one per build: no cache hit
    # without the block, the same probe reaches the mirror directly: the probe can fail
    r = _build(dockerfile, tmp_path / "ctx", *args, *nonce, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = (out / "probe.txt").read_text().splitlines()
    assert "direct-tcp open" in lines and "apt-direct fetched" in lines, lines
    with direct_route_blocked(bridge):
        nonce = ("--build-arg", f"NONCE={uuid.uuid4().hex}")
        r = _build(dockerfile, tmp_path / "ctx", *args, *nonce, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = (out / "probe.txt").read_text().splitlines()
    addrs = [ln.split()[1] for ln in lines if ln.startswith("addr ")]
    # BuildKit's RUN containers are on docker's bridge: the rule applies to them
    assert addrs and all(ip_address(a) in ip_network(bridge.subnet) for a in addrs), lines
    assert lines[len(addrs):] == ["direct-tcp blocked", "apt-direct failed", "apt-proxy fetched"]
    assert "/dists/bookworm/InRelease" in proxy.log.read_text()
    assert _our_rules() == []


def test_apt_and_pip_go_through_the_proxy_and_keep_no_trace(proxy: Proxy, bridge: Bridge,
                                                             tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:12]
    base, tag = f"envbuild-corp/proxy-base:{run}", f"envbuild-corp/proxy:{run}"
    # A per-run base whose apt lists live outside the lists cache mount: the apt step cannot be a
    # cache hit, and `apt-get update` must fetch every list (no proxy: no list, no package).
    lists = f"/var/lib/envbuild-proxy-test-{run}/lists"
    r0 = _build(f"FROM {BASE}\nRUN mkdir -p {lists}/partial && echo 'Dir::State::lists "
                f"\"{lists}/\";' >/etc/apt/apt.conf.d/90envbuild-proxy-test\n",
                tmp_path / "base", "-t", base)
    assert r0.returncode == 0, r0.stderr[-3000:]
    args = ["make", "--target", "cpu", "--torch", "2.13.0", "--python", "3.11", "--os",
            "debian12", "--without", "torchvision", "--without", "torchaudio", "--base-image",
            base, "--progress", "plain", "--json", "--no-validate", "--tag", tag,
            "--torch-index-url", proxy.mirror.url, "--torch-index-kind", "pytorch",
            "--out", str(tmp_path / "ctx")]
    before = len(proxy.log.read_text())
    try:
        with direct_route_blocked(bridge):
            # the proxy comes from the environment, as behind a corporate proxy
            r = run_cli(*args, env={"HTTP_PROXY": proxy.url, "HTTPS_PROXY": proxy.url,
                                    "NO_PROXY": "localhost"}, timeout=1800)
        assert r.returncode == 0, (r.stderr + r.stdout)[-4000:]
        log = proxy.log.read_text()[before:]
        # apt: its lists came through the proxy (the build could reach nothing else)
        assert "GET http://deb.debian.org/debian/dists/bookworm/InRelease" in log, log[-3000:]
        assert "/dists/bookworm/main/binary-" in log, log[-3000:]
        assert lists in docker("run", "--rm", tag, "apt-config", "dump").stdout
        # pip: the torch index on the host's loopback, fetched by the proxy for the build
        assert f"GET {proxy.mirror.url}/torch/" in log, log[-3000:]
        assert ("127.0.0.1", "GET /simple/torch/") in proxy.mirror.by_client
        _assert_no_trace(tag, r, proxy)
    finally:
        docker("image", "rm", "-f", tag, base, check=False)


SPLIT_REPO = """\
FROM {standin} AS repos
RUN mkdir -p /out/via-proxy /out/direct \\
 && for f in $(find /srv/rhel-standin -name '*.rpm'); do \\
      case "$(basename "$f")" in python3.11*) cp "$f" /out/via-proxy/ ;; \\
                                   *) cp "$f" /out/direct/ ;; esac; done \\
 && createrepo_c -q /out/via-proxy && createrepo_c -q /out/direct
FROM scratch
COPY --from=repos /out /
"""


def _repo(name: str, url: str) -> str:
    return f"[{name}]\\nname={name}\\nbaseurl={url}/\\ngpgcheck=0\\nenabled=1\\n"


def test_dnf_goes_through_the_proxy_and_no_proxy_hosts_are_direct(
        proxy: Proxy, bridge: Bridge, fixtures: Path,
        tmp_path: Path) -> None:
    body, make_args = STANDINS["rhel-dnf"]
    run = uuid.uuid4().hex[:12]
    standin = f"envbuild-corp/proxy-dnf-standin:{run}"
    base, tag = f"envbuild-corp/proxy-dnf-base:{run}", f"envbuild-corp/proxy-dnf:{run}"
    try:
        # the stand-in exactly as test_bases builds it (a BuildKit cache hit after that module)
        r0 = _build(f"FROM {BASE}\nSHELL [\"/bin/bash\", \"-o\", \"pipefail\", \"-c\"]\n{body}",
                    tmp_path / "standin", "-t", standin)
        assert r0.returncode == 0, r0.stderr[-3000:]
        # its repository, split: python3.11* through the proxy, the compilers directly
        repos = tmp_path / "repos"
        r0 = _build(SPLIT_REPO.format(standin=standin), tmp_path / "split",
                    "-o", f"type=local,dest={repos}")
        assert r0.returncode == 0, r0.stderr[-3000:]
        assert list((repos / "via-proxy").glob("python3.11-devel-*.rpm"))
        assert list((repos / "direct").glob("gcc-c++-*.rpm"))
        with serve(repos, "127.0.0.1") as loop, serve(repos, bridge.gateway) as gw:
            r0 = _build(f"FROM {standin}\nRUN rm -rf /srv/rhel-standin "
                        "/etc/yum.repos.d/rhel-standin.repo && printf '"
                        + _repo("envbuild-via-proxy", f"{loop.url}/via-proxy")
                        + _repo("envbuild-direct", f"{gw.url}/direct")
                        + "' >/etc/yum.repos.d/envbuild-proxy-test.repo\n",
                        tmp_path / "base", "-t", base)
            assert r0.returncode == 0, r0.stderr[-3000:]
            with direct_route_blocked(bridge):
                # --proxy this time; NO_PROXY (the gateway) still comes from the environment
                r = run_cli("make", "--target", "cpu", "--torch", "2.13.0", *make_args,
                            "--without", "torchvision", "--without", "torchaudio",
                            "--base-image", base, "--wheelhouse", str(fixtures), "--tag", tag,
                            "--no-validate", "--progress", "plain", "--json",
                            "--proxy", proxy.url,
                            env={"NO_PROXY": f"localhost,{bridge.gateway}"}, timeout=1800)
        assert r.returncode == 0, (r.stderr + r.stdout)[-4000:]
        log = proxy.log.read_text()
        # dnf fetched the repository on the host's loopback through the proxy, packages included
        assert f"GET {loop.url}/via-proxy/repodata/repomd.xml" in log, log[-3000:]
        assert f"GET {loop.url}/via-proxy/python3.11-devel-" in log, log[-3000:]
        assert ("127.0.0.1", "GET /via-proxy/repodata/repomd.xml") in loop.by_client, \
            loop.by_client
        assert any(c == "127.0.0.1" and w.startswith("GET /via-proxy/python3.11-devel-1-1.")
                   for c, w in loop.by_client), loop.by_client
        # ... and the NO_PROXY host directly, from the build container's own address
        assert gw.url.split("//")[1] not in log
        clients = {client for client, _ in gw.by_client}
        assert clients and all(ip_address(c) in ip_network(bridge.subnet) and
                               c != bridge.gateway for c in clients), gw.by_client
        direct = [w for _, w in gw.by_client]
        assert any(w.startswith("GET /direct/repodata/repomd.xml") for w in direct), direct
        assert any(w.startswith("GET /direct/gcc-c++-1-1.") for w in direct), direct
        _assert_no_trace(tag, r, proxy)
    finally:
        docker("image", "rm", "-f", tag, base, standin, check=False)
