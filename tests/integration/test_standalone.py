"""`--python-source standalone` for real: uv installs CPython into /opt/python in a first stage,
the final image's venv is made from it; uv's download goes through an HTTP proxy with a login.

The stand-in (tests/support/standalone_python.py,
tests/fixtures/standalone/make-cpython.sh): no GitHub here, so no python-build-standalone archive
can be downloaded. The test serves a locally made one:
Debian's CPython relocated into the "install_only" layout (python/bin/python3.11, python/lib/...,
python/include/...), self-contained (its shared libraries beside it, $ORIGIN rpaths), ensurepip
from wheels in the tree. uv gets it through UV_PYTHON_DOWNLOADS_JSON_URL: a download list in uv's
own format naming the archive and its sha256, which uv checks. How the pinned uv (0.13.8) treats
the two ways to point it elsewhere (tried on this machine, 2026-11-23):
- UV_PYTHON_INSTALL_MIRROR replaces only the URL prefix: uv asks for
  `{mirror}/{release}/cpython-{version}%2B{release}-{triple}-install_only_stripped.tar.gz` of the
  release built into uv, and checks the sha256 built into uv (a different archive there fails:
  "Hash mismatch ... Expected ... Computed"). A mirror must be a byte-identical copy: no stand-in
  can pass through it, so for it the tests prove only that the request leaves with that layout.
- UV_PYTHON_DOWNLOADS_JSON_URL replaces uv's list (http(s) URL or file); `sha256` may be null
  (then nothing is checked); an archive with an absolute symlink is refused ("unsafe symbolic-link
  target"). That is what an internal build of the archives needs, and what the tests use.

What the stand-in cannot prove: that a real python-build-standalone archive works in these images
(its static OpenSSL and its own certificate lookup, its stripped build, its sysconfig paths that uv
rewrites on install, its patch release); only that the Dockerfile's stage, uv's download and
install, the copy into the final image, the venv from it and the validator do. It is Debian's
3.11 (the only torch wheels here are cp311), so the final image is checked to hold NO Debian
python at all (/usr/bin/python3*), proving the venv's Python is /opt/python's.

Found by the first real build: the venv was made through a lone symlink /opt/python/python3.11,
so its pyvenv.cfg `home` was /opt/python, where CPython (getpath) finds no standard library and
ensurepip died; the venv is now made from /opt/python/3.11/bin (a link to uv's installation).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT, run_cli, work_dir
from tests.support.corp_bundle import _unshare
from tests.support.docker_helpers import BASE, SYSTEM_CA, docker, image_exists
from tests.support.mirror import _gateway
from tests.support.proxy import PASSWORD, Proxy
from tests.support.served import serve
from tests.support.standalone_python import Archive, archive, site

# --- real builds ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def standalone(fixtures: Path) -> Archive:
    """The stand-in archive (built once per work dir, about 30 s)."""
    return archive(work_dir(), BASE)


def _make(tag: str, ctx: Path, wheelhouse: Path, *extra: str,
          env: dict[str, str]) -> tuple[Any, dict[str, Any]]:
    r = run_cli("make", "--target", "cpu", "--torch", "2.13.0", "--python", "3.11",
                "--python-source", "standalone", "--os", "debian12", "--base-image", BASE,
                "--without", "torchvision", "--without", "torchaudio",
                "--wheelhouse", str(wheelhouse), "--ca-cert", str(SYSTEM_CA),
                "--progress", "plain", "--json", "--rebuild", "--tag", tag, "--out", str(ctx),
                *extra, env=env, timeout=1800)
    try:
        data = json.loads(r.stdout)
    except ValueError:
        data = {}
    return r, data


@pytest.mark.docker
@pytest.mark.slow
def test_standalone_build_through_proxy_validates(standalone: Archive, proxy: Proxy,
                                                  fixtures: Path, tmp_path: Path
                                                  ) -> None:
    """One build for both: the stand-in CPython is served on the host's 127.0.0.1 (out of the
    build container's reach but through the proxy), uv downloads it through tinyproxy with a
    login, the image builds, the real validator passes, and the image's Python is /opt/python's."""
    tag = "envbuild-standalone/proxy:cpu"
    root = tmp_path / "site"
    root.mkdir()
    try:
        with serve(root, "127.0.0.1") as srv:
            site(root, standalone, srv.url)
            json_url = f"{srv.url}/downloads.json"
            r, data = _make(tag, tmp_path / "ctx", fixtures, "--revalidate",
                            env={"HTTP_PROXY": proxy.url, "HTTPS_PROXY": proxy.url,
                                 "NO_PROXY": "localhost",
                                 "UV_PYTHON_DOWNLOADS_JSON_URL": json_url})
        assert r.returncode == 0, (r.stderr + r.stdout)[-4000:]
        print(f"standalone build: {data['image']['seconds']} s build; make {data['seconds']}")
        # uv fetched the list and the archive, through the proxy (127.0.0.1 here is the host's:
        # only tinyproxy, on the host, can reach it)
        log = proxy.log.read_text()
        archive_path = "/" + standalone.name.replace("+", "%2B")
        for path in ("/downloads.json", archive_path):
            assert f"GET {srv.url}{path}" in log, log[-3000:]
            assert f"GET {path} 200" in srv.seen, srv.seen
        # built and validated by the real validator, run now (not a cached pass)
        report = data["validation"]
        assert report and report["cached"] is False, report
        statuses = {c["id"]: c["status"] for c in report["checks"]}
        assert "fail" not in statuses.values(), statuses
        for must in ("facts.torch", "expect.torch_version", "numerics.matmul", "train.smoke"):
            assert statuses[must] == "pass", must
        # the venv's Python is /opt/python's; the image has no Debian Python at all
        p = docker("run", "--rm", "--entrypoint", "bash", tag, "-c",
                   "python -c 'import sys, sysconfig, torch; print(sys.base_prefix); "
                   "print(sys.version_info[:3]); print(sysconfig.get_paths()[\"include\"])'; "
                   "ls /usr/bin/python3* /usr/lib/python3* 2>/dev/null | wc -l; "
                   "readlink -f /opt/python/3.11")
        base_prefix, version, include, debian, target = p.stdout.split("\n")[:5]
        assert base_prefix == "/opt/python/3.11", p.stdout
        assert version == str(tuple(int(x) for x in standalone.version.split("."))), p.stdout
        assert include == "/opt/python/3.11/include/python3.11", include
        assert debian == "0", "a Debian python in the final image"
        # uv's own installation directory, its patch release: what uv installed
        assert target == f"/opt/python/cpython-{standalone.version}-linux-{standalone.arch}-gnu"
        # the proxy login never lands (history, config, output, build log, layers); the download
        # list's URL is only in the discarded first stage
        history = docker("history", "--no-trunc", "--format", "{{.CreatedBy}}", tag).stdout
        config = docker("image", "inspect", tag).stdout
        build_log = Path(str(data["image"]["log"])).read_text()
        assert f"# UV_PYTHON_DOWNLOADS_JSON_URL={json_url}" in build_log
        texts = {"history": history, "config": config, "stdout": r.stdout, "stderr": r.stderr,
                 "build log": build_log}
        for where, text in texts.items():
            assert PASSWORD not in text, f"proxy password in {where}"
        for where in ("history", "config"):
            for needle in ("_PROXY=", "_proxy=", "UV_PYTHON", "downloads.json"):
                assert needle not in texts[where], (where, needle)
        saved = subprocess.run(["/usr/bin/docker", "save", tag], capture_output=True,
                               check=True, timeout=600).stdout
        assert PASSWORD.encode() not in saved, "proxy password in an image layer"
    finally:
        if image_exists(tag):
            docker("image", "rm", tag, check=False)


@pytest.mark.docker
@pytest.mark.slow
def test_mirror_gets_the_upstream_layout_directly(standalone: Archive, fixtures: Path,
                                                  tmp_path: Path) -> None:
    """UV_PYTHON_INSTALL_MIRROR from the environment reaches uv in the build (no proxy: the
    mirror listens on docker's bridge): uv asks it for python-build-standalone's own path. The
    mirror has nothing there (a stand-in could not pass uv's built-in sha256 anyway), so the
    build fails cleanly at that step, nothing tagged."""
    tag = "envbuild-standalone/mirror:cpu"
    root = tmp_path / "site"
    root.mkdir()
    with serve(root, _gateway()) as srv:
        r, data = _make(tag, tmp_path / "ctx", fixtures, "--no-validate",
                        env={"UV_PYTHON_INSTALL_MIRROR": f"{srv.url}/pbs"})
    assert r.returncode == 1, (r.stderr + r.stdout)[-3000:]
    error = data["error"]
    assert error["message"].startswith("build failed at [python 3/3] RUN"), error
    tail = "\n".join(error["alternatives"])
    assert "uv python install" in tail and "404" in tail, tail
    assert not image_exists(tag)
    got = [s for s in srv.seen if s.startswith("GET /pbs/")]
    assert got, srv.seen
    pattern = (r"GET /pbs/(\d{8})/cpython-3\.11\.\d+%2B\1-" + re.escape(standalone.arch)
               + r"-unknown-linux-gnu-install_only_stripped\.tar\.gz 404")
    assert any(re.fullmatch(pattern, s) for s in got), got


@pytest.mark.docker
@pytest.mark.slow
def test_standalone_bundle_builds_offline(standalone: Archive, proxy: Proxy,
                                          fixtures: Path, tmp_path: Path
                                          ) -> None:
    """`envbuild bundle --python-source standalone` behind the proxy (uv's download through it),
    then `make --from-bundle` in a network namespace with no route: the system image carries
    /opt/python (the uv stage ran on the connected side), the offline steps make the venv from it
    with --network none and pip --require-hashes, and the image validates."""
    out = tmp_path / "bundle"
    tag = "envbuild-standalone/bundle:offline"
    root = tmp_path / "site"
    root.mkdir()
    system_ref = None
    try:
        with serve(root, "127.0.0.1") as srv:
            site(root, standalone, srv.url)
            r = run_cli("bundle", "--target", "cpu", "--torch", "2.13.0", "--python", "3.11",
                        "--python-source", "standalone", "--os", "debian12",
                        "--base-image", BASE, "--without", "torchvision", "--without",
                        "torchaudio", "--wheelhouse", str(fixtures), "--ca-cert",
                        str(SYSTEM_CA), "--proxy", proxy.url, "--out", str(out), "--json",
                        env={"UV_PYTHON_DOWNLOADS_JSON_URL": f"{srv.url}/downloads.json"},
                        timeout=1800)
        assert r.returncode == 0, (r.stderr + r.stdout)[-4000:]
        system_ref = str(json.loads(r.stdout)["system_ref"])
        assert PASSWORD not in r.stdout + r.stderr
        context = (out / "context" / "Dockerfile").read_text()
        assert "uv python install" not in context and "AS python" not in context, context
        assert "/opt/python/3.11/bin/python3.11 -m venv" in context, context
        docker("image", "rm", system_ref)  # the offline side loads it from system.tar
        p = subprocess.run([*_unshare(), sys.executable, "-m", "envbuild", "make",
                            "--from-bundle", str(out), "--tag", tag, "--json", "--rebuild"],
                           capture_output=True, text=True, cwd=ROOT, timeout=1800,
                           env=dict(os.environ))
        assert p.returncode == 0, (p.stderr + p.stdout)[-3000:]
        summary = json.loads(p.stdout)
        assert summary["network"] == "none"
        assert summary["validation"]["summary"]["status"] == "pass", summary["validation"]
        log = Path(summary["log"]).read_text()
        assert " --network none " in log.splitlines()[1]
        q = docker("run", "--rm", "--entrypoint", "python", tag, "-c",
                   "import sys, torch; print(sys.base_prefix)")
        assert q.stdout.strip() == "/opt/python/3.11", q.stdout + q.stderr
    finally:
        for ref in (tag, system_ref):
            if ref and image_exists(ref):
                docker("image", "rm", ref, check=False)
