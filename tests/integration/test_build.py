"""The whole pipeline on a real Docker engine: build, validate, cache, secrets, failures, push.

Uses a local Debian base (debootstrap + docker import, `make fixtures`) and an offline wheelhouse
of torch 2.13.0 (CPU). These tests never skip in CI: a missing engine or fixture fails them.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ROOT, Cli, run_cli, work_dir
from tests.support.docker_helpers import DOCKER, SYSTEM_CA, cpu_args, docker, image_exists

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def make(wheelhouse: Path, *extra: str) -> tuple[Cli, dict[str, object]]:
    r = run_cli("make", *cpu_args(wheelhouse, *extra), "--json")
    try:
        data = json.loads(r.stdout)
    except json.JSONDecodeError:
        data = {}
    return r, data


def leftovers() -> list[str]:
    places = [Path(tempfile.gettempdir()), work_dir()]  # contexts go next to the wheelhouse
    return sorted(p.name for d in places for p in d.iterdir()
                  if p.name.startswith(("envbuild-build-", "envbuild-ctx-")))


@pytest.fixture(scope="module")
def cpu_image(fixtures: Path) -> Iterator[str]:
    tag = "envbuild-test/cpu:pipeline"
    r, data = make(fixtures, "--tag", tag, "--rebuild")
    assert r.returncode == 0, r.stderr[-3000:]
    report = data["validation"]
    assert isinstance(report, dict)
    yield tag
    docker("rmi", tag, check=False)  # the module's image: nothing of it stays on the engine


def test_make_builds_and_validates(cpu_image: str, fixtures: Path) -> None:
    labels = json.loads(docker("image", "inspect", cpu_image, "--format",
                               "{{json .Config.Labels}}").stdout)
    spec = json.loads(labels["io.envbuild.spec"])
    assert spec["torch"] == "2.13.0" and spec["variant"] == "cpu"
    assert labels["io.envbuild.spec-hash"]
    assert labels["org.opencontainers.image.version"] == "2.13.0-cpu-py3.11"
    # import torch works in the image, as the non-root default user
    p = docker("run", "--rm", cpu_image, "python", "-c",
               "import os, torch; print(torch.__version__, os.getuid())")
    version, uid = p.stdout.split()
    assert version.startswith("2.13.0") and uid == "1000"
    # the validator in the image: every check passes or skips with a reason
    r = run_cli("validate", cpu_image, "--json")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    report = json.loads(r.stdout)
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    assert "fail" not in statuses.values()
    for c in report["checks"]:
        if c["status"] == "skip":
            assert c["reason"]
    for must in ("facts.torch", "expect.torch_version", "expect.flavor", "numerics.matmul",
                 "train.smoke", "dist.allreduce", "image.no_driver_userspace"):
        assert statuses[must] == "pass", must


def test_second_make_is_a_cache_hit(cpu_image: str, fixtures: Path) -> None:
    r, data = make(fixtures, "--tag", cpu_image, "--no-validate")
    assert r.returncode == 0, r.stderr
    image = data["image"]
    assert isinstance(image, dict) and image["cached"] is True
    # the size estimate sits beside the real size, within 10% for this CPU image (issue 14)
    size = data["size"]
    assert isinstance(size, dict) and size["real_bytes"] == image["size_bytes"]
    assert size["estimate"]["complete"], size["estimate"]["unknown"]
    assert abs(size["error_pct"]) <= 10, size


def test_make_sbom_writes_sbom_provenance_and_report(cpu_image: str, fixtures: Path,
                                                     tmp_path: Path) -> None:
    """--sbom on a cache hit: no build, the cached validation reused, the three files written."""
    out = tmp_path / "attested"
    r, data = make(fixtures, "--tag", cpu_image, "--sbom", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    att = data["attestation"]
    assert isinstance(att, dict) and att["sbom"] == str(out / "sbom.cdx.json")
    assert att["components"] > 100
    bom = json.loads((out / "sbom.cdx.json").read_text())
    torch = next(c for c in bom["components"] if c["name"] == "torch")
    assert torch["version"] == "2.13.0+cpu" and torch["hashes"][0]["alg"] == "SHA-256"
    stmt = json.loads((out / "provenance.intoto.json").read_text())
    image = data["image"]
    assert isinstance(image, dict)
    assert stmt["subject"] == [{"name": cpu_image,
                                "digest": {"sha256": image["image_id"].removeprefix("sha256:")}}]
    assert json.loads((out / "validation.json").read_text()) == data["validation"]
    text = run_cli("make", *cpu_args(fixtures, "--tag", cpu_image, "--no-validate", "--sbom",
                                     str(out)))
    assert text.returncode == 0 and f"sbom      {out}/sbom.cdx.json" in text.stdout
    assert not (out / "validation.json").exists()  # no report now: the old one is not left


def test_validation_fails_on_broken_torch(cpu_image: str, tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text(
        f"FROM {cpu_image}\nRUN rm -f /opt/venv/lib/python3.11/site-packages/torch/lib/"
        "libtorch_cpu.so\n")
    broken = "envbuild-test/cpu:broken"
    docker("build", "-q", "-t", broken, str(tmp_path))
    try:
        r = run_cli("validate", broken, "--json")
        assert r.returncode == 1
        report = json.loads(r.stdout)
        failed = [c["id"] for c in report["checks"] if c["status"] == "fail"]
        assert "facts.torch" in failed
        text = run_cli("validate", broken)
        assert text.returncode == 1 and "facts.torch" in text.stdout
    finally:
        docker("rmi", "-f", broken, check=False)


def test_secret_ca_never_lands_anywhere(fixtures: Path, tmp_path: Path) -> None:
    """PyPI inside the build needs this machine's proxy CA; a canary rides along in the bundle."""
    canary = f"ENVBUILD-CANARY-{os.getpid()}-{int(time.time())}"
    bundle = tmp_path / "ca.pem"
    bundle.write_text(SYSTEM_CA.read_text() + f"\n# {canary}\n")
    tag = "envbuild-test/cpu:secret"
    r, data = make(fixtures, "--tag", tag, "--rebuild", "--pip", "six==1.16.0",
                   "--ca-cert", str(bundle))
    try:
        assert r.returncode == 0, r.stderr[-3000:]
        assert docker("run", "--rm", tag, "python", "-c", "import six; print(six.__version__)"
                      ).stdout.strip() == "1.16.0"
        history = docker("history", "--no-trunc", tag).stdout
        assert canary not in history
        assert canary not in r.stdout and canary not in r.stderr
        log = Path(data["image"]["log"])  # type: ignore[index]
        assert log.is_file() and canary not in log.read_text()
        assert "ca.pem" not in json.dumps(data["validation"])
        assert canary not in json.dumps(data)
        saved = subprocess.run([DOCKER, "save", tag], capture_output=True, check=True,
                               timeout=600).stdout
        # positive control: the scan does read the files inside the layers
        assert _tar_contains(saved, b"Utilities for writing code that runs on Python 2 and 3")
        assert _tar_contains(saved, canary.encode()) is False
        assert _tar_contains(saved, b"ENVBUILD-CANARY") is False
    finally:
        docker("rmi", "-f", tag, check=False)


