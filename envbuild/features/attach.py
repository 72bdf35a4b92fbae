"""Attach an image's report, SBOM and provenance to it in the registry (signed with a key the user
gives), and `envbuild verify`: read them back and judge them (envbuild/core/attachments.py).

The provenance records the SBOM's and the report's digests as byproducts, so its one signature
(a DSSE envelope) vouches for all three; a cosign simple-signing signature of the image itself
is pushed beside them when a key is given.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envbuild.common.errors import EXIT_FAILED, UsageError
from envbuild.common.proc import SIGNING_PASSWORD_ENV
from envbuild.common.record import record
from envbuild.core import attachments, signing

PASSWORD_ENV = SIGNING_PASSWORD_ENV  # the signing key's password; never logged, never inherited


def _key_bytes(path: Path, what: str, hint: str, flag: str) -> bytes:
    """The key file's bytes; a missing one is a UsageError (exit 2), as every other refusal."""
    from envbuild.common.boundedio import path_text, read_bytes

    try:
        return read_bytes(path, what, cap=signing.MAX_KEY_BYTES, hint=hint)
    except FileNotFoundError:
        raise UsageError(f"{flag} {path_text(path)}: no such file", hint) from None


def load_signer(path: Path) -> signing.Signer:
    """The signing key at path (PEM, EC P-256); its password from $ENVBUILD_SIGNING_PASSWORD,
    taken out of this process's environment once read: no child process inherits it."""
    pem = _key_bytes(path, "signing key", "give the PEM file of an EC P-256 private key "
                     "(--sign-key KEY.pem)", "--sign-key")
    password = os.environ.pop(PASSWORD_ENV, None)
    return signing.load_signer(pem, password.encode() if password else None)


def load_verifier(path: Path) -> signing.Verifier:
    return signing.load_verifier(_key_bytes(path, "public key", "give the PEM public key of "
                                            "the signing key (--key PUBLIC.pem)", "--key"))


def _blob(doc: object) -> bytes:
    return json.dumps(doc, indent=1, sort_keys=True).encode()


def _digest(blob: bytes) -> str:
    return "sha256:" + hashlib.sha256(blob).hexdigest()


def attach_all(pushed: str, digest: str, report: bytes | None, sbom: bytes | None,
               provenance: Mapping[str, Any] | None,
               signer: signing.Signer | None = None) -> dict[str, str]:
    """Push what there is of report and SBOM (their files' exact bytes) and provenance as
    artifacts of pushed@digest (the provenance about that digest, naming the other two by
    digest; a DSSE envelope when signed), and with a signer cosign's image signature.
    kind -> the artifact's reference."""
    from envbuild.engine import registry

    refs: dict[str, str] = {}
    made: dict[str, tuple[str, str]] = {}
    if report is not None:
        blob = report
        refs["report"] = registry.attach_blob(pushed, digest, attachments.REPORT_TYPE,
                                              attachments.REPORT_TYPE, blob, "validation.json",
                                              tag=registry.report_tag(digest))
        made[attachments.FILENAMES["report"]] = (_digest(blob), attachments.REPORT_TYPE)
    if sbom is not None:
        blob = sbom
        refs["sbom"] = registry.attach_blob(pushed, digest, attachments.SBOM_TYPE,
                                            attachments.SBOM_TYPE, blob,
                                            attachments.FILENAMES["sbom"])
        made[attachments.FILENAMES["sbom"]] = (_digest(blob), attachments.SBOM_TYPE)
    name = registry.parse_ref(pushed).name
    if provenance is not None:
        stmt = attachments.with_byproducts(attachments.resubject(provenance, name, digest),
                                           made)
        payload = attachments.canonical(stmt)
        if signer is None:
            blob, layer_type = payload, attachments.PROVENANCE_TYPE
        else:
            blob = _blob(signing.envelope(payload, signer))
            layer_type = signing.DSSE_MEDIA_TYPE
        refs["provenance"] = registry.attach_blob(pushed, digest, attachments.PROVENANCE_TYPE,
                                                  layer_type, blob,
                                                  attachments.FILENAMES["provenance"])
    if signer is not None and provenance is not None:  # where cosign verify-attestation looks
        registry.push_cosign_attestation(pushed, digest, blob, attachments.SLSA_PROVENANCE)
    if signer is not None:
        payload = signing.simple_signing_payload(name, digest)
        refs["signature"] = registry.push_cosign_signature(pushed, digest, payload,
                                                           signer.sign(payload))
    return refs


