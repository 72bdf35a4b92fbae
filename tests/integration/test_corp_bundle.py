"""Air-gapped builds on a real engine: `envbuild bundle` on the connected side, then
`envbuild make --from-bundle` run inside a network namespace with no route (`unshare -n`).

What this proves: the envbuild process and its docker client have no network at all (the netns);
every RUN step of the build has none either (`docker build --network none`, in the build log's
command line); pip installs torch from the bundle's wheelhouse in hash-checking mode (every line
of requirements.txt has --hash); the system image comes from the bundle's archive (its tag is
removed first, so it is loaded and its id checked); the image validates. The daemon itself stays
in the host's namespace (it must: it is the engine), so "no network" means no network for envbuild
and for every build step, not for dockerd. A per-run user name makes the offline steps run for
real instead of coming from BuildKit's cache.

User packages (--pip): a PEP 503 index served on docker's bridge gateway holds a pure-Python wheel
`envbuild-probe-a` that needs `envbuild-probe-b`, published as an sdist only, built by an in-tree
PEP 517 backend with no build requirements (so no PyPI is needed). `bundle` collects both as
wheels (the sdist built in a container of the system image); the offline build installs them
with --no-index --require-hashes under the build's constraints, and the image imports both.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tarfile
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest

from envbuild.features.bundle import to_oci_archive
from tests.support import ROOT, run_cli
from tests.support.corp_bundle import _unshare
from tests.support.docker_helpers import BASE, DOCKER, docker, image_exists
from tests.support.mirror import _gateway
from tests.support.mirror import simple_index as wheel_index
from tests.support.oci import docker_archive, layer_tar, read_oci_layout
from tests.support.served import serve

pytestmark = [pytest.mark.docker, pytest.mark.slow]


# --- the probe packages and their index ---------------------------------------------------------

_WHEEL_TAG = (b"Wheel-Version: 1.0\nGenerator: envbuild-test\nRoot-Is-Purelib: true\n"
              b"Tag: py3-none-any\n")
# The in-tree backend of envbuild-probe-b: stdlib only, `requires = []`, so pip builds the sdist
# with nothing fetched (no setuptools).
_BACKEND = '''import base64, hashlib, zipfile

WHEEL = "envbuild_probe_b-1.0-py3-none-any.whl"
INFO = "envbuild_probe_b-1.0.dist-info"


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {
        "envbuild_probe_b/__init__.py": b'B = "b"\\n',
        INFO + "/METADATA": b"Metadata-Version: 2.1\\nName: envbuild-probe-b\\nVersion: 1.0\\n",
        INFO + "/WHEEL": b"Wheel-Version: 1.0\\nGenerator: envbuild-test\\n"
                         b"Root-Is-Purelib: true\\nTag: py3-none-any\\n",
    }
    rows = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        rows.append(path + ",sha256=" + digest.decode() + "," + str(len(data)))
    files[INFO + "/RECORD"] = ("\\n".join(rows + [INFO + "/RECORD,,"]) + "\\n").encode()
    with zipfile.ZipFile(wheel_directory + "/" + WHEEL, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return WHEEL
'''


def _record(files: dict[str, bytes], record: str) -> bytes:
    rows = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{path},sha256={digest},{len(data)}")
    return ("\n".join([*rows, f"{record},,"]) + "\n").encode()


def probe_wheel(directory: Path) -> Path:
    """envbuild-probe-a 1.0: a pure-Python wheel that needs envbuild-probe-b."""
    info = "envbuild_probe_a-1.0.dist-info"
    files = {
        "envbuild_probe_a/__init__.py": b'from envbuild_probe_b import B\nA = "a" + B\n',
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: envbuild-probe-a\nVersion: 1.0\n"
                            b"Requires-Dist: envbuild-probe-b==1.0\n",
        f"{info}/WHEEL": _WHEEL_TAG,
    }
    files[f"{info}/RECORD"] = _record(files, f"{info}/RECORD")
    path = directory / "envbuild_probe_a-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def probe_sdist(directory: Path) -> Path:
    """envbuild-probe-b 1.0: an sdist only, with an in-tree PEP 517 backend (backend-path)."""
    root = "envbuild_probe_b-1.0"
    files = {
        f"{root}/PKG-INFO": b"Metadata-Version: 2.1\nName: envbuild-probe-b\nVersion: 1.0\n",
        f"{root}/pyproject.toml": b'[build-system]\nrequires = []\nbuild-backend = '
                                  b'"probe_backend"\nbackend-path = ["_backend"]\n',
        f"{root}/_backend/probe_backend.py": _BACKEND.encode(),
    }
    path = directory / f"{root}.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tf.addfile(info, io.BytesIO(data))
    return path


def simple_index(files: Path, root: Path) -> None:
    """A PEP 503 index of every wheel and sdist in `files` under root/simple, with #sha256=."""
    (root / "files").symlink_to(files.resolve())
    projects: dict[str, list[Path]] = {}
    for f in sorted([*files.glob("*.whl"), *files.glob("*.tar.gz")]):
        projects.setdefault(re.sub(r"[-_.]+", "-", f.name.split("-", 1)[0]).lower(), []).append(f)
    (root / "simple").mkdir()
    for name, found in projects.items():
        (root / "simple" / name).mkdir()
        rows = "".join(
            f'<a href="{html.escape(f"../../files/{f.name}#sha256={_sha256(f)}")}">'
            f"{html.escape(f.name)}</a>\n" for f in found)
        (root / "simple" / name / "index.html").write_text(f"<html><body>\n{rows}</body></html>\n")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class Index:
    url: str
    seen: list[str]


