"""A three-image team on the real engine and a real local registry: build, push, lock, check,
shared torch layer, attached reports, incremental rebuild, --locked, and a moved base tag.

One module-scoped family build (the slow part, ~4 min here) is shared by every test; the tests
that change the registry run last (file order).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import run_cli
from tests.support.docker_helpers import BASE, SYSTEM_CA, docker
from tests.support.junit import assert_matches_team
from tests.support.junit import read as read_junit
from tests.support.registry import start_registry
from tests.support.team import TeamRun

pytestmark = [pytest.mark.docker, pytest.mark.slow]

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"


@dataclass
class Family(TeamRun):
    base: str = ""
    base_digest: str = ""
    public_key: Path = Path()


def team_file(registry: str, base: str, wheelhouse: Path, extra: str = "") -> str:
    return f"""
[defaults]
registry = "{registry}/team-test"
target = "cpu"
torch = "2.13.0"
python = "3.11"
os = "debian12"
without = ["torchvision", "torchaudio"]
base_image = "{base}"
wheelhouse = "{wheelhouse}"
ca_cert = "{SYSTEM_CA}"
pip = ["six"]

[image.team-a]
{extra}
[image.team-b]
pip = ["idna"]

[image.team-c]
pip = ["attrs"]
"""


def manifest(registry: str, ref: str) -> dict[str, Any]:
    repo, _, reference = ref.removeprefix(f"{registry}/").partition("@")
    if not reference:
        repo, _, reference = repo.rpartition(":")
    req = urllib.request.Request(f"http://{registry}/v2/{repo}/manifests/{reference}",
                                 headers={"Accept": DOCKER_MANIFEST})
    return dict(json.loads(urllib.request.urlopen(req, timeout=10).read()))


def blobs(m: dict[str, Any]) -> dict[str, int]:
    return {m["config"]["digest"]: m["config"]["size"],
            **{x["digest"]: x["size"] for x in m["layers"]}}


PASSWORD = "team-signing-s3cret"


def signing_key(d: Path, password: str) -> Path:
    """A password-encrypted PEM EC P-256 key (as openssl genpkey writes it) and its public key
    beside it (KEY.pub)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    k = ec.generate_private_key(ec.SECP256R1())
    (d / "envbuild.key").write_bytes(k.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(password.encode())))
    (d / "envbuild.pub").write_bytes(k.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return d / "envbuild.key"


@pytest.fixture(scope="module")
def family(fixtures: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Family]:
    proc, reg = start_registry(tmp_path_factory.mktemp("team-registry"))
    base = f"{reg}/team-test-base/debian:bookworm"
    made: list[str] = [base]
    try:
        docker("tag", BASE, base)
        pushed = docker("push", base).stdout
        base_digest = re.findall(r"digest: (sha256:[0-9a-f]{64})", pushed)[0]
        made.append(f"{base.rpartition(':')[0]}@{base_digest}")  # the repo digest push added
        d = tmp_path_factory.mktemp("team")
        (d / "envbuild.toml").write_text(team_file(reg, base, fixtures))
        key = signing_key(tmp_path_factory.mktemp("keys"), PASSWORD)
        r = run_cli("team", "build", "--file", str(d / "envbuild.toml"), "--push", "--json",
                    "--sign-key", str(key), env={"ENVBUILD_SIGNING_PASSWORD": PASSWORD},
                    timeout=1800)
        assert r.returncode == 0, r.stderr[-4000:]
        data = json.loads(r.stdout)
        for i in data["images"]:
            made += [i["tag"], i["tag"].removeprefix(f"{reg}/team-test/")]
        assert PASSWORD not in r.stdout + r.stderr
        yield Family(reg, d, data, r.stderr, base=base, base_digest=base_digest,
                     public_key=key.with_suffix(".pub"))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        docker("rmi", *made, check=False)


def test_family_builds_validates_pushes_and_locks(family: Family) -> None:
    images = family.data["images"]
    assert [i["name"] for i in images] == ["team-a", "team-b", "team-c"]
    for i in images:
        assert set(i) >= {"name", "tag", "digest", "spec_hash", "base_image", "base_digest",
                          "validation", "pushed", "seconds"}
        assert i["validation"]["status"] == "pass" and i["pushed"] is True
        assert i["digest"].startswith("sha256:") and i["base_digest"] == family.base_digest
    assert family.data["lock"] == str(family.dir / "envbuild.lock")
    lock = family.lock
    assert sorted(lock["image"]) == ["team-a", "team-b", "team-c"]
    for i in images:
        e = lock["image"][i["name"]]
        assert (e["digest"], e["tag"], e["base_digest"]) == (i["digest"], i["tag"],
                                                              family.base_digest)
        assert e["validation"]["status"] == "pass"
        assert any(p.startswith("six==") for p in e["packages"])
        assert e["pins"] == ["torch==2.13.0+cpu"]
    assert any(p.startswith("idna==") for p in lock["image"]["team-b"]["packages"])
    # progress per image on stderr
    for name in ("team-a", "team-b", "team-c"):
        assert f"[{name}] pass" in family.stderr


def test_each_image_has_its_sbom_and_provenance(family: Family, fixtures: Path) -> None:
    """envbuild-out/NAME/ next to the team file: a schema-valid CycloneDX SBOM that lists torch
    at the image's version, the OS's Python at its dpkg version and the base by digest, and a
    provenance whose wheel hashes are the wheelhouse files' own."""
    import hashlib

    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    wheelhouse = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                  for p in fixtures.glob("*.whl")}
    for i in family.data["images"]:
        out = family.dir / "envbuild-out" / i["name"]
        assert i["attestation"]["sbom"] == str(out / "sbom.cdx.json")
        text = (out / "sbom.cdx.json").read_text()
        assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
        bom = json.loads(text)
        parts = {c["name"]: c for c in bom["components"]}
        freeze = dict(p.split("==") for p in family.lock["image"][i["name"]]["packages"])
        assert parts["torch"]["version"] == freeze["torch"] == "2.13.0+cpu"
        dpkg = docker("run", "--rm", i["tag"], "dpkg-query", "-W", "-f", "${Version}",
                      "python3.11").stdout
        assert parts["python3.11"]["version"] == dpkg and dpkg
        assert parts["python3.11"]["purl"].startswith("pkg:deb/debian/python3.11@")
        assert parts["cpython"]["version"].startswith("3.11.")
        base = next(c for c in bom["components"] if c["bom-ref"] == "base-image")
        assert base["version"] == family.base_digest and base["type"] == "container"
        assert not [c for c in bom["components"] if c["name"].startswith("nvidia-")]
        assert bom["metadata"]["component"]["type"] == "container"
        stmt = json.loads((out / "provenance.intoto.json").read_text())
        assert stmt["subject"][0]["digest"]["sha256"] == i["image_id"].removeprefix("sha256:")
        build = stmt["predicate"]["buildDefinition"]
        # the spec the image was built from (make's, with the inspected base), as its label says
        labels = json.loads(docker("image", "inspect", i["tag"], "--format",
                                   "{{json .Config.Labels}}").stdout)
        assert build["externalParameters"]["spec_hash"] == labels["io.envbuild.spec-hash"]
        deps = build["resolvedDependencies"]
        assert deps[0]["digest"]["sha256"] == family.base_digest.removeprefix("sha256:")
        hashed = {d["name"]: d["digest"]["sha256"] for d in deps
                  if "digest" in d and d["name"].endswith(".whl")}
        from_wheelhouse = {n: h for n, h in hashed.items() if n in wheelhouse}
        assert {n for n in from_wheelhouse if n.startswith("torch-")}, hashed
        assert from_wheelhouse == {n: wheelhouse[n] for n in from_wheelhouse}
        assert any(n.startswith("six-") for n in hashed)  # from PyPI, hashed by pip too
        report = json.loads((out / "validation.json").read_text())
        assert report["summary"]["fail"] == 0