@record
class Verified:
    image: str
    digest: str
    via: str
    checks: list[attachments.Check]
    lock: str  # the lock file compared against ('' when none)
    platforms: tuple[str, ...] = ()  # an index: its members, each judged

    @property
    def exit_code(self) -> int:
        return EXIT_FAILED if any(c.status == "fail" for c in self.checks) else 0

    def to_json(self) -> dict[str, Any]:
        counts = {s: sum(c.status == s for c in self.checks)
                  for s in ("pass", "fail", "warn", "skip")}
        return {"image": self.image, "digest": self.digest, "found_via": self.via,
                "lock": self.lock or None, "platforms": list(self.platforms) or None,
                "checks": [c.to_json() for c in self.checks],
                "summary": counts, "ok": self.exit_code == 0}


def _entries(lock: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """Every (name, entry) of a lock, a multi-platform image's members included."""
    out: list[tuple[str, Mapping[str, Any]]] = []
    images = lock.get("image")
    for name, entry in (images.items() if isinstance(images, dict) else []):
        if not isinstance(entry, dict):
            continue
        plats = entry.get("platforms")
        for e in [entry, *(plats.values() if isinstance(plats, dict) else [])]:
            if isinstance(e, dict):
                out.append((str(name), e))
    return out


def _lock_entry(lock: Mapping[str, Any], digest: str) -> Mapping[str, Any] | None:
    return next((e for _, e in _entries(lock) if e.get("digest") == digest), None)


def _expect(lock_data: Mapping[str, Any] | None, digest: str,
            named: bool) -> attachments.Expect:
    if lock_data is None:
        return attachments.Expect(named=named)
    entry = _lock_entry(lock_data, digest)
    packages = entry.get("packages") if entry is not None else None
    listed = tuple(str(e.get("digest")) for _, e in _entries(lock_data) if e.get("digest"))
    return attachments.Expect(
        attachments.lock_packages(packages) if isinstance(packages, list) and packages else None,
        str(entry.get("signed_by") or "") if entry is not None else "", named, listed)


def verify(image: str, key: Path | None = None, lock: Path | None = None) -> Verified:
    """Read back what is attached to image (IMAGE@DIGEST; a tag is resolved first) and judge
    it: subjects, signatures, the provenance's record of the SBOM and the report, the report
    passing, the SBOM vs the lock (--lock, else ./envbuild.lock when it lists this digest). An
    index (a multi-platform image) is judged member by member."""
    from envbuild.core import refs as refs_core
    from envbuild.engine import registry
    from envbuild.features.lockfile import LOCK_FILE, read_lock

    ref = registry.parse_ref(image)
    verifier = load_verifier(key) if key is not None else None
    lock_path = lock if lock is not None else Path(LOCK_FILE)
    try:
        lock_data = read_lock(lock_path)
    except UsageError:
        if lock is not None:
            raise
        lock_data = None  # ./envbuild.lock of something else: not asked for
    if lock is not None and lock_data is None:
        raise UsageError(f"{lock}: no such lock file", "give the envbuild.lock of the team file "
                         "that built the image (`envbuild team build --push` writes it)")
    digest = ref.digest
    if not digest:
        digest = registry.resolve_digest(str(ref)) or ""
        if not refs_core.is_digest(digest):
            raise UsageError(f"{image[:120]} is not in the registry",
                             "give IMAGE@sha256:<digest> of a pushed image")
    members = registry.manifest_members(ref.name, digest)
    checks: list[attachments.Check] = []
    vias = []
    for platform, d in (members or {"": digest}).items():
        expect = _expect(lock_data, d, named=lock is not None)
        found, sigs, via = registry.fetch_attachments(ref.name, d)
        vias.append(via)
        checks += [attachments.Check(c.id, c.status, c.message, platform)
                   for c in attachments.judge(ref.name, d, found, sigs, verifier, expect)]
    used = lock_data is not None and any(_lock_entry(lock_data, d)
                                         for d in (members or {"": digest}).values())
    return Verified(ref.name, digest, "+".join(sorted(set(vias))), checks,
                    str(lock_path) if used else "", tuple(members or ()))
