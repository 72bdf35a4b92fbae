"""A locally served stand-in for python-build-standalone, for the `--python-source standalone`
build tests (tests/integration/test_standalone.py says what it proves and what it cannot).

`archive()` makes (once; cached under the work dir, keyed by the script and the base image) an
"install_only"-layout CPython tarball with fixtures/standalone/make-cpython.sh in a throw-away
container of the base image. `downloads_json()` writes the list uv reads from
UV_PYTHON_DOWNLOADS_JSON_URL: uv's own download-metadata format, one entry per archive, its sha256
given (uv checks it); tests/support/served.py serves it over HTTP and records the requests.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tests.support import FIXTURES

SCRIPT = FIXTURES / "standalone" / "make-cpython.sh"
DOCKER = "/usr/bin/docker"


@dataclass(frozen=True)
class Archive:
    path: Path
    version: str  # X.Y.Z, what the interpreter reports
    arch: str  # uname -m in the container
    sha256: str

    @property
    def name(self) -> str:
        """The file name python-build-standalone would give it (build tag: `envbuildtest`)."""
        return (f"cpython-{self.version}+envbuildtest-{self.arch}-unknown-linux-gnu-"
                "install_only.tar.gz")


def _base_id(base: str) -> str:
    p = subprocess.run([DOCKER, "image", "inspect", "--format", "{{.Id}}", base],
                       capture_output=True, text=True, check=True, timeout=60)
    return p.stdout.strip()


def archive(work: Path, base: str, python: str = "3.11") -> Archive:
    """The stand-in archive for `python` (X.Y) built from `base` (a Debian image that ships it)."""
    key = hashlib.sha256(SCRIPT.read_bytes() + _base_id(base).encode() + python.encode())
    out = work / "standalone-python" / key.hexdigest()[:16]
    if not (out / "cpython.tar.gz").is_file():
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            p = subprocess.run(
                [DOCKER, "run", "--rm", "--name", f"envbuild-standalone-fixture-{os.getpid()}",
                 "-v", f"{tmp}:/out", "-v", f"{SCRIPT}:/make-cpython.sh:ro", base,
                 "bash", "/make-cpython.sh", python],
                capture_output=True, text=True, timeout=900)
            if p.returncode != 0:
                raise RuntimeError(f"make-cpython.sh failed: {(p.stderr + p.stdout)[-3000:]}")
            shutil.rmtree(out, ignore_errors=True)
            tmp.rename(out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    tar = out / "cpython.tar.gz"
    return Archive(tar, (out / "VERSION").read_text().strip(), (out / "ARCH").read_text().strip(),
                   hashlib.sha256(tar.read_bytes()).hexdigest())


def downloads_json(a: Archive, base_url: str) -> dict[str, Any]:
    """uv's download list (the format of uv's crates/uv-python/download-metadata.json) with the
    one stand-in archive, at base_url/<its python-build-standalone file name>."""
    major, minor, patch = (int(x) for x in a.version.split("."))
    return {f"cpython-{a.version}-linux-{a.arch}-gnu": {
        "name": "cpython", "arch": {"family": a.arch, "variant": None}, "os": "linux",
        "libc": "gnu", "major": major, "minor": minor, "patch": patch, "prerelease": "",
        "url": f"{base_url}/{quote(a.name)}", "sha256": a.sha256, "variant": None,
        "build": "envbuildtest"}}


def site(root: Path, a: Archive, url: str) -> Path:
    """Lay out root as the served site: the archive and downloads.json. Returns the JSON's path."""
    shutil.copyfile(a.path, root / a.name)
    path = root / "downloads.json"
    path.write_text(json.dumps(downloads_json(a, url), indent=1))
    return path