def test_the_family_shares_its_torch_layer_in_the_registry(family: Family) -> None:
    ms = [manifest(family.registry, f"{i['tag'].rpartition(':')[0]}@{i['digest']}")
          for i in family.data["images"]]
    one = sum(blobs(ms[0]).values())
    stored = sum({k: v for m in ms for k, v in blobs(m).items()}.values())
    assert stored < 1.3 * one, (stored, one)
    biggest = max(ms[0]["layers"], key=lambda x: x["size"])["digest"]  # the torch stack
    assert all(biggest in {x["digest"] for x in m["layers"]} for m in ms)


def test_attached_reports_read_back_and_check_passes(family: Family) -> None:
    for i in family.data["images"]:
        r = run_cli("validate", "--from-registry", i["tag"], "--json")
        assert r.returncode == 0, r.stderr
        report = json.loads(r.stdout)
        assert report["summary"]["fail"] == 0 and report["summary"]["pass"] > 0
    junit = family.dir / "junit" / "team-check.xml"
    r = run_cli("team", "check", "--file", str(family.dir / "envbuild.toml"), "--json",
                "--junit", str(junit))
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(r.stdout)
    assert data["problems"] == []
    assert [x["report"]["status"] for x in data["images"]] == ["pass"] * 3
    assert_matches_team(read_junit(junit), data)  # --junit of the same run
    assert [c["status"] for c in data["checks"]] == ["pass"] * 9  # present, report, base


