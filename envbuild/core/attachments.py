"""What envbuild attaches to an image in a registry, and how `envbuild verify` judges it (pure).

Three artifacts per pushed image, each an OCI image manifest whose `subject` is the image and
whose one layer is the document:
- the validation report (`application/vnd.envbuild.validation.v1+json`);
- the SBOM, CycloneDX JSON (`application/vnd.cyclonedx+json`);
- the provenance, an in-toto v1 Statement with a SLSA v1 predicate whose subject is the image
  digest and whose byproducts are the SBOM's and the report's digests, so that one signature
  over the provenance vouches for all three: the layer is the statement
  (`application/vnd.in-toto+json`), or with a signing key a DSSE envelope of it
  (`application/vnd.dsse.envelope.v1+json`, as `cosign attest` writes).
With a key, a cosign "simple signing" signature of the image itself is pushed too, at cosign's
tag `sha256-<hex>.sig`.

A registry with the OCI referrers API indexes the artifacts by their subject. For one without
it (Debian's docker-registry) each artifact is also listed in the image index at the fallback
tag `sha256-<hex>` (OCI distribution spec 1.1, "referrers tag schema"), which envbuild updates
as each artifact is pushed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from envbuild.common.record import record
from envbuild.core import signing

REPORT_TYPE = "application/vnd.envbuild.validation.v1+json"
SBOM_TYPE = "application/vnd.cyclonedx+json"
PROVENANCE_TYPE = "application/vnd.in-toto+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
EMPTY_TYPE = "application/vnd.oci.empty.v1+json"
TITLE = "org.opencontainers.image.title"
CREATED = "org.opencontainers.image.created"
KINDS = {REPORT_TYPE: "report", SBOM_TYPE: "sbom", PROVENANCE_TYPE: "provenance"}
FILENAMES = {"report": "validation.json", "sbom": "sbom.cdx.json",
             "provenance": "provenance.intoto.json"}
SLSA_PROVENANCE = "https://slsa.dev/provenance/v1"
INTOTO_STATEMENT = "https://in-toto.io/Statement/v1"


def fallback_tag(digest: str) -> str:
    """The referrers tag schema's tag for artifacts of the image with this digest."""
    return digest.replace(":", "-")


def cosign_tag(digest: str) -> str:
    return digest.replace(":", "-") + ".sig"


def cosign_att_tag(digest: str) -> str:
    return digest.replace(":", "-") + ".att"