def _serve(root: Path) -> Iterator[Index]:
    """Serve root (root/simple, root/files) on docker's bridge gateway: containers reach it."""
    with serve(root, _gateway()) as served:
        yield Index(served.url + "/simple", served.seen)


@pytest.fixture(scope="module")
def probe_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    files = tmp_path_factory.mktemp("probe-files")
    probe_wheel(files)
    probe_sdist(files)
    root = tmp_path_factory.mktemp("probe-index")
    simple_index(files, root)
    yield from _serve(root)


@pytest.fixture(scope="module")
def torch_index(fixtures: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[Index]:
    """The fixture wheelhouse (torch 2.13.0+cpu cp311 and what it needs) as a PEP 503 index in the
    PyTorch layout (+cpu local versions): what `bundle` downloads the torch stack from."""
    root = tmp_path_factory.mktemp("torch-index")
    wheel_index(fixtures, root)
    yield from _serve(root)


COMMON = ["--target", "cpu", "--torch", "2.13.0", "--python", "3.11", "--os", "debian12",
          "--without", "torchvision", "--without", "torchaudio", "--base-image", BASE]


@pytest.fixture(scope="module")
def bundle(torch_index: Index, probe_index: Index,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, object]]]:
    """One bundle with no --wheelhouse: the torch stack is downloaded from torch_index, the
    --pip packages from probe_index (the offline build below proves both sets work)."""
    out = tmp_path_factory.mktemp("bundle") / "b"
    user = "corp" + uuid.uuid4().hex[:8]  # a new system image: the offline steps really run
    r = run_cli("bundle", *COMMON, "--torch-index-url", torch_index.url,
                "--torch-index-kind", "pytorch", "--user", user,
                "--pip", "envbuild-probe-a", "--pip-index-url", probe_index.url,
                "--out", str(out), "--json")
    assert r.returncode == 0, (r.stderr + r.stdout)[-3000:]
    data = json.loads(r.stdout)
    data["user"] = user
    try:
        yield out, data
    finally:
        docker("image", "rm", str(data["system_ref"]), check=False)


def test_bundle_contents(bundle: tuple[Path, dict[str, object]]) -> None:
    out, data = bundle
    meta = json.loads((out / "bundle.json").read_text())
    assert meta["system_id"] == data["system_id"] and (out / "system.tar").is_file()
    reqs = [x for x in (out / "context" / "requirements.txt").read_text().splitlines()
            if x and not x.startswith("#")]
    assert reqs and all(" --hash=sha256:" in x for x in reqs)
    assert any(x.startswith("torch==2.13.0+cpu ") for x in reqs)
    assert (out / "matrix" / "torch.toml").is_file()
    assert (out / "context" / "Dockerfile").read_text().count("apt-get") == 0
    assert set(meta["files"]) >= {"system.tar", "context/requirements.txt",
                                  "matrix/torch.toml"}
    # torch's requirements.txt is the torch wheelhouse alone: user packages leave that layer be
    assert not any("probe" in x for x in reqs)