def _tar_contains(blob: bytes, needle: bytes) -> bool:
    with tarfile.open(fileobj=io.BytesIO(blob)) as outer:
        for member in outer.getmembers():
            if not member.isfile():
                continue
            f = outer.extractfile(member)
            if f is None:
                continue
            data = f.read()
            if needle in data:
                return True
            if member.name.endswith(".tar"):
                with tarfile.open(fileobj=io.BytesIO(data)) as layer:
                    for m in layer.getmembers():
                        if not m.isfile():
                            continue
                        lf = layer.extractfile(m)
                        if lf is not None and needle in lf.read():
                            return True
    return False


def test_failed_build_leaves_no_tag(fixtures: Path) -> None:
    tag = "envbuild-test/cpu:broken-build"
    before = leftovers()
    r, data = make(fixtures, "--tag", tag, "--rebuild", "--apt", "no-such-package-envbuild")
    assert r.returncode == 1
    error = data["error"]
    assert isinstance(error, dict)
    assert error["message"].startswith("build failed at ")
    assert "Unable to locate package" in "\n".join(error["alternatives"])
    assert error["alternatives"][-1].startswith("full log: ")
    assert "--apt" in error["hint"]
    assert "Traceback" not in r.stderr
    text = run_cli("make", *cpu_args(fixtures, "--tag", tag, "--apt",
                                     "no-such-package-envbuild"))
    assert text.returncode == 1 and "\nerror: build failed at" in text.stderr
    assert not image_exists(tag)
    assert leftovers() == before