def descriptor(media_type: str, digest: str, size: int,
               annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {"mediaType": media_type, "digest": digest, "size": size}
    if annotations:
        d["annotations"] = dict(annotations)
    return d


def artifact_manifest(artifact_type: str, layer: dict[str, Any], empty_digest: str,
                      subject: dict[str, Any] | None, created: str) -> dict[str, Any]:
    """An OCI 1.1 artifact manifest: the empty config, one layer, the image as subject."""
    m: dict[str, Any] = {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": artifact_type,
        "config": {"mediaType": EMPTY_TYPE, "digest": empty_digest, "size": 2},
        "layers": [layer], "annotations": {CREATED: created},
    }
    if subject is not None:
        m["subject"] = subject
    return m


def with_referrer(index: object, referrer: dict[str, Any]) -> dict[str, Any]:
    """The fallback tag's image index with referrer listed (once; an unreadable index is
    started over: it holds only descriptors, the artifacts themselves stay)."""
    old = index.get("manifests") if isinstance(index, dict) else None
    kept = [m for m in old if isinstance(m, dict) and m.get("digest") != referrer["digest"]] \
        if isinstance(old, list) else []
    return {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [*kept, referrer]}


def statement(subject_name: str, digest: str, predicate_type: str,
              predicate: Mapping[str, Any]) -> dict[str, Any]:
    algo, _, hexd = digest.partition(":")
    return {"_type": INTOTO_STATEMENT, "subject": [{"name": subject_name, "digest": {algo: hexd}}],
            "predicateType": predicate_type, "predicate": dict(predicate)}


def resubject(stmt: Mapping[str, Any], subject_name: str, digest: str) -> dict[str, Any]:
    """The statement about the pushed image (built about the local image id)."""
    algo, _, hexd = digest.partition(":")
    return {**stmt, "subject": [{"name": subject_name, "digest": {algo: hexd}}]}


def with_byproducts(stmt: Mapping[str, Any], blobs: Mapping[str, tuple[str, str]]
                    ) -> dict[str, Any]:
    """The provenance with the attached documents as byproducts: name -> (digest, media type)."""
    pred = dict(stmt.get("predicate") or {})
    run = dict(pred.get("runDetails") or {})
    old = [b for b in run.get("byproducts") or [] if isinstance(b, dict)
           and b.get("name") not in blobs]
    run["byproducts"] = [*old, *({"name": name, "digest": {"sha256": d.partition(":")[2]},
                                  "mediaType": mt}
                                 for name, (d, mt) in sorted(blobs.items()))]
    pred["runDetails"] = run
    return {**stmt, "predicate": pred}


def canonical(doc: object) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


# -- verify ----------------------------------------------------------------------------------
@record
class Found:
    """One artifact read back from the registry: its manifest, its layer, where it was."""

    where: str  # host/repo@digest or :tag
    manifest: Any
    layer_type: str
    blob: bytes
    blob_digest: str


@record
class Check:
    id: str
    status: str  # pass | fail | warn | skip
    message: str
    platform: str = ""  # a multi-platform image's member this is about ('' = the image)

    def to_json(self) -> dict[str, str]:
        out = {"id": self.id, "status": self.status, "message": self.message}
        return {**out, "platform": self.platform} if self.platform else out


_NAME = re.compile(r"[-_.]+")


def norm(name: str) -> str:
    return _NAME.sub("-", name).lower()


def sbom_python_packages(bom: object) -> dict[str, str]:
    """name (normalized) -> version of the SBOM's pypi components."""
    comps = bom.get("components") if isinstance(bom, dict) else None
    out: dict[str, str] = {}
    for c in comps if isinstance(comps, list) else []:
        purl = c.get("purl") if isinstance(c, dict) else None
        if isinstance(purl, str) and purl.startswith("pkg:pypi/"):
            name, version = c.get("name"), c.get("version")
            if isinstance(name, str) and isinstance(version, str):
                out[norm(name)] = version
    return out


_PIN = re.compile(r"([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)==(\S+)")


def lock_packages(freeze: Iterable[object]) -> dict[str, str]:
    """name (normalized) -> version of a lock's `packages` (NAME==VERSION lines; anything else,
    such as a banner line an older envbuild took from an image's entrypoint, left out)."""
    out: dict[str, str] = {}
    for line in freeze:
        m = _PIN.fullmatch(line.strip()) if isinstance(line, str) else None
        if m:
            out[norm(m.group(1))] = m.group(2)
    return out


def _subject_digests(stmt: object) -> list[str]:
    subs = stmt.get("subject") if isinstance(stmt, dict) else None
    out = []
    for s in subs if isinstance(subs, list) else []:
        d = s.get("digest") if isinstance(s, dict) else None
        if isinstance(d, dict):
            out += [f"{k}:{v}" for k, v in d.items() if isinstance(v, str)]
    return out


def _byproducts(stmt: object) -> dict[str, str]:
    """name -> sha256:hex of the provenance's byproducts."""
    pred = stmt.get("predicate") if isinstance(stmt, dict) else None
    run = pred.get("runDetails") if isinstance(pred, dict) else None
    bps = run.get("byproducts") if isinstance(run, dict) else None
    out: dict[str, str] = {}
    for b in bps if isinstance(bps, list) else []:
        d = b.get("digest") if isinstance(b, dict) else None
        if isinstance(d, dict) and isinstance(d.get("sha256"), str) \
                and isinstance(b.get("name"), str):
            out[b["name"]] = "sha256:" + d["sha256"]
    return out


def _short(d: str) -> str:
    return d[:19] + "..." if len(d) > 19 else d


def _where(a: Found) -> str:
    """Where an artifact is, its digest cut short (the tag form kept)."""
    name, at, ref = a.where.rpartition("@")
    return f"{name}@{_short(ref)}" if at else a.where


@record
class Expect:
    """What the lock entry of the digest says must hold (None: no lock entry to compare)."""

    packages: Mapping[str, str] | None = None  # name (normalized) -> version
    signed_by: str = ""  # the key id the lock says signed it ('' = not recorded)
    named: bool = False  # the lock was given (--lock): an entry missing is a failure
    listed: tuple[str, ...] = ()  # the digests the given lock lists (for the message)


def _created(a: Found) -> str:
    ann = a.manifest.get("annotations") if isinstance(a.manifest, dict) else None
    c = ann.get(CREATED) if isinstance(ann, dict) else None
    return c if isinstance(c, str) else ""


def _subject_of(a: Found) -> str | None:
    """The digest an artifact's OCI subject names; None when it names none (a registry that
    refused the field: then only the provenance's binding can tie it to the image)."""
    subj = a.manifest.get("subject") if isinstance(a.manifest, dict) else None
    if subj is None:
        return None
    sd = subj.get("digest") if isinstance(subj, dict) else None
    return sd if isinstance(sd, str) else "an unreadable subject"


def _verifies(a: Found, verifier: signing.Verifier) -> bool:
    if a.layer_type != signing.DSSE_MEDIA_TYPE:
        return False
    try:
        return bool(signing.open_envelope(json.loads(a.blob), verifier).verified)
    except ValueError:
        return False


def _pick(kind: str, arts: list[Found], recorded: Mapping[str, str],
          verifier: signing.Verifier | None) -> Found:
    """Of several artifacts of a kind (attached again, or added by someone else): the
    provenance that verifies with the key; the SBOM or report the provenance records; else the
    newest by its manifest's created annotation (never by the registry's listing order)."""
    if kind == "provenance" and verifier is not None:
        good = [a for a in arts if _verifies(a, verifier)]
        if good:
            return max(good, key=_created)
    want = recorded.get(FILENAMES[kind])
    hit = [a for a in arts if a.blob_digest == want]
    return max(hit or arts, key=_created)


def judge(image: str, digest: str, found: Mapping[str, list[Found]],
          signatures: list[Found], verifier: signing.Verifier | None,
          expect: Expect | None = None) -> list[Check]:
    """Every check verify makes: each kind present, its subject this digest, the provenance
    (signed or not) binding the SBOM and the report, the report passing, the image signature,
    the SBOM vs the lock. found: kind -> the artifacts of that kind (referrers and fallback
    tag)."""
    expect = expect or Expect()
    checks: list[Check] = []
    docs: dict[str, tuple[Found, Any]] = {}
    recorded: dict[str, str] = {}
    for kind in ("provenance", "sbom", "report"):
        arts = found.get(kind) or []
        if not arts:
            checks.append(Check(f"{kind}.attached", "fail",
                                f"no {kind} is attached to {image}@{_short(digest)}"))
            continue
        ok_subject = []
        for a in arts:
            sd = _subject_of(a)
            if sd is None or sd == digest:
                ok_subject.append(a)
            else:
                checks.append(Check(f"{kind}.subject", "fail",
                                    f"the {kind} at {a.where} is attached to {sd}, "
                                    f"not {digest}"))
        if not ok_subject:
            continue
        a = _pick(kind, ok_subject, recorded, verifier)
        try:
            doc = json.loads(a.blob)
        except ValueError:
            checks.append(Check(f"{kind}.readable", "fail",
                                f"the {kind} at {a.where} is not JSON"))
            continue
        unbound = " (no OCI subject: the registry refused it; bound by the provenance)" \
            if _subject_of(a) is None else ""
        more = f"; {len(ok_subject) - 1} more attached" if len(ok_subject) > 1 else ""
        checks.append(Check(f"{kind}.attached", "pass",
                            f"{kind} attached ({_where(a)}){unbound}"
                            f"{more}"))
        docs[kind] = (a, doc)
        if kind == "provenance":
            recorded = _byproducts(_payload(a, doc))
    if "provenance" in docs:
        checks += _judge_provenance(digest, docs, verifier, expect)
    if "report" in docs:
        checks.append(_judge_report(docs["report"][1]))
    if signatures:
        checks.append(_judge_signatures(digest, signatures, verifier))
    elif verifier is not None or expect.signed_by:
        checks.append(Check("image.signature", "fail",
                            f"no cosign signature of {image}@{_short(digest)} "
                            f"(tag {cosign_tag(digest)})"))
    if "sbom" in docs:
        checks.append(_judge_lock(docs["sbom"][1], expect))
    return checks


def _judge_report(report: object) -> Check:
    s = report.get("summary") if isinstance(report, dict) else None
    if not isinstance(s, dict):
        return Check("report.status", "fail", "the attached report has no summary")
    failed, passed = s.get("fail"), s.get("pass")
    if failed or not passed:
        return Check("report.status", "fail",
                     f"the attached validation report does not pass ({failed or 0} failed, "
                     f"{passed or 0} passed)")
    return Check("report.status", "pass", f"the attached validation report passes "
                 f"({passed} passed)")


def _payload(a: Found, doc: Any) -> Any:
    """The statement of a provenance layer (a DSSE envelope's payload, unverified)."""
    if a.layer_type != signing.DSSE_MEDIA_TYPE:
        return doc
    try:
        return json.loads(signing.open_envelope(doc, None).payload)
    except ValueError:
        return None


def _judge_provenance(digest: str, docs: Mapping[str, tuple[Found, Any]],
                      verifier: signing.Verifier | None, expect: Expect) -> list[Check]:
    a, doc = docs["provenance"]
    out: list[Check] = []
    stmt: Any = doc
    if verifier is not None and expect.signed_by and verifier.keyid != expect.signed_by:
        out.append(Check("provenance.signer", "fail",
                         f"the lock says {_short(expect.signed_by)} signed it; --key is "
                         f"{_short(verifier.keyid)}"))
    if a.layer_type == signing.DSSE_MEDIA_TYPE:
        opened = signing.open_envelope(doc, verifier)
        if verifier is None and expect.signed_by:
            out.append(Check("provenance.signature", "fail",
                             f"the lock says {_short(expect.signed_by)} signed it: give "
                             "--key PUBLIC.pem to check the signature"))
        elif verifier is None:
            out.append(Check("provenance.signature", "warn",
                             "the provenance is signed; not checked: give --key PUBLIC.pem"))
        elif opened.verified:
            out.append(Check("provenance.signature", "pass",
                             f"the provenance's signature verifies with {verifier.keyid[:19]}"))
        else:
            out.append(Check("provenance.signature", "fail",
                             f"the provenance's signature: {opened.problem or 'does not verify'}"
                             " (tampered, or signed with another key)"))
        try:
            stmt = json.loads(opened.payload)
        except ValueError:
            return [*out, Check("provenance.readable", "fail",
                                "the provenance envelope's payload is not JSON")]
    elif verifier is not None or expect.signed_by:
        out.append(Check("provenance.signature", "fail",
                         "the provenance is not signed, and "
                         + ("--key asks for a signature" if verifier is not None else
                            f"the lock says {_short(expect.signed_by)} signed it")))
    else:
        out.append(Check("provenance.signature", "skip",
                         "the provenance is not signed: its integrity rests on the registry's "
                         "access control"))
    subjects = _subject_digests(stmt)
    if digest in subjects:
        out.append(Check("provenance.subject", "pass", "the provenance is about this digest"))
    else:
        out.append(Check("provenance.subject", "fail",
                         "the provenance is about "
                         f"{', '.join(_short(s) for s in subjects) or 'no digest'}, not {digest}"))
    made = _byproducts(stmt)
    for kind in ("sbom", "report"):
        if kind not in docs:
            continue
        got = docs[kind][0].blob_digest
        want = made.get(FILENAMES[kind])
        if want is None:
            out.append(Check(f"{kind}.digest", "fail",
                             f"the provenance does not record the {kind}'s digest"))
        elif want != got:
            out.append(Check(f"{kind}.digest", "fail",
                             f"the attached {kind} ({_short(got)}) is not the one the provenance "
                             f"records ({_short(want)}): it was changed after the build"))
        else:
            out.append(Check(f"{kind}.digest", "pass",
                             f"the {kind} is the one the provenance records"))
    return out


def _judge_signatures(digest: str, sigs: list[Found],
                      verifier: signing.Verifier | None) -> Check:
    """cosign's signature image holds a layer per signature (other keys' too): one of them must
    name this digest and, with a key, verify."""
    mine = [x for x in sigs if signing.simple_signing_digest(x.blob) == digest]
    if not mine:
        return Check("image.signature", "fail",
                     f"the cosign signatures at {sigs[0].where} sign another image")
    if verifier is None:
        return Check("image.signature", "warn",
                     "the image has a cosign signature; not checked: give --key PUBLIC.pem")
    for sig in mine:
        layers = sig.manifest.get("layers") if isinstance(sig.manifest, dict) else None
        for x in layers if isinstance(layers, list) else []:
            ann = x.get("annotations") if isinstance(x, dict) else None
            b64 = ann.get(signing.COSIGN_SIGNATURE_ANNOTATION) if isinstance(ann, dict) else None
            if x.get("digest") == sig.blob_digest and isinstance(b64, str) \
                    and verifier.verify(sig.blob, b64):
                return Check("image.signature", "pass",
                             f"the image's cosign signature verifies with {verifier.keyid[:19]}")
    return Check("image.signature", "fail",
                 "no cosign signature of the image verifies with the given key")


def _judge_lock(bom: object, expect: Expect) -> Check:
    lock = expect.packages
    if lock is None and expect.named:
        listed = ", ".join(_short(d) for d in expect.listed[:4]) or "no digest"
        return Check("sbom.lock", "fail", f"the lock has no packages for this digest (it lists "
                     f"{listed}): built by another lock, or not by `team build --push`")
    if lock is None:
        return Check("sbom.lock", "skip", "no lock entry for this digest: the SBOM's packages "
                     "were not compared (give --lock envbuild.lock)")
    have = sbom_python_packages(bom)
    if not have:
        return Check("sbom.lock", "fail", "the SBOM lists no Python packages")
    missing = sorted(n for n in lock if n not in have)
    extra = sorted(n for n in have if n not in lock)
    moved = sorted(n for n in lock if n in have and have[n] != lock[n])
    if not (missing or extra or moved):
        return Check("sbom.lock", "pass",
                     f"the SBOM's {len(have)} Python packages are the lock's")
    parts = []
    if moved:
        parts.append("other versions: " + ", ".join(f"{n} {have[n]} (lock {lock[n]})"
                                                    for n in moved[:5]))
    if missing:
        parts.append("missing: " + ", ".join(missing[:5]))
    if extra:
        parts.append("not in the lock: " + ", ".join(extra[:5]))
    return Check("sbom.lock", "fail", "the SBOM's packages differ from the lock: "
                 + "; ".join(parts))
