"""Signatures over what envbuild attaches to an image: DSSE envelopes (in-toto attestations) and
cosign's "simple signing" image signature, both ECDSA P-256 with SHA-256 (cosign's key type).

Pure: keys come in as PEM bytes, signatures go out as data. `cryptography` is imported only when
a key is loaded (start-up stays light).

- DSSE (github.com/secure-systems-lab/dsse, protocol.md): the signature is over
  PAE(type, body) = "DSSEv1" SP len(type) SP type SP len(body) SP body; the envelope is
  {"payload": b64(body), "payloadType": type, "signatures": [{"keyid", "sig": b64(DER)}]}.
  `cosign attest --key` writes the same envelope (payloadType application/vnd.in-toto+json).
- Simple signing (sigstore/cosign specs/SIGNATURE_SPEC.md): the payload names the image by
  manifest digest ({"critical": {"identity": {"docker-reference"}, "image":
  {"docker-manifest-digest"}, "type": "cosign container image signature"}, "optional": null});
  the base64 signature of the payload rides in the layer annotation
  `dev.cosignproject.cosign/signature`.

Keys: a PEM EC P-256 private key (PKCS#8 or SEC1, optionally encrypted with a password), as
`openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256` writes it; the public key as
PEM SubjectPublicKeyInfo (what `cosign verify --key` takes). cosign's own encrypted key format
(scrypt + NaCl secretbox) is not read: `cosign import-key-pair` makes a cosign key from the PEM.
Keyless signing (Fulcio certificates, Rekor) needs the public sigstore services: not offered.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from envbuild.common.errors import UsageError
from envbuild.common.record import record

INTOTO_PAYLOAD = "application/vnd.in-toto+json"
DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
SIMPLESIGNING_MEDIA_TYPE = "application/vnd.dev.cosign.simplesigning.v1+json"
COSIGN_SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
MAX_KEY_BYTES = 64 << 10
_KEY_HINT = ("give a PEM EC P-256 private key, e.g. `openssl genpkey -algorithm EC -pkeyopt "
             "ec_paramgen_curve:P-256 -out envbuild.key`")


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what is signed."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


@record
class Signer:
    """A loaded private key (cryptography's EllipticCurvePrivateKey) and its key id."""

    key: Any
    keyid: str

    def sign(self, data: bytes) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        return base64.b64encode(self.key.sign(data, ec.ECDSA(hashes.SHA256()))).decode()

    def public_pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return bytes(self.key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


@record
class Verifier:
    key: Any
    keyid: str

    def verify(self, data: bytes, sig_b64: str) -> bool:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        try:
            sig = base64.b64decode(sig_b64.encode("ascii"), validate=True)
            self.key.verify(sig, data, ec.ECDSA(hashes.SHA256()))
        except (InvalidSignature, ValueError, binascii.Error, UnicodeEncodeError):
            return False
        return True


def _keyid(public_key: Any) -> str:
    """sha256 of the public key's DER (SubjectPublicKeyInfo): names the key in a signature."""
    from cryptography.hazmat.primitives import serialization

    der = public_key.public_bytes(serialization.Encoding.DER,
                                  serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(der).hexdigest()


def _p256(key: Any, what: str) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec

    curve = getattr(key, "curve", None)
    if not isinstance(curve, ec.SECP256R1):
        name = getattr(curve, "name", type(key).__name__)
        raise UsageError(f"the {what} is not an EC P-256 key ({str(name)[:40]})",
                         _KEY_HINT if what == "signing key" else
                         "give the PEM public key of the EC P-256 signing key "
                         "(`openssl pkey -in envbuild.key -pubout`)")


def load_signer(pem: bytes, password: bytes | None = None) -> Signer:
    """A signer from a PEM private key; a clear usage error for anything else."""
    from cryptography.hazmat.primitives import serialization

    if len(pem) > MAX_KEY_BYTES:
        raise UsageError("the signing key file is too big for a key", _KEY_HINT)
    try:
        key = serialization.load_pem_private_key(pem, password=password or None)
    except TypeError:
        if password:
            raise UsageError("the signing key is not encrypted, but a password was given",
                             "unset ENVBUILD_SIGNING_PASSWORD") from None
        raise UsageError("the signing key is encrypted and no password was given",
                         "set ENVBUILD_SIGNING_PASSWORD to its password") from None
    except ValueError:
        # a wrong password mostly fails to decrypt; now and then it decrypts to garbage that
        # then fails to parse: either way, with a password given, it may be either
        raise UsageError("the signing key's password is wrong, or the file is not a PEM "
                         "private key" if password else
                         "the signing key is not a PEM private key", _KEY_HINT) from None
    except Exception:  # cryptography raises several kinds for garbage
        raise UsageError("the signing key is not a PEM private key", _KEY_HINT) from None
    _p256(key, "signing key")
    return Signer(key, _keyid(key.public_key()))


def load_verifier(pem: bytes) -> Verifier:
    from cryptography.hazmat.primitives import serialization

    hint = ("give the PEM public key of the signing key "
            "(`openssl pkey -in envbuild.key -pubout -out envbuild.pub`)")
    if len(pem) > MAX_KEY_BYTES:
        raise UsageError("the public key file is too big for a key", hint)
    try:
        key = serialization.load_pem_public_key(pem)
    except Exception:  # cryptography raises several kinds for garbage
        raise UsageError("the public key is not a PEM public key", hint) from None
    _p256(key, "public key")
    return Verifier(key, _keyid(key))


def envelope(payload: bytes, signer: Signer,
             payload_type: str = INTOTO_PAYLOAD) -> dict[str, Any]:
    """A DSSE envelope of payload signed by signer."""
    return {"payload": base64.b64encode(payload).decode(), "payloadType": payload_type,
            "signatures": [{"keyid": signer.keyid, "sig": signer.sign(pae(payload_type,
                                                                            payload))}]}


@record
class Opened:
    """An envelope read back: its payload, and whether a signature verified (None: unchecked)."""

    payload: bytes
    payload_type: str
    signed: bool
    verified: bool | None
    problem: str = ""


def open_envelope(env: object, verifier: Verifier | None) -> Opened:
    """The payload of a DSSE envelope; with a verifier, whether one of its signatures verifies."""
    if not isinstance(env, dict):
        return Opened(b"", "", False, False, "not a DSSE envelope")
    ptype, body, sigs = env.get("payloadType"), env.get("payload"), env.get("signatures")
    if not isinstance(ptype, str) or not isinstance(body, str) or not isinstance(sigs, list):
        return Opened(b"", "", False, False, "not a DSSE envelope")
    try:
        payload = base64.b64decode(body.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return Opened(b"", ptype, False, False, "its payload is not base64")
    good = [s for s in sigs if isinstance(s, dict) and isinstance(s.get("sig"), str)]
    if verifier is None:
        return Opened(payload, ptype, bool(good), None)
    ok = any(verifier.verify(pae(ptype, payload), str(s["sig"])) for s in good)
    return Opened(payload, ptype, bool(good), ok,
                  "" if ok else ("no signature verifies with the given key" if good
                                 else "it is not signed"))


def simple_signing_payload(docker_reference: str, digest: str) -> bytes:
    """cosign's signed payload for an image (the reference without tag or digest)."""
    return json.dumps({"critical": {"identity": {"docker-reference": docker_reference},
                                    "image": {"docker-manifest-digest": digest},
                                    "type": "cosign container image signature"},
                       "optional": None}, separators=(",", ":"), sort_keys=True).encode()


def simple_signing_digest(payload: bytes) -> str:
    """The image digest a simple-signing payload names ('' when it names none)."""
    try:
        data = json.loads(payload)
        digest = data["critical"]["image"]["docker-manifest-digest"]
    except (ValueError, KeyError, TypeError):
        return ""
    return digest if isinstance(digest, str) else ""
