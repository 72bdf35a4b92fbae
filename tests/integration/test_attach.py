"""Attachments on a real registry (Debian's docker-registry: no referrers API, so the fallback
tag's index is what lists them), signed with a real key, then `envbuild verify`: it passes on
what was attached and fails, naming the problem, on a tampered attachment, one about another
digest, another key and a lock that disagrees. No engine: tiny images pushed through the client
(the team build module checks the same on a real built image)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from envbuild.core import attachments
from envbuild.engine import registry
from envbuild.features.attach import attach_all
from envbuild.features.attach import load_signer as signer_from
from tests.support import run_cli
from tests.support.registry import push_tiny_image, serve, start_registry

REPORT = {"schema": 1, "checks": [{"id": "facts.torch", "status": "pass", "title": "torch"}],
          "summary": {"pass": 1, "fail": 0, "warn": 0, "skip": 0}}
FREEZE = ["numpy==2.3.1", "torch==2.13.0+cpu", "pip==25.1"]


def sbom(freeze: list[str]) -> dict[str, Any]:
    return {"bomFormat": "CycloneDX", "specVersion": "1.6", "version": 1,
            "components": [{"type": "library", "name": n, "version": v,
                            "purl": f"pkg:pypi/{n}@{v}"}
                           for n, _, v in (x.partition("==") for x in freeze)]}


def provenance(name: str) -> dict[str, Any]:
    return attachments.statement(name, "sha256:" + "0" * 64, attachments.SLSA_PROVENANCE,
                                 {"buildDefinition": {"buildType": "https://envbuild.dev/b/v1"},
                                  "runDetails": {"builder": {"id": "test"}}})


@pytest.fixture(scope="module")
def reg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from serve(start_registry(tmp_path_factory.mktemp("attach-registry")))


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    d = tmp_path_factory.mktemp("keys")
    out = []
    for name in ("signer", "other"):
        k = ec.generate_private_key(ec.SECP256R1())
        (d / f"{name}.key").write_bytes(k.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        (d / f"{name}.pub").write_bytes(k.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        out.append(d / f"{name}.pub")
    return d / "signer.key", out[0], out[1]


def lock_file(tmp: Path, digest: str, freeze: list[str]) -> Path:
    lines = "\n".join(f'  "{x}",' for x in freeze)
    p = tmp / "envbuild.lock"
    p.write_text(f'[image.cpu]\ndigest = "{digest}"\npackages = [\n{lines}\n]\n')
    return p


def attached(reg: str, repo: str, salt: str, key: Path | None) -> tuple[str, str]:
    digest = push_tiny_image(reg, repo, "v1", salt=salt)
    image = f"{reg}/{repo}"
    attach_all(f"{image}:v1", digest, json.dumps(REPORT).encode(),
               json.dumps(sbom(FREEZE)).encode(), provenance(image),
               signer_from(key) if key else None)
    return image, digest


def verify(*args: str) -> tuple[int, dict[str, Any]]:
    r = run_cli("verify", *args, "--json")
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, json.loads(r.stdout)


def failing(data: dict[str, Any]) -> dict[str, str]:
    return {c["id"]: c["message"] for c in data["checks"] if c["status"] == "fail"}


def test_signed_attachments_verify(reg: str, keys: tuple[Path, Path, Path],
                                   tmp_path: Path) -> None:
    key, pub, other = keys
    image, digest = attached(reg, "att/signed", "s", key)
    lock = lock_file(tmp_path, digest, FREEZE)
    rc, data = verify(f"{image}@{digest}", "--key", str(pub), "--lock", str(lock))
    assert rc == 0, data
    ids = {c["id"]: c["status"] for c in data["checks"]}
    assert ids == {"report.attached": "pass", "sbom.attached": "pass",
                   "provenance.attached": "pass", "provenance.signature": "pass",
                   "provenance.subject": "pass", "sbom.digest": "pass", "report.digest": "pass",
                   "image.signature": "pass", "sbom.lock": "pass", "report.status": "pass"}
    assert data["found_via"] == "tag"  # Debian's registry: the fallback tag's index
    # the text form says the same; a tag is resolved to the digest
    r = run_cli("verify", f"{image}:v1", "--key", str(pub), "--lock", str(lock))
    assert r.returncode == 0 and "verified: 10 passed" in r.stdout, r.stdout
    # the fallback index lists the three, and cosign's signature tag exists
    c = registry.client(reg)
    got = c.get_manifest(registry.Ref(reg, "att/signed", attachments.fallback_tag(digest)),
                         (attachments.OCI_INDEX,))
    assert got is not None
    kinds = sorted(m["artifactType"] for m in json.loads(got[0])["manifests"])
    assert kinds == sorted(attachments.KINDS)
    # cosign's own tags: the signature and the attestation (what cosign verify-attestation reads)
    for tag in (attachments.cosign_tag(digest), attachments.cosign_att_tag(digest)):
        assert c.head_manifest(registry.Ref(reg, "att/signed", tag)) is not None
    # another key: both signatures fail, by name
    rc, data = verify(f"{image}@{digest}", "--key", str(other), "--lock", str(lock))
    assert rc == 1 and set(failing(data)) == {"provenance.signature", "image.signature"}
    # no key: verified as far as it goes, the signatures said unchecked
    rc, data = verify(f"{image}@{digest}", "--lock", str(lock))
    warned = {c["id"] for c in data["checks"] if c["status"] == "warn"}
    assert rc == 0 and warned == {"provenance.signature", "image.signature"}


def _replace_in_index(reg: str, repo: str, digest: str, kind: str, new_ref: str) -> None:
    """Point the fallback index's entry of kind at another artifact (an attacker with write
    access to the repository)."""
    c = registry.client(reg)
    tag = attachments.fallback_tag(digest)
    index = json.loads(c.get_manifest(registry.Ref(reg, repo, tag), (attachments.OCI_INDEX,))[0])
    new = c.head_manifest(registry.parse_ref(new_ref))
    assert new is not None
    ms = [m for m in index["manifests"] if attachments.KINDS[m["artifactType"]] != kind]
    ms.append({"mediaType": attachments.OCI_MANIFEST, "digest": new[0], "size": new[2],
               "artifactType": {v: k for k, v in attachments.KINDS.items()}[kind]})
    body = json.dumps({**index, "manifests": ms}).encode()
    assert c.put_manifest(repo, tag, body, attachments.OCI_INDEX).status == 201


def test_a_tampered_sbom_is_named(reg: str, tmp_path: Path) -> None:
    image, digest = attached(reg, "att/sbom", "t", None)
    lock = lock_file(tmp_path, digest, FREEZE)
    assert verify(f"{image}@{digest}", "--lock", str(lock))[0] == 0
    evil = sbom([*FREEZE[:1], "torch==2.13.0+evil", *FREEZE[2:]])
    ref = registry.attach_blob(f"{image}:v1", digest, attachments.SBOM_TYPE,
                               attachments.SBOM_TYPE, json.dumps(evil).encode(), "sbom.cdx.json")
    _replace_in_index(reg, "att/sbom", digest, "sbom", ref)
    rc, data = verify(f"{image}@{digest}", "--lock", str(lock))
    bad = failing(data)
    assert rc == 1 and set(bad) == {"sbom.digest", "sbom.lock"}, bad
    assert "changed after the build" in bad["sbom.digest"]
    assert "torch 2.13.0+evil (lock 2.13.0+cpu)" in bad["sbom.lock"]


def test_a_tampered_signed_provenance_is_named(reg: str, keys: tuple[Path, Path, Path],
                                               tmp_path: Path) -> None:
    key, pub, _ = keys
    image, digest = attached(reg, "att/prov", "p", key)
    c = registry.client(reg)
    index = json.loads(c.get_manifest(registry.Ref(reg, "att/prov",
                                                   attachments.fallback_tag(digest)),
                                      (attachments.OCI_INDEX,))[0])
    prov = next(m for m in index["manifests"]
                if m["artifactType"] == attachments.PROVENANCE_TYPE)
    m = json.loads(c.get_manifest(registry.Ref(reg, "att/prov", "", prov["digest"]))[0])
    env = json.loads(c.get_blob("att/prov", m["layers"][0]["digest"]))
    stmt = json.loads(base64.b64decode(env["payload"]))
    stmt["predicate"]["buildDefinition"]["buildType"] = "https://evil.example/b"
    env["payload"] = base64.b64encode(json.dumps(stmt).encode()).decode()
    ref = registry.attach_blob(f"{image}:v1", digest, attachments.PROVENANCE_TYPE,
                               m["layers"][0]["mediaType"], json.dumps(env).encode(),
                               "provenance.intoto.json")
    _replace_in_index(reg, "att/prov", digest, "provenance", ref)
    rc, data = verify(f"{image}@{digest}", "--key", str(pub))
    bad = failing(data)
    assert rc == 1 and set(bad) == {"provenance.signature"}, bad
    assert "tampered" in bad["provenance.signature"]


def test_an_attachment_about_another_digest_is_named(reg: str, tmp_path: Path) -> None:
    image, digest = attached(reg, "att/subject", "a", None)
    other = push_tiny_image(reg, "att/subject", "v2", salt="other")
    # the report of the other image, listed under this image's fallback tag
    ref = registry.attach_blob(f"{image}:v2", other, attachments.REPORT_TYPE,
                               attachments.REPORT_TYPE, json.dumps(REPORT).encode(),
                               "validation.json")
    _replace_in_index(reg, "att/subject", digest, "report", ref)
    rc, data = verify(f"{image}@{digest}")
    bad = failing(data)
    assert rc == 1 and "report.subject" in bad, bad
    assert other in bad["report.subject"] and f"not {digest}" in bad["report.subject"]
    # a provenance about another digest (attached to this one): its statement is checked too
    stmt = provenance(image)
    ref = registry.attach_blob(f"{image}:v1", digest, attachments.PROVENANCE_TYPE,
                               attachments.PROVENANCE_TYPE,
                               attachments.canonical(attachments.resubject(stmt, image, other)),
                               "provenance.intoto.json")
    _replace_in_index(reg, "att/subject", digest, "provenance", ref)
    bad = failing(verify(f"{image}@{digest}")[1])
    assert "provenance.subject" in bad and other[:19] in bad["provenance.subject"], bad


def test_nothing_attached_and_bad_input_are_clean(reg: str, keys: tuple[Path, Path, Path],
                                                  tmp_path: Path) -> None:
    digest = push_tiny_image(reg, "att/bare", "v1", salt="bare")
    rc, data = verify(f"{reg}/att/bare@{digest}")
    assert rc == 1 and set(failing(data)) == {"report.attached", "sbom.attached",
                                               "provenance.attached"}
    for args, code, text in [
        ((f"{reg}/att/none:v1",), 2, "not in the registry"),
        ((f"{reg}/att/bare@sha256:{'f' * 64}",), 1, "not in the registry"),
        ((f"{reg}/att/bare@sha256:xyz",), 2, "not a sha256 digest"),
        ((f"{reg}/att/bare@{digest}", "--key", "/dev/zero"), 2, "public key"),
        ((f"{reg}/att/bare@{digest}", "--key", str(keys[0])), 2, "not a PEM public key"),
        ((f"{reg}/att/bare@{digest}", "--lock", str(tmp_path / "nope.lock")), 2, "no such"),
    ]:
        r = run_cli("verify", *args)
        assert r.returncode == code and text in r.stderr, (args, r.returncode, r.stderr)
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) <= 2


def test_parallel_attaches_and_a_second_signer_keep_every_entry(reg: str,
                                                               keys: tuple[Path, Path, Path],
                                                               tmp_path: Path) -> None:
    """Two writers attaching to one digest at once (a parallel team build, overlapping CI runs)
    both stay listed in the fallback index; a second key's cosign signature is added beside the
    first, not over it."""
    from concurrent.futures import ThreadPoolExecutor

    key, pub, _ = keys
    digest = push_tiny_image(reg, "att/race", "v1", salt="race")
    image = f"{reg}/att/race"

    def attach(i: int) -> str:
        return registry.attach_blob(f"{image}:v1", digest, attachments.SBOM_TYPE,
                                    attachments.SBOM_TYPE, json.dumps({"n": i}).encode(),
                                    "sbom.cdx.json")

    with ThreadPoolExecutor(4) as pool:
        refs = list(pool.map(attach, range(8)))
    c = registry.client(reg)
    index = json.loads(c.get_manifest(registry.Ref(reg, "att/race",
                                                   attachments.fallback_tag(digest)),
                                      (attachments.OCI_INDEX,))[0])
    listed = {m["digest"] for m in index["manifests"]}
    assert {r.rpartition("@")[2] for r in refs} <= listed
    # a second signer (a CI key) signs too: both signatures verify
    other_key = tmp_path / "other.key"
    k = ec.generate_private_key(ec.SECP256R1())
    other_key.write_bytes(k.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    other_pub = tmp_path / "other.pub"
    other_pub.write_bytes(k.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    for signer in (key, other_key):
        attach_all(f"{image}:v1", digest, json.dumps(REPORT).encode(),
                   json.dumps(sbom(FREEZE)).encode(), provenance(image), signer_from(signer))
    for public in (pub, other_pub):
        rc, data = verify(f"{image}@{digest}", "--key", str(public))
        assert rc == 0, failing(data)


def test_a_multi_platform_image_is_verified_member_by_member(reg: str,
                                                             tmp_path: Path) -> None:
    amd = push_tiny_image(reg, "att/multi", "amd64", salt="amd")
    arm = push_tiny_image(reg, "att/multi", "arm64", salt="arm")
    index = registry.push_index(f"{reg}/att/multi:both", [("linux/amd64", amd),
                                                           ("linux/arm64", arm)])
    image = f"{reg}/att/multi"
    attach_all(f"{image}:amd64", amd, json.dumps(REPORT).encode(),
               json.dumps(sbom(FREEZE)).encode(), provenance(image))
    rc, data = verify(f"{image}:both")
    assert data["digest"] == index and data["platforms"] == ["linux/amd64", "linux/arm64"]
    bad = {(c.get("platform"), c["id"]) for c in data["checks"] if c["status"] == "fail"}
    assert rc == 1 and bad == {("linux/arm64", f"{k}.attached")
                               for k in ("report", "sbom", "provenance")}