def test_the_torch_stack_was_downloaded_from_the_index(
        bundle: tuple[Path, dict[str, object]], torch_index: Index, fixtures: Path
) -> None:
    """No --wheelhouse: every wheel the index serves for torch 2.13.0+cpu came down (torch and
    all it needs), byte for byte, each pinned with its sha256; the output says where from."""
    out, data = bundle
    meta = json.loads((out / "bundle.json").read_text())
    served = {f.name: _sha256(f) for f in fixtures.glob("*.whl")}
    assert meta["torch_wheels"] == served and data["wheels"] == sorted(served)
    assert meta["torch_source"] == data["torch_source"] == {
        "from": "index", "index_url": torch_index.url, "index_kind": "pytorch"}
    fetched = {unquote(x) for x in torch_index.seen}
    for name, digest in served.items():
        assert _sha256(out / "context" / "wheelhouse" / name) == digest
        assert f"GET /files/{name} 200" in fetched, (name, sorted(fetched))
    torch = served["torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"]
    reqs = (out / "context" / "requirements.txt").read_text().splitlines()
    assert f"torch==2.13.0+cpu --hash=sha256:{torch}" in reqs
    assert torch_index.url not in (out / "context" / "Dockerfile").read_text()


def test_system_tar_is_an_oci_image_layout(bundle: tuple[Path, dict[str, object]]) -> None:
    """system.tar read as the OCI image-layout spec says (index.json -> manifest -> config and
    layers, every blob's digest checked): its config is the system image's id, bundle.json
    records the same digests, and the base the system image was built FROM with its digest (the
    local test base has no registry digest: its image id)."""
    out, data = bundle
    meta = json.loads((out / "bundle.json").read_text())
    found = read_oci_layout(out / "system.tar")
    oci = meta["system_oci"]
    assert found["config"] == oci["config_digest"] == meta["system_id"] == data["system_id"]
    assert found["manifest"] == oci["manifest_digest"] and found["layers"] == oci["layer_digests"]
    assert found["name"] == oci["name"] == f"docker.io/{data['system_ref']}"
    assert found["repo_tags"] == [data["system_ref"]] and data["system_oci"] == oci
    base_id = docker("image", "inspect", "--format", "{{.Id}}", BASE).stdout.strip()
    assert meta["base"] == data["base"] == {"ref": BASE, "digest": base_id, "kind": "image_id"}


def _ctr() -> list[str]:
    """containerd's own client, on dockerd's containerd (or a system one)."""
    exe = shutil.which("ctr")
    for sock in ("/run/docker/containerd/containerd.sock", "/run/containerd/containerd.sock"):
        if exe and Path(sock).exists() and subprocess.run(
                [exe, "--address", sock, "--timeout", "10s", "version"], capture_output=True,
                timeout=30).returncode == 0:
            return [exe, "--address", sock]
    pytest.skip("no containerd client (ctr) with a reachable containerd here")