def _bridge_gateway() -> str:
    out = docker("network", "inspect", "bridge", "--format",
                 "{{range .IPAM.Config}}{{.Gateway}} {{.Subnet}}{{end}}").stdout.split()
    if out and all(c.isdigit() or c == "." for c in out[0]):
        return out[0]
    import ipaddress
    nets = [ipaddress.ip_network(x) for x in out if "/" in x]
    assert nets, f"no IPv4 subnet on docker's bridge network: {out}"
    return str(next(nets[0].hosts()))


def test_ctrl_c_during_build_exits_130_without_tag(fixtures: Path) -> None:
    """Ctrl-C while a build step runs: the step is held open by an index that accepts the
    connection and never answers, so the interrupt lands mid-build whatever the machine's load
    (waiting for the first RUN line raced the last steps, a second on a warm cache)."""
    import threading

    tag = "envbuild-test/cpu:interrupted"
    before = leftovers()
    srv = socket.socket()
    srv.bind((_bridge_gateway(), 0))
    srv.listen(8)
    reached = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = srv.accept()
                held.append(conn)
                reached.set()

    threading.Thread(target=accept, daemon=True).start()
    host, port = srv.getsockname()
    argv = [sys.executable, "-m", "envbuild", "make", *cpu_args(fixtures), "--tag", tag,
            "--rebuild", "--pip", f"six==1.16.0; python_version > '0.{time.time_ns()}'",
            "--pip-index-url", f"http://{host}:{port}/simple", "--ca-cert", str(SYSTEM_CA)]
    p = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        assert reached.wait(240), "the build's pip step never reached the index"
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
    finally:
        srv.close()
        for conn in held:
            conn.close()
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    assert not image_exists(tag)
    assert leftovers() == before