def test_verify_passes_on_every_pushed_image(family: Family) -> None:
    """What team build attached (report, SBOM, signed provenance, the image's cosign signature)
    verifies with the signer's public key, the report passes, and the SBOM's packages are the
    lock's."""
    for i in family.data["images"]:
        assert set(i["attached"]) == {"report", "sbom", "provenance", "signature"}
        r = run_cli("verify", f"{i['tag'].rpartition(':')[0]}@{i['digest']}", "--key",
                    str(family.public_key), "--lock", str(family.dir / "envbuild.lock"),
                    "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        checks = {c["id"]: c["status"] for c in json.loads(r.stdout)["checks"]}
        assert checks == dict.fromkeys(
            ["provenance.attached", "sbom.attached", "report.attached", "provenance.signature",
             "provenance.subject", "sbom.digest", "report.digest", "report.status",
             "image.signature", "sbom.lock"], "pass"), checks
    # the files written beside them are the attached ones: the provenance's byproducts
    a = family.data["images"][0]
    sbom = (family.dir / "envbuild-out" / a["name"] / "sbom.cdx.json").read_bytes()
    prov = json.loads((family.dir / "envbuild-out" / a["name"] /
                       "provenance.intoto.json").read_text())
    import hashlib

    recorded = {b["name"]: b["digest"]["sha256"] for b in prov["predicate"]["runDetails"]
                ["byproducts"]}
    assert recorded["sbom.cdx.json"] == hashlib.sha256(sbom).hexdigest()


def test_one_more_package_rebuilds_without_reinstalling_torch(family: Family,
                                                              fixtures: Path,
                                                              tmp_path: Path) -> None:
    d = tmp_path / "changed"
    shutil.copytree(family.dir, d)
    fresh = f"packaging; python_version > '0.{time.time_ns()}'"  # never in the build cache
    (d / "envbuild.toml").write_text(team_file(family.registry, family.base, fixtures,
                                               f"pip = [{json.dumps(fresh)}]\n"))
    plan = json.loads(run_cli("team", "plan", "--file", str(d / "envbuild.toml"),
                              "--json").stdout)
    assert list(plan["lock_changes"]) == ["team-a"]  # only the changed image
    assert {"layer": "torch", "images": ["team-a", "team-b", "team-c"]}.items() <= \
        next(s for s in plan["shared_layers"] if s["layer"] == "torch").items()
    r = run_cli("team", "build", "--file", str(d / "envbuild.toml"), "--only", "team-a",
                "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    (a,) = json.loads(r.stdout)["images"]
    docker("rmi", a["tag"], check=False)
    log = Path(a["log"]).read_text()
    step = re.search(r"^#(\d+) \[.*\] RUN .*-r /opt/envbuild/requirements\.txt", log, re.M)
    assert step is not None
    assert re.search(rf"^#{step.group(1)} CACHED$", log, re.M), "torch was reinstalled"
    own = re.search(r"^#(\d+) \[.*\] RUN .*-r /opt/envbuild/user-requirements\.txt", log, re.M)
    assert own is not None and not re.search(rf"^#{own.group(1)} CACHED$", log, re.M)


def test_locked_rebuild_uses_base_digest_and_exact_versions(family: Family) -> None:
    r = run_cli("team", "build", "--file", str(family.dir / "envbuild.toml"), "--locked",
                "--only", "team-b", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads(r.stdout)
    assert data["lock"] is None  # --locked reproduces the lock, never rewrites it
    (b,) = data["images"]
    assert b["base_image"] == f"{family.registry}/team-test-base/debian@{family.base_digest}"
    try:
        out = docker("run", "--rm", b["tag"], "cat", "/opt/envbuild/team-requirements.txt",
                     "/opt/envbuild/user-requirements.txt").stdout
    finally:
        docker("rmi", b["tag"], check=False)
    locked = {p.split("==")[0].lower(): p for p in family.lock["image"]["team-b"]["packages"]}
    assert locked["six"] in out and locked["idna"] in out


# -- these change the registry: last ----------------------------------------------------------
def test_a_moved_base_tag_is_caught(family: Family) -> None:
    other = family.data["images"][0]["tag"]  # any other image, pushed under the base's tag
    docker("tag", other, family.base)
    moved = docker("push", family.base).stdout
    new = re.findall(r"digest: (sha256:[0-9a-f]{64})", moved)[0]
    assert new != family.base_digest
    r = run_cli("team", "check", "--file", str(family.dir / "envbuild.toml"))
    assert r.returncode == 1
    for name in ("team-a", "team-b", "team-c"):
        assert (f"problem: {name}: the base image tag {family.base} moved: locked "
                f"{family.base_digest}, now {new}") in r.stderr
    data = json.loads(run_cli("team", "check", "--file", str(family.dir / "envbuild.toml"),
                              "--json").stdout)
    assert len(data["problems"]) == 3 and data["images"][0]["base_digest_now"] == new


def test_a_vanished_image_and_tag_are_caught(family: Family) -> None:
    reg = family.registry
    a = family.data["images"][0]
    repo = a["tag"].removeprefix(f"{reg}/").rpartition(":")[0]
    base_now = subprocess.run(["curl", "-sI", "-H", f"Accept: {DOCKER_MANIFEST}",
                               f"http://{reg}/v2/team-test-base/debian/manifests/bookworm"],
                              capture_output=True, text=True, check=True).stdout
    base_digest = re.findall(r"Docker-Content-Digest: (sha256:[0-9a-f]{64})", base_now)[0]
    for path in (f"{repo}/manifests/{a['digest']}",
                 f"team-test-base/debian/manifests/{base_digest}"):
        urllib.request.urlopen(urllib.request.Request(f"http://{reg}/v2/{path}",
                                                      method="DELETE"), timeout=10)
    r = run_cli("team", "check", "--file", str(family.dir / "envbuild.toml"), "--json")
    assert r.returncode == 1
    problems = json.loads(r.stdout)["problems"]
    assert f"team-a: {reg}/{repo}@{a['digest']} is gone from the registry" in problems
    assert any(p.startswith("team-b: the base image tag") and "vanished" in p
               and family.base_digest in p for p in problems)
