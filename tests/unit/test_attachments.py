"""The pure judge of `envbuild verify` and the signatures under it: generated classes of changes
to what is attached (any byte of a signed payload, any other subject, any other document) are
each caught and named; what was attached as built passes."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.common.errors import UsageError
from envbuild.core import attachments as a
from envbuild.core import signing

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32
NAME = "reg.example/ml/cpu"
FREEZE = ["numpy==2.3.1", "torch==2.13.0+cpu"]


def _key() -> Any:
    return ec.generate_private_key(ec.SECP256R1())


def _pem(k: Any) -> bytes:
    return bytes(k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption()))


SIGNER = signing.load_signer(_pem(_key()))
VERIFIER = signing.load_verifier(SIGNER.public_pem())


def _sha(b: bytes) -> str:
    return "sha256:" + hashlib.sha256(b).hexdigest()


def _found(kind: str, blob: bytes, subject: str = DIGEST,
           layer_type: str | None = None) -> a.Found:
    t = {"report": a.REPORT_TYPE, "sbom": a.SBOM_TYPE, "provenance": a.PROVENANCE_TYPE}[kind]
    m = a.artifact_manifest(t, a.descriptor(layer_type or t, _sha(blob), len(blob)),
                            _sha(b"{}"), {"mediaType": a.OCI_MANIFEST, "digest": subject,
                                          "size": 1}, "2026-11-29T00:00:00+00:00")
    return a.Found(f"{NAME}@{_sha(blob)}", m, layer_type or t, blob, _sha(blob))


def _set(signed: bool, freeze: list[str] = FREEZE, subject: str = DIGEST
         ) -> dict[str, list[a.Found]]:
    report = json.dumps({"summary": {"pass": 1}}).encode()
    bom = json.dumps({"components": [{"name": n, "version": v, "purl": f"pkg:pypi/{n}@{v}"}
                                     for n, _, v in (x.partition("==") for x in freeze)]}
                     ).encode()
    stmt = a.statement(NAME, subject, a.SLSA_PROVENANCE, {"runDetails": {}})
    stmt = a.with_byproducts(stmt, {"validation.json": (_sha(report), a.REPORT_TYPE),
                                    "sbom.cdx.json": (_sha(bom), a.SBOM_TYPE)})
    payload = a.canonical(stmt)
    prov = (json.dumps(signing.envelope(payload, SIGNER)).encode(), signing.DSSE_MEDIA_TYPE) \
        if signed else (payload, a.PROVENANCE_TYPE)
    return {"report": [_found("report", report)], "sbom": [_found("sbom", bom)],
            "provenance": [_found("provenance", prov[0], layer_type=prov[1])]}


def _judge(found: dict[str, list[a.Found]], verifier: signing.Verifier | None = None,
           lock: dict[str, str] | None = None, sigs: list[a.Found] | None = None,
           **expect: Any) -> list[a.Check]:
    return a.judge(NAME, DIGEST, found, sigs or [], verifier, a.Expect(lock, **expect))


def _fails(checks: list[a.Check]) -> set[str]:
    return {c.id for c in checks if c.status == "fail"}


def test_what_was_attached_passes() -> None:
    lock = a.lock_packages(FREEZE)
    checks = _judge(_set(True), VERIFIER, lock)
    assert _fails(checks) == {"image.signature"}  # the one thing not given: the cosign sig
    checks = _judge(_set(True), None, lock)
    assert _fails(checks) == set()
    assert {c.id: c.status for c in checks}["provenance.signature"] == "warn"
    unsigned = _judge(_set(False), None, lock)
    assert _fails(unsigned) == set()
    assert {c.id: c.status for c in unsigned}["provenance.signature"] == "skip"
    assert _fails(_judge(_set(False), VERIFIER, lock)) == \
        {"provenance.signature", "image.signature"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_changed_byte_of_the_signed_provenance_is_caught(data: st.DataObject) -> None:
    found = _set(True)
    env = json.loads(found["provenance"][0].blob)
    payload = bytearray(base64.b64decode(env["payload"]))
    i = data.draw(st.integers(0, len(payload) - 1))
    payload[i] ^= data.draw(st.integers(1, 255))
    env["payload"] = base64.b64encode(bytes(payload)).decode()
    blob = json.dumps(env).encode()
    found["provenance"] = [_found("provenance", blob, layer_type=signing.DSSE_MEDIA_TYPE)]
    checks = _judge(found, VERIFIER)
    assert "provenance.signature" in _fails(checks)


@given(kind=st.sampled_from(["sbom", "report"]), junk=st.binary(min_size=0, max_size=200))
def test_any_other_document_than_the_recorded_one_is_caught(kind: str, junk: bytes) -> None:
    found = _set(False)
    doc = json.dumps({"changed": base64.b64encode(junk).decode()}).encode()
    found[kind] = [_found(kind, doc)]
    fails = _fails(_judge(found, None))
    assert f"{kind}.digest" in fails


@given(other=st.text("0123456789abcdef", min_size=64, max_size=64).map(lambda h: "sha256:" + h))
def test_any_other_subject_is_caught(other: str) -> None:
    if other == DIGEST:
        return
    for kind in ("report", "sbom", "provenance"):
        found = _set(False)
        f = found[kind][0]
        found[kind] = [_found(kind, f.blob, subject=other, layer_type=f.layer_type)]
        fails = _fails(_judge(found, None))
        assert f"{kind}.subject" in fails and f"{kind}.attached" not in \
            {c.id for c in _judge(found, None) if c.status == "pass"}
    # the statement's own subject (the OCI subject right): caught as well
    found = _set(False, subject=other)
    assert "provenance.subject" in _fails(_judge(found, None))


@given(st.lists(st.tuples(st.from_regex(r"[A-Za-z](?:[A-Za-z0-9._-]{0,19}[A-Za-z0-9])?",
                                        fullmatch=True),
                          st.from_regex(r"[0-9][0-9a-z.+]{0,10}", fullmatch=True)),
                min_size=1, max_size=8, unique_by=lambda t: a.norm(t[0])),
       st.data())
def test_the_lock_comparison_names_what_differs(pkgs: list[tuple[str, str]],
                                                data: st.DataObject) -> None:
    freeze = [f"{n}=={v}" for n, v in pkgs]
    found = _set(False, freeze)
    lock = a.lock_packages(freeze)
    assert "sbom.lock" not in _fails(_judge(found, None, lock))
    n, v = data.draw(st.sampled_from(pkgs))
    changed = dict(lock)
    changed[a.norm(n)] = v + "x"
    check = next(c for c in _judge(found, None, changed)
                 if c.id == "sbom.lock")
    assert check.status == "fail" and a.norm(n) in check.message
    assert next(c for c in _judge(found, None)
                if c.id == "sbom.lock").status == "skip"


def test_missing_kinds_are_each_named() -> None:
    for kind in ("report", "sbom", "provenance"):
        found = _set(False)
        del found[kind]
        assert f"{kind}.attached" in _fails(_judge(found, None))


def test_the_cosign_signature_is_judged() -> None:
    payload = signing.simple_signing_payload(NAME, DIGEST)
    sig = SIGNER.sign(payload)
    layer = a.descriptor(signing.SIMPLESIGNING_MEDIA_TYPE, _sha(payload), len(payload),
                         {signing.COSIGN_SIGNATURE_ANNOTATION: sig})
    good = a.Found("x", {"layers": [layer]}, signing.SIMPLESIGNING_MEDIA_TYPE, payload,
                   _sha(payload))
    status = {c.id: c.status for c in _judge(_set(True), VERIFIER, None, [good])}
    assert status["image.signature"] == "pass"
    other = signing.simple_signing_payload(NAME, OTHER)
    wrong = a.Found("x", {"layers": [{**layer, "digest": _sha(other)}]},
                    signing.SIMPLESIGNING_MEDIA_TYPE, other, _sha(other))
    assert "image.signature" in _fails(_judge(_set(True), VERIFIER, None, [wrong]))
    another = signing.load_verifier(signing.load_signer(_pem(_key())).public_pem())
    assert "image.signature" in _fails(_judge(_set(True), another, None, [good]))


def test_the_fallback_index_keeps_each_referrer_once() -> None:
    d1 = {"mediaType": a.OCI_MANIFEST, "digest": DIGEST, "size": 1}
    d2 = {"mediaType": a.OCI_MANIFEST, "digest": OTHER, "size": 2}
    ix = a.with_referrer(None, d1)
    ix = a.with_referrer(a.with_referrer(ix, d2), d1)
    assert [m["digest"] for m in ix["manifests"]] == [OTHER, DIGEST]
    assert a.with_referrer({"manifests": "garbage"}, d1)["manifests"] == [d1]


@pytest.mark.parametrize("pem", [b"", b"garbage", b"-----BEGIN PRIVATE KEY-----\nAAAA\n"
                                 b"-----END PRIVATE KEY-----\n", b"x" * (70 << 10)])
def test_a_bad_key_is_a_usage_error(pem: bytes) -> None:
    with pytest.raises(UsageError):
        signing.load_signer(pem)
    with pytest.raises(UsageError):
        signing.load_verifier(pem)


def test_key_kinds_and_passwords() -> None:
    rsa_like = ec.generate_private_key(ec.SECP384R1())
    with pytest.raises(UsageError, match="not an EC P-256"):
        signing.load_signer(_pem(rsa_like))
    k = _key()
    enc = k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                          serialization.BestAvailableEncryption(b"s3cret"))
    with pytest.raises(UsageError, match="no password"):
        signing.load_signer(enc)
    with pytest.raises(UsageError) as exc:
        signing.load_signer(enc, b"wrong")
    assert "s3cret" not in str(exc.value) and "password is wrong" in exc.value.message
    assert signing.load_signer(enc, b"s3cret").keyid.startswith("sha256:")


def _with_created(f: a.Found, created: str) -> a.Found:
    return a.Found(f.where, {**f.manifest, "annotations": {a.CREATED: created}}, f.layer_type,
                   f.blob, f.blob_digest)


@given(st.permutations(range(3)))
def test_several_provenances_any_listing_order(order: list[int]) -> None:
    """An unsigned provenance added beside the signed one (an old attach, or someone with push
    rights) never hides the signed one from --key, whatever order the registry lists them in;
    without --key, the newest by its created annotation is taken, never the listing order."""
    signed, unsigned = _set(True), _set(False)
    arts = [_with_created(signed["provenance"][0], "2026-11-29T00:00:01"),
            _with_created(unsigned["provenance"][0], "2026-11-29T00:00:02"),
            _with_created(unsigned["provenance"][0], "2026-11-29T00:00:00")]
    found = {**signed, "provenance": [arts[i] for i in order]}
    assert _fails(_judge(found, VERIFIER, sigs=None)) == {"image.signature"}
    status = {c.id: c.status for c in _judge(found)}
    assert status["provenance.signature"] == "skip"  # the newest is the unsigned one
    # ... which the lock's record of a signer turns into a failure
    assert "provenance.signature" in _fails(_judge(found, signed_by=SIGNER.keyid))


def test_a_lock_that_records_a_signer_needs_the_key_and_a_signature() -> None:
    fails = _fails(_judge(_set(False), signed_by=SIGNER.keyid))
    assert fails == {"provenance.signature", "image.signature"}
    other = signing.load_verifier(signing.load_signer(_pem(_key())).public_pem())
    assert "provenance.signer" in _fails(_judge(_set(True), other, signed_by=SIGNER.keyid))


def test_subjectless_artifacts_are_taken_only_when_the_provenance_binds_them() -> None:
    """A registry that refuses `subject`: the artifacts are listed by the fallback tag alone;
    the provenance's statement and byproducts bind them, so they pass, and others fail."""
    found = _set(True)
    for kind, arts in found.items():
        m = {k: v for k, v in arts[0].manifest.items() if k != "subject"}
        found[kind] = [a.Found(arts[0].where, m, arts[0].layer_type, arts[0].blob,
                               arts[0].blob_digest)]
    assert _fails(_judge(found, VERIFIER)) == {"image.signature"}
    other = _set(True, subject=OTHER)
    found["provenance"] = [a.Found("x", {}, other["provenance"][0].layer_type,
                                   other["provenance"][0].blob,
                                   other["provenance"][0].blob_digest)]
    assert "provenance.subject" in _fails(_judge(found, VERIFIER))


@given(st.one_of(st.none(), st.integers(0, 5)), st.one_of(st.none(), st.integers(0, 5)))
def test_a_report_that_does_not_pass_fails_verify(failed: int | None, passed: int | None
                                                  ) -> None:
    found = _set(False)
    summary = {k: v for k, v in (("fail", failed), ("pass", passed)) if v is not None}
    blob = json.dumps({"summary": summary}).encode()
    found["report"] = [_found("report", blob)]
    status = {c.id: c.status for c in _judge(found)}
    assert status["report.status"] == ("pass" if passed and not failed else "fail")


def test_a_named_lock_without_this_digest_fails() -> None:
    check = next(c for c in _judge(_set(False), named=True, listed=(OTHER,))
                 if c.id == "sbom.lock")
    assert check.status == "fail" and OTHER[:19] in check.message


def test_an_old_lock_with_banner_lines_still_compares() -> None:
    assert a.lock_packages(["== CUDA ==", "==", "torch==2.13.0+cpu", " numpy==2.3.1 ", 7]) == \
        {"torch": "2.13.0+cpu", "numpy": "2.3.1"}