def test_missing_daemon_is_a_clean_error(fixtures: Path) -> None:
    r = run_cli("make", *cpu_args(fixtures), "--no-validate",
                env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert r.returncode == 3
    assert "cannot reach the Docker engine" in r.stderr and "Traceback" not in r.stderr


def test_client_without_buildkit_is_refused(fixtures: Path, tmp_path: Path) -> None:
    fake = tmp_path / "docker"
    fake.write_text("#!/bin/sh\n[ \"$1\" = version ] && echo 28.2.2 && exit 0\n"
                    "echo 'docker: unknown command: docker buildx' >&2; exit 1\n")
    fake.chmod(0o755)
    out = tmp_path / "ctx"
    assert run_cli("render", *cpu_args(fixtures)[:-2], "--out", str(out)).returncode == 0
    r = run_cli("build", str(out), "--rebuild", env={"ENVBUILD_DOCKER": str(fake)})
    assert r.returncode == 3
    assert "no docker client that can run BuildKit builds" in r.stderr
    assert "buildx" in r.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("registry")
    port = _free_port()
    cfg = root / "config.yml"
    cfg.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\n"
                   f"http:\n  addr: 127.0.0.1:{port}\n")
    proc = subprocess.Popen(["docker-registry", "serve", str(cfg)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_push_to_local_registry(cpu_image: str, fixtures: Path, registry: str,
                                tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    assert run_cli("render", *cpu_args(fixtures)[:-2], "--out", str(ctx)).returncode == 0
    r = run_cli("build", str(ctx), "--tag", cpu_image, "--push", registry, "--json")
    assert r.returncode == 0, r.stderr
    pushed = json.loads(r.stdout)["pushed"]
    assert pushed == f"{registry}/{cpu_image}"
    repo, _, tag = cpu_image.partition(":")
    tags = json.loads(urllib.request.urlopen(f"http://{registry}/v2/{repo}/tags/list",
                                             timeout=10).read())
    assert tag in tags["tags"]
    # the pushed image carries the spec labels
    manifest = urllib.request.Request(f"http://{registry}/v2/{repo}/manifests/{tag}", headers={
        "Accept": "application/vnd.docker.distribution.manifest.v2+json"})
    config_digest = json.loads(urllib.request.urlopen(manifest, timeout=10).read())["config"][
        "digest"]
    config = json.loads(urllib.request.urlopen(
        f"http://{registry}/v2/{repo}/blobs/{config_digest}", timeout=10).read())
    assert "io.envbuild.spec" in config["config"]["Labels"]
    docker("rmi", pushed)  # the registry's tag on the engine, kept as `docker push` keeps it


def test_push_to_a_registry_that_is_down(cpu_image: str, fixtures: Path, tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    assert run_cli("render", *cpu_args(fixtures)[:-2], "--out", str(ctx)).returncode == 0
    down = f"127.0.0.1:{_free_port()}"
    t = time.monotonic()
    r = run_cli("build", str(ctx), "--tag", cpu_image, "--push", down)
    assert r.returncode in (1, 3)
    assert f"push of {down}/{cpu_image} failed" in r.stderr and "Traceback" not in r.stderr
    assert "local image is kept" in r.stderr
    assert time.monotonic() - t < 60
    assert image_exists(cpu_image)
    assert not image_exists(f"{down}/{cpu_image}")  # the tag made for the push is gone with it


def test_validation_timeout_removes_the_container(cpu_image: str) -> None:
    t = time.monotonic()
    r = run_cli("validate", cpu_image, "--timeout", "2")
    assert r.returncode == 3
    assert "did not finish within 2 s" in r.stderr and "Traceback" not in r.stderr
    assert time.monotonic() - t < 60
    left = docker("ps", "-a", "--filter", "label=io.envbuild.role", "--format", "{{.ID}}").stdout
    assert left.strip() == ""


def test_ctrl_c_during_validation_removes_the_container(cpu_image: str) -> None:
    p = subprocess.Popen([sys.executable, "-m", "envbuild", "validate", cpu_image], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait for the validation container to exist
        running = docker("ps", "--filter", "label=io.envbuild.role=validate", "--format",
                         "{{.ID}}").stdout.strip()
        if running:
            break
        time.sleep(0.2)
    assert running, "the validation container never started"
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "Traceback" not in err
    left = docker("ps", "-a", "--filter", "label=io.envbuild.role", "--format", "{{.ID}}").stdout
    assert left.strip() == ""


def test_unreachable_base_image_fails_with_a_hint(fixtures: Path) -> None:
    """No image registry here: the base cannot be pulled, and the error says what to do."""
    tag = "envbuild-test/cpu:no-base"
    r = run_cli("make", "--target", "cpu", "--torch", "2.13.0", "--os", "debian12", "--without",
                "torchvision", "--without", "torchaudio", "--base-image",
                "registry.invalid/nothing/here:1", "--wheelhouse", str(fixtures), "--tag", tag,
                "--progress", "plain", "--no-validate")
    assert r.returncode == 1
    # make reads the base before rendering (its OS, Python, glibc): that is where it fails now
    assert "error: cannot read the base image registry.invalid/nothing/here:1" in r.stderr \
        and "hint: the base image cannot be pulled" in r.stderr, r.stderr[-1500:]
    assert "Traceback" not in r.stderr
    assert not image_exists(tag)


def _registry_tags(registry: str, repo: str) -> list[str]:
    try:
        data = json.loads(urllib.request.urlopen(f"http://{registry}/v2/{repo}/tags/list",
                                                 timeout=10).read())
    except urllib.error.HTTPError as exc:  # the repository does not exist (yet)
        assert exc.code == 404
        return []
    return list(data.get("tags") or [])


def test_default_tags_differ_per_build_input(cpu_image: str, fixtures: Path) -> None:
    """Two images that differ only in user packages get different default tags: the later
    build never silently takes the earlier one's tag."""
    first, a = make(fixtures, "--no-validate")
    assert first.returncode == 0, first.stderr[-2000:]
    second, b = make(fixtures, "--no-validate", "--pip", "six==1.16.0", "--ca-cert",
                     str(SYSTEM_CA))
    tag_a, tag_b = a["image"]["tag"], b["image"]["tag"]  # type: ignore[index]
    try:
        assert second.returncode == 0, second.stderr[-2000:]
        assert tag_a != tag_b
        for tag in (tag_a, tag_b):
            assert tag.startswith("envbuild/cpu:torch2.13.0-py3.11-"), tag
        ids = {t: docker("image", "inspect", t, "--format", "{{.Id}}").stdout.strip()
               for t in (tag_a, tag_b)}
        assert ids[tag_a] == a["image"]["image_id"]  # type: ignore[index]
        assert ids[tag_b] == b["image"]["image_id"] != ids[tag_a]  # type: ignore[index]
        # the same input again: the same tag, no build
        again, c = make(fixtures, "--no-validate")
        assert again.returncode == 0 and c["image"]["tag"] == tag_a  # type: ignore[index]
        assert c["image"]["cached"] is True  # type: ignore[index]
    finally:
        docker("rmi", tag_a, tag_b, check=False)


def test_push_only_a_validated_image(cpu_image: str, fixtures: Path, registry: str,
                                     tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    repo = "envbuild-test/cpu"
    # validation fails (--require-gpu on a host without a GPU): nothing is pushed
    tag = f"{repo}:push-gated"
    r = run_cli("make", *cpu_args(fixtures, "--tag", tag, "--push", registry, "--require-gpu"),
                "--json", env=env)
    try:
        assert r.returncode == 1, r.stderr[-2000:]
        data = json.loads(r.stdout)
        assert data["pushed"] is None and data["push_skipped"] == "validation failed"
        assert data["validation"]["summary"]["fail"] > 0
        assert "not pushed: validation failed" in r.stderr
        assert "push-gated" not in _registry_tags(registry, repo)
        # no validation, no push, unless asked for
        r = run_cli("make", *cpu_args(fixtures, "--tag", tag, "--push", registry,
                                      "--no-validate"), env=env)
        assert r.returncode == 2 and "--push-unvalidated" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
        assert "push-gated" not in _registry_tags(registry, repo)
        # a passing validation: validated first, then pushed, and said so
        r = run_cli("make", *cpu_args(fixtures, "--tag", tag, "--push", registry), env=env)
        assert r.returncode == 0, r.stderr[-2000:]
        assert f"pushed    {registry}/{tag}  (validation passed)" in r.stdout
        assert r.stdout.index("passed, 0 failed") < r.stdout.index("pushed ")
        assert "push-gated" in _registry_tags(registry, repo)
        # the opt-out
        opt = f"{repo}:push-unvalidated"
        r = run_cli("make", *cpu_args(fixtures, "--tag", opt, "--push", registry,
                                      "--no-validate", "--push-unvalidated"), "--json", env=env)
        assert r.returncode == 0, r.stderr[-2000:]
        assert json.loads(r.stdout)["pushed"] == f"{registry}/{opt}"
        assert "push-unvalidated" in _registry_tags(registry, repo)
    finally:
        docker("rmi", tag, f"{registry}/{tag}", f"{repo}:push-unvalidated",
               f"{registry}/{repo}:push-unvalidated", check=False)


def test_build_push_validates_first(cpu_image: str, fixtures: Path, registry: str,
                                    tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    assert run_cli("render", *cpu_args(fixtures)[:-2], "--out", str(ctx)).returncode == 0
    r = run_cli("build", str(ctx), "--tag", cpu_image, "--push", registry, "--json",
                env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["validation"]["summary"]["fail"] == 0 and data["validation"]["checks"]
    assert data["pushed"] == f"{registry}/{cpu_image}"
    docker("rmi", data["pushed"])  # the registry's tag on the engine, as `docker push` keeps it


def test_warm_make_reuses_a_passing_validation(cpu_image: str, fixtures: Path,
                                               tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    args = cpu_args(fixtures, "--tag", cpu_image)
    first = run_cli("make", *args, "--json", env=env)
    assert first.returncode == 0, first.stderr[-2000:]
    v1 = json.loads(first.stdout)["validation"]
    assert v1["cached"] is False
    second = run_cli("make", *args, "--json", env=env)
    assert second.returncode == 0, second.stderr[-2000:]
    data = json.loads(second.stdout)
    v2 = data["validation"]
    assert v2["cached"] is True and v2["validated_at"] == v1["validated_at"]
    assert v2["checks"] == v1["checks"] and data["image"]["cached"] is True
    text = run_cli("make", *args, env=env)
    assert text.returncode == 0
    assert "validation  cached pass (" in text.stdout and "same image and host" in text.stdout
    forced = run_cli("make", *args, "--revalidate", "--json", env=env)
    assert forced.returncode == 0
    assert json.loads(forced.stdout)["validation"]["cached"] is False
    # a failing report is never reused: both runs validate, both fail
    for _ in range(2):
        failing = run_cli("make", *args, "--require-gpu", "--json", env=env)
        assert failing.returncode == 1
        assert json.loads(failing.stdout)["validation"]["cached"] is False


def test_make_without_target_builds_what_doctor_recommends(cpu_image: str,
                                                           fixtures: Path) -> None:
    doctor = run_cli("doctor", "--json")
    rec = json.loads(doctor.stdout)["recommendation"]
    assert rec["target"] == "cpu", "these tests run on a host without a GPU"
    args = cpu_args(fixtures, "--tag", cpu_image, "--no-validate")
    del args[0:2]  # no --target
    r = run_cli("make", *args, "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads(r.stdout)
    assert data["spec"]["target"] == "cpu" and data["target_reason"] == rec["reason"]
    text = run_cli("make", *args)
    assert text.returncode == 0
    assert f"target    cpu: {rec['reason']}" in text.stdout and "doctor" in text.stdout


def test_make_out_keeps_the_context(cpu_image: str, fixtures: Path, tmp_path: Path) -> None:
    out = tmp_path / "kept"
    r, data = make(fixtures, "--tag", cpu_image, "--no-validate", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    assert data["context"] == str(out)
    assert (out / "Dockerfile").is_file() and (out / "spec.json").is_file()
    assert list((out / "wheelhouse").glob("torch-2.13.0*.whl"))
    # the kept context builds to the same image
    b = run_cli("build", str(out), "--tag", cpu_image, "--json")
    assert b.returncode == 0 and json.loads(b.stdout)["image_id"] == \
        data["image"]["image_id"]  # type: ignore[index]


def test_quiet_prints_only_the_result(cpu_image: str, fixtures: Path, tmp_path: Path) -> None:
    for flag in ("--quiet", "-q"):
        r = run_cli("make", *cpu_args(fixtures, "--tag", cpu_image, "--no-validate", flag))
        assert r.returncode == 0, r.stderr
        assert r.stdout == f"{cpu_image}\n" and r.stderr == ""
    ctx = tmp_path / "ctx"
    assert run_cli("render", *cpu_args(fixtures)[:-2], "--out", str(ctx)).returncode == 0
    b = run_cli("build", str(ctx), "--tag", cpu_image, "-q")
    assert b.returncode == 0 and b.stdout == f"{cpu_image}\n" and b.stderr == "", b.stderr
    v = run_cli("validate", cpu_image, "--quiet")
    assert v.returncode == 0 and v.stdout == "" and v.stderr == "", v.stderr
    failing = run_cli("validate", cpu_image, "--quiet", "--require-gpu")
    assert failing.returncode == 1 and failing.stdout == ""
    assert failing.stderr.startswith("fail  device.")