def test_containerd_reads_system_tar_as_oci(bundle: tuple[Path, dict[str, object]]) -> None:
    """An independent OCI reader: containerd imports system.tar by its index.json (the image is
    the OCI manifest by its digest) and unpacks it, which checks every layer against the config's
    diff_ids. In a namespace of its own, removed after."""
    out, data = bundle
    found = read_oci_layout(out / "system.tar")
    ctr = [*_ctr(), "-n", f"envbuild-oci-test-{uuid.uuid4().hex[:8]}"]
    try:
        r = subprocess.run([*ctr, "images", "import", str(out / "system.tar")],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        listed = subprocess.run([*ctr, "images", "ls"], capture_output=True, text=True,
                                check=True).stdout.splitlines()[1:]
        assert [ln.split()[:3] for ln in listed] == [[
            f"docker.io/{data['system_ref']}", "application/vnd.oci.image.manifest.v1+json",
            str(found["manifest"])]], listed
    finally:
        subprocess.run([*ctr, "images", "rm", "--sync", f"docker.io/{data['system_ref']}"],
                       capture_output=True)
        subprocess.run([*ctr[:-2], "namespaces", "rm", ctr[-1]], capture_output=True)


def test_docker_load_reads_the_layers_from_the_oci_blobs(docker_engine: None,
                                                         tmp_path: Path) -> None:
    """dockerd 20.10 loads a converted archive whose layers it has never seen, so it must read
    them from the blobs/sha256/ paths manifest.json names: the image id is the config digest and
    a file of the top layer comes back out of a container of it."""
    marker = uuid.uuid4().hex
    ref = f"envbuild-oci-test/load:{marker[:12]}"
    layers = [layer_tar({"etc/envbuild-oci": marker.encode()}),
              layer_tar({"usr/envbuild-oci": marker.encode() * 2})]
    image_id = docker_archive(tmp_path / "in.tar", layers, ref=ref)
    oci = to_oci_archive(tmp_path / "in.tar", tmp_path / "system.tar", ref)
    try:
        loaded = docker("load", "-i", str(tmp_path / "system.tar"))
        assert f"Loaded image: {ref}" in loaded.stdout, loaded.stdout + loaded.stderr
        assert docker("image", "inspect", "--format", "{{.Id}}", ref).stdout.strip() == \
            oci.config == image_id
        cid = docker("create", ref, "none").stdout.strip()
        try:
            got = subprocess.run([DOCKER, "cp", f"{cid}:/usr/envbuild-oci", "-"],
                                 capture_output=True, check=True, timeout=60).stdout
        finally:
            docker("rm", cid, check=False)
        with tarfile.open(fileobj=io.BytesIO(got)) as tf:
            f = tf.extractfile("envbuild-oci")
            assert f is not None and f.read() == marker.encode() * 2
    finally:
        docker("image", "rm", ref, check=False)


PROBES = ["envbuild_probe_a-1.0-py3-none-any.whl", "envbuild_probe_b-1.0-py3-none-any.whl"]


def test_user_packages_collected_as_wheels_with_hashes(
        bundle: tuple[Path, dict[str, object]], probe_index: Index) -> None:
    out, data = bundle
    meta = json.loads((out / "bundle.json").read_text())
    assert data["user_wheels"] == PROBES and meta["pip"] == ["envbuild-probe-a"]
    wheelhouse = out / "context" / "wheelhouse"
    # the sdist was built into a wheel on the connected side; only wheels travel
    assert sorted(meta["user_wheels"]) == PROBES
    assert not list(wheelhouse.glob("*.tar.gz")) and "GET /files/envbuild_probe_b-1.0.tar.gz" \
        in " ".join(probe_index.seen)
    lines = [x for x in (out / "context" / "user-requirements.txt").read_text().splitlines()
             if not x.startswith("#")]
    assert lines == [f"envbuild-probe-a==1.0 --hash=sha256:{_sha256(wheelhouse / PROBES[0])}",
                     f"envbuild-probe-b==1.0 --hash=sha256:{_sha256(wheelhouse / PROBES[1])}"]
    assert {meta["user_wheels"][w] for w in PROBES} == \
        {meta["files"][f"context/wheelhouse/{w}"] for w in PROBES}
    dockerfile = (out / "context" / "Dockerfile").read_text()
    assert probe_index.url not in dockerfile and "--index-url" not in dockerfile
    assert "--no-index --find-links /run/envbuild/wheelhouse --require-hashes -r " \
        "/opt/envbuild/user-requirements.txt -c /opt/envbuild/constraints.txt" in dockerfile


def test_offline_make_in_a_netns_with_no_route(bundle: tuple[Path, dict[str, object]]) -> None:
    out, data = bundle
    ns = _unshare()
    probe = subprocess.run([*ns, sys.executable, "-c",
                            "import socket; socket.create_connection(('1.1.1.1', 80), 3)"],
                           capture_output=True, text=True)
    assert probe.returncode != 0 and "unreachable" in probe.stderr.lower(), probe.stderr
    docker("image", "rm", str(data["system_ref"]))  # must come from the bundle's archive
    tag = "envbuild-corp/bundle:offline"
    try:
        p = subprocess.run([*ns, sys.executable, "-m", "envbuild", "make", "--from-bundle",
                            str(out), "--tag", tag, "--json", "--rebuild"],
                           capture_output=True, text=True, cwd=ROOT, timeout=1800,
                           env=dict(os.environ))
        assert p.returncode == 0, (p.stderr + p.stdout)[-3000:]
        summary = json.loads(p.stdout)
        assert summary["network"] == "none" and summary["validation"]["summary"]["status"] == \
            "pass", summary["validation"]["summary"]
        assert image_exists(str(data["system_ref"]))  # loaded from system.tar
        log = Path(summary["log"]).read_text()
        assert " --network none " in log.splitlines()[1]
        assert "Processing /run/envbuild/wheelhouse/torch-2.13.0+cpu" in log, log[-2000:]
        # the user layer: offline, hash-checked, constrained; both probes from the bundle
        user_step = [ln for ln in log.splitlines() if "RUN " in ln and "user-requirements" in ln]
        assert user_step and "pip install --no-index --find-links /run/envbuild/wheelhouse " \
            "--require-hashes -r /opt/envbuild/user-requirements.txt -c " \
            "/opt/envbuild/constraints.txt" in user_step[0], user_step
        for wheel in PROBES:
            assert f"Processing /run/envbuild/wheelhouse/{wheel}" in log, log[-2000:]
        imported = docker("run", "--rm", "--network", "none", tag, "python", "-c",
                          "import envbuild_probe_a as a, envbuild_probe_b as b; print(a.A, b.B)")
        assert imported.stdout.split() == ["ab", "b"]
    finally:
        docker("image", "rm", tag, check=False)


def _offline_user_pip(out: Path) -> list[str]:
    """The offline Dockerfile's user-layer pip options, exactly as the offline build runs them."""
    m = re.search(r"/bin/pip install (.*) -r /opt/envbuild/user-requirements\.txt -c "
                  r"/opt/envbuild/constraints\.txt$", (out / "context" / "Dockerfile").read_text(),
                  re.MULTILINE)
    assert m is not None
    return shlex.split(m.group(1))


def test_the_user_layer_is_hash_checked(bundle: tuple[Path, dict[str, object]],
                                        tmp_path: Path) -> None:
    """The user layer's exact pip command, run in a fresh venv of the system image with no
    network: with the bundle's wheels it installs both probes under the constraints; with one
    wheel changed by a byte (same name and size) pip refuses it by its hash."""
    out, data = bundle
    args = _offline_user_pip(out)
    assert "--require-hashes" in args and "--no-index" in args
    wheels = tmp_path / "wheelhouse"
    wheels.mkdir()
    for w in PROBES:
        shutil.copyfile(out / "context" / "wheelhouse" / w, wheels / w)
    script = ("python3 -m venv /tmp/v && /tmp/v/bin/pip install " + shlex.join(args)
              + " -r /in/user-requirements.txt -c /in/constraints.txt"
              " && /tmp/v/bin/python -c 'import envbuild_probe_a as a; print(a.A)'")

    def run() -> subprocess.CompletedProcess[str]:
        return docker("run", "--rm", "--network", "none", "-v",
                      f"{wheels}:/run/envbuild/wheelhouse:ro", "-v",
                      f"{out / 'context'}:/in:ro", str(data["system_ref"]), "sh", "-c", script,
                      check=False)

    good = run()
    assert good.returncode == 0 and good.stdout.split()[-1] == "ab", good.stdout + good.stderr
    blob = bytearray((wheels / PROBES[1]).read_bytes())
    blob[-1] ^= 1
    (wheels / PROBES[1]).write_bytes(bytes(blob))
    bad = run()
    assert bad.returncode != 0
    assert "DO NOT MATCH THE HASHES" in bad.stderr and "envbuild-probe-b==1.0" in bad.stderr, \
        bad.stderr


def test_a_user_package_that_cannot_be_found(bundle: tuple[Path, dict[str, object]],
                                             fixtures: Path, probe_index: Index,
                                             tmp_path: Path) -> None:
    """One line with pip's reason and a hint, exit 1, nothing in --out or next to it, and the
    collection container is gone. The system image is the fixture's (same spec, OS packages and
    user: the --pip packages are not part of it)."""
    _, data = bundle
    out = tmp_path / "parent" / "b"
    r = run_cli("bundle", *COMMON, "--wheelhouse", str(fixtures), "--user", str(data["user"]),
                "--pip", "envbuild-probe-a", "--pip", "envbuild-probe-missing",
                "--pip-index-url", probe_index.url, "--out", str(out))
    assert r.returncode == 1, r.stderr
    first = r.stderr.splitlines()[0]
    assert first == "error: collecting the --pip packages as wheels failed: No matching " \
        "distribution found for envbuild-probe-missing", r.stderr
    assert "hint: " in r.stderr and "--pip-index-url" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists() and list((tmp_path / "parent").iterdir()) == []
    left = docker("ps", "-a", "--filter", "label=io.envbuild.role=bundle-collect", "-q").stdout
    assert left.strip() == ""
    # the same system image as the fixture's: --pip packages do not change it
    system_id = docker("image", "inspect", "--format", "{{.Id}}", str(data["system_ref"]))
    assert system_id.stdout.strip() == data["system_id"]


def test_a_changed_bundle_is_refused(bundle: tuple[Path, dict[str, object]]) -> None:
    out, _ = bundle
    req = out / "context" / "requirements.txt"
    original = req.read_bytes()
    try:
        req.write_bytes(original + b"evil==1.0\n")
        r = run_cli("make", "--from-bundle", str(out))
        assert r.returncode == 2, r.stderr
        assert "does not match its recorded sha256" in r.stderr
    finally:
        req.write_bytes(original)


def test_not_a_bundle(tmp_path: Path) -> None:
    r = run_cli("make", "--from-bundle", str(tmp_path))
    assert r.returncode == 2 and "no readable bundle.json" in r.stderr, r.stderr


def _closed_port_url() -> str:
    """An index URL on docker's bridge gateway where nothing listens."""
    with socket.socket() as s:
        s.bind((_gateway(), 0))
        host, port = s.getsockname()[:2]
    return f"http://{host}:{port}/simple"


@pytest.mark.parametrize("case", ["lacks the pin", "unreachable"])
def test_a_torch_pin_the_index_lacks(bundle: tuple[Path, dict[str, object]],
                                     probe_index: Index, tmp_path: Path, case: str) -> None:
    """An index without torch 2.13.0+cpu (the probe index), or none listening: one line with
    pip's reason and a hint, exit 1, nothing in --out or next to it, no container left. Cheap:
    the system image is the fixture's (the torch index is not part of it)."""
    _, data = bundle
    out = tmp_path / "parent" / "b"
    url = probe_index.url if case == "lacks the pin" else _closed_port_url()
    r = run_cli("bundle", *COMMON, "--torch-index-url", url,
                "--torch-index-kind", "pytorch", "--user", str(data["user"]), "--out", str(out))
    assert r.returncode == 1, r.stderr
    first = r.stderr.splitlines()[0]
    assert first == "error: collecting the torch stack as wheels failed: No matching " \
        "distribution found for torch==2.13.0+cpu", r.stderr
    hint = next(ln for ln in r.stderr.splitlines() if ln.startswith("hint: "))
    assert "--torch-index-url" in hint and "Traceback" not in r.stderr
    assert ("cannot be reached" in hint) == (case == "unreachable"), hint
    assert not out.exists() and list((tmp_path / "parent").iterdir()) == []
    left = docker("ps", "-a", "--filter", "label=io.envbuild.role=bundle-collect", "-q").stdout
    assert left.strip() == ""
    system_id = docker("image", "inspect", "--format", "{{.Id}}", str(data["system_ref"]))
    assert system_id.stdout.strip() == data["system_id"]
