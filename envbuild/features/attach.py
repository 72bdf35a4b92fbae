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

from envbuild.common.errors import UsageError
from envbuild.common.proc import SIGNING_PASSWORD_ENV
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
