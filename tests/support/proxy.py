"""Helpers shared by the corp_proxy tests and others (moved out of test_corp_proxy.py)."""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from ipaddress import ip_network
from pathlib import Path

import pytest

from tests.support import IN_CI
from tests.support.docker_helpers import docker
from tests.support.mirror import simple_index
from tests.support.served import Served, serve

USER, PASSWORD = "alice", "S3CRETpr0xy"
# The comment that marks this module's iptables rule (a stale one from a killed run is removed
# before a new one goes in).
BLOCK_COMMENT = "envbuild-test-direct-route-blocked"


def _skip_or_fail(msg: str) -> None:
    if IN_CI:
        pytest.fail(msg)
    pytest.skip(msg)


# -- docker's bridge and the rule that blocks its direct route ------------------------------------

@dataclass(frozen=True)
class Bridge:
    name: str  # the Linux bridge, docker0
    subnet: str
    gateway: str  # the host's address on it


def _bridge() -> Bridge:
    out = docker("network", "inspect", "bridge", "--format",
                 '{{index .Options "com.docker.network.bridge.name"}} '
                 "{{range .IPAM.Config}}{{.Subnet}} {{.Gateway}}{{end}}").stdout.split()
    assert len(out) >= 2 and "/" in out[1], out
    net = ip_network(out[1])
    # dockerd 20.10 may record only the subnet, whose first host the bridge then takes
    gw = out[2] if len(out) > 2 else str(next(net.hosts()))
    return Bridge(out[0], str(net), gw)


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["iptables", "-w", "30", *args], capture_output=True, text=True,
                          check=check, timeout=60)


def _our_rules() -> list[str]:
    return [ln for ln in _iptables("-S", "DOCKER-USER").stdout.splitlines()
            if BLOCK_COMMENT in ln]


def _unblock() -> None:
    for rule in _our_rules():  # "-A DOCKER-USER ..." -> "-D DOCKER-USER ..."
        _iptables("-D", *shlex.split(rule)[1:])
    assert _our_rules() == []


@pytest.fixture(scope="module")
def bridge(docker_engine: None) -> Iterator[Bridge]:
    if os.geteuid() != 0 or shutil.which("iptables") is None:
        _skip_or_fail("blocking the build's direct route needs root and iptables")
    if _iptables("-S", "DOCKER-USER", check=False).returncode != 0:
        _skip_or_fail("no DOCKER-USER chain: the engine does not manage iptables")
    _unblock()  # a stale rule from a killed run
    try:
        yield _bridge()
    finally:
        _unblock()


# -- the proxy ------------------------------------------------------------------------------------

@dataclass
class Proxy:
    url: str  # with the login
    log: Path
    mirror: Served  # the torch index, on the host's 127.0.0.1


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def proxy(fixtures: Path, bridge: Bridge, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Proxy]:
    binary = shutil.which("tinyproxy")
    if binary is None:
        _skip_or_fail("tinyproxy is not installed (.ci/system-deps.sh installs it)")
        raise AssertionError  # unreachable: for the type checker
    root = tmp_path_factory.mktemp("proxy")
    simple_index(fixtures, root)
    gw = bridge.gateway
    port = _free_port(gw)
    log = root / "tinyproxy.log"
    conf = root / "tinyproxy.conf"
    conf.write_text(f'Port {port}\nListen {gw}\nTimeout 600\nLogFile "{log}"\nLogLevel Info\n'
                    f"MaxClients 20\nBasicAuth {USER} {PASSWORD}\n")
    with serve(root, "127.0.0.1") as mirror:
        p = subprocess.Popen([binary, "-d", "-c", str(conf)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        try:
            for _ in range(100):  # wait until it listens (a start-up wait, not a timing assert)
                with socket.socket() as s:
                    if s.connect_ex((gw, port)) == 0:
                        break
                time.sleep(0.1)
            yield Proxy(f"http://{USER}:{PASSWORD}@{gw}:{port}", log,
                        Served(mirror.url + "/simple", mirror.seen, mirror.by_client))
        finally:
            p.terminate()
            p.wait(timeout=30)

