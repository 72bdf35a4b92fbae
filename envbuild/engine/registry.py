"""A small client of the OCI distribution (registry HTTP API v2) through requests.

What envbuild needs from a registry and the docker engine cannot do: resolve a tag to its manifest
digest (the lock, `team check`), check that a digest is still there, and attach a validation
report to an image as an OCI artifact (and read it back).

The report artifact: an OCI image manifest in the image's repository, tagged
`sha256-<image digest hex>.envbuild` (the tag convention cosign and ORAS use where a registry has
no referrers API), artifactType and its one layer `application/vnd.envbuild.validation.v1+json`,
and `subject` pointing at the image (registries with the referrers API index it; older ones keep
the field and serve the artifact by its tag).

Authentication (envbuild/common/http.py's RegistryAuth): the token flow Docker Hub, GHCR and NGC use
(401 + `WWW-Authenticate: Bearer realm=...,service=...,scope=...` -> GET realm -> a bearer token)
or Basic (an htpasswd registry), anonymous or with the login of the docker credential store, as
`docker login` leaves it in $DOCKER_CONFIG/config.json: the host's `credHelpers` entry, else
`credsStore`, else the `auths` entry (the order of the docker CLI). A helper is asked through
envbuild/common/proc.py (`docker-credential-NAME get`, the server on stdin); the secret is never
logged.
Plain HTTP only for localhost / 127.0.0.0/8, as the docker engine does.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import threading
import time
from dataclasses import field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urljoin

from envbuild.common.boundedio import parse_json
from envbuild.common.errors import EnvbuildError, EnvironmentProblem, UsageError
from envbuild.common.http import Http, RegistryAuth, Reply, Unreachable
from envbuild.common.record import record
from envbuild.core import attachments, refs, signing

REPORT_TYPE = attachments.REPORT_TYPE
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
EMPTY_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY = b"{}"
MANIFEST_TYPES = (OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST)
TIMEOUT = 30.0
ATTACHMENT_LIMIT = 16 << 20  # an attached document's bytes, pushed and read back
MAX_LISTED = 16  # the attachments (and cosign layers) of one image that are read

Ref = refs.ImageRef


def parse_ref(text: str) -> Ref:
    """Parse an image reference the way docker does (docker.io/library for bare names)."""
    try:
        return refs.parse(text)
    except refs.RefError as exc:
        if exc.bad_digest is not None:
            raise UsageError(f"{text[:80]!r}: {exc.bad_digest[:80]!r} is not a sha256 digest",
                             "e.g. registry.example.com/ml/cpu@sha256:<64 hex>") from None
        raise UsageError(f"{text[:80]!r} is not an image reference",
                         "e.g. registry.example.com/ml/cpu:tag or "
                         "registry.example.com/ml/cpu@sha256:<64 hex>") from None


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def report_tag(digest: str) -> str:
    """The fallback tag of an artifact attached to the image with this digest."""
    if not refs.is_digest(digest):
        raise UsageError(f"{digest[:80]!r} is not a sha256 digest",
                         "give the image digest as sha256: and 64 hex digits")
    return digest.replace(":", "-") + ".envbuild"


def _docker_config() -> dict[str, Any]:
    path = Path(os.environ.get("DOCKER_CONFIG", Path.home() / ".docker")) / "config.json"
    from envbuild.common.boundedio import load_json
    from envbuild.common.errors import UsageError

    try:
        doc = load_json(path, "Docker config")
    except (OSError, ValueError, UsageError):  # missing, damaged, or not a file: no logins
        return {}
    return doc if isinstance(doc, dict) else {}


_HELPER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)


def _helper_login(helper: str, server: str) -> tuple[str, str] | None:
    """(user, secret) from `docker-credential-HELPER get`; None when it has none for server."""
    from envbuild.common import proc

    name = f"docker-credential-{helper}"
    if not _HELPER.fullmatch(helper):
        raise UsageError(f"config.json names the credential helper {helper[:40]!r}, "
                         "not a helper name", "fix credHelpers / credsStore in config.json")
    if proc.which(name) is None:
        raise EnvironmentProblem(f"the credential helper {name} (config.json) is not installed",
                                 "install it, or run docker login without it")
    res = proc.run([name, "get"], input_text=server, check=False, timeout=60)
    if not res.ok:  # "credentials not found in native keychain"; its output is never shown
        return None
    try:
        doc = parse_json(res.stdout)
        user, secret = doc["Username"], doc["Secret"]
    except (ValueError, KeyError, TypeError):
        raise EnvironmentProblem(f"the credential helper {name} answered something else than "
                                 "credentials", "check it with: docker login") from None
    if not isinstance(user, str) or not isinstance(secret, str) or not secret \
            or user == "<token>":  # an identity token (OAuth refresh): not supported here
        return None
    return user, secret


def _docker_auth(host: str) -> tuple[str, str] | None:
    """The login for host in the docker credential store: the host's credHelpers entry, else
    credsStore, else the basic credentials of `auths` (the docker CLI's order)."""
    cfg = _docker_config()
    hub = host == "docker.io"
    server = "https://index.docker.io/v1/" if hub else host
    keys = [host, f"https://{host}", server, "index.docker.io"] if hub \
        else [host, f"https://{host}", f"http://{host}"]
    helpers = cfg.get("credHelpers")
    helper = next((helpers[k] for k in keys if isinstance(helpers, dict)
                   and isinstance(helpers.get(k), str)), None)
    store = cfg.get("credsStore")
    if helper or (isinstance(store, str) and store):
        return _helper_login(str(helper or store), server)
    auths = cfg.get("auths")
    for k in keys:
        entry = auths.get(k) if isinstance(auths, dict) else None
        if isinstance(entry, dict) and isinstance(entry.get("auth"), str):
            try:
                user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                return None
            return user, password
    return None


@record(frozen=False)
class Client:
    """A registry session for one host; its Authorization is kept per scope."""

    host: str
    auth: RegistryAuth = field(init=False)

    def __post_init__(self) -> None:
        http = Http(timeout=TIMEOUT, retries=1, agent="envbuild-registry")
        self.auth = RegistryAuth(http.send, self.host, lambda: _docker_auth(self.host))

    @property
    def base(self) -> str:
        return refs.api_base(self.host)

    def _request(self, method: str, url: str, scope: str, *, body: bytes | None = None,
                 headers: dict[str, str] | None = None,
                 params: dict[str, str] | None = None) -> Reply:
        if params:
            url += ("&" if "?" in url else "?") + urlencode(params)
        try:
            return self.auth.request(method, url, scope, headers, body)
        except Unreachable as exc:
            where = "" if exc.host in ("", refs.api_host(self.host)) else f" at {exc.host}"
            raise EnvironmentProblem(
                f"cannot reach the registry {self.host}{where} ({exc.reason})",
                "check that it is up and reachable (and the name/port in the reference)") \
                from None

    @staticmethod
    def _scope(repo: str, push: bool = False) -> str:
        return f"repository:{repo}:{'pull,push' if push else 'pull'}"

    # -- manifests ---------------------------------------------------------------------------
    def head_manifest(self, ref: Ref) -> tuple[str, str, int] | None:
        """(digest, media type, size) of the manifest ref names; None when it does not exist."""
        r = self._request("HEAD", f"{self.base}/{ref.repo}/manifests/{ref.reference}",
                          self._scope(ref.repo), headers={"Accept": ", ".join(MANIFEST_TYPES)})
        if r.status == 404:
            return None
        _check(r, f"HEAD {ref}")
        digest = r.header("Docker-Content-Digest")
        if not digest:  # some registries answer HEAD without it: hash the body
            g = self.get_manifest(ref)
            return (sha256(g[0]), g[1], len(g[0])) if g else None
        length = r.header("Content-Length")
        return digest, r.header("Content-Type").split(";")[0], \
            int(length) if length.isdigit() else 0

    def get_manifest(self, ref: Ref, accept: tuple[str, ...] = MANIFEST_TYPES
                     ) -> tuple[bytes, str] | None:
        r = self._request("GET", f"{self.base}/{ref.repo}/manifests/{ref.reference}",
                          self._scope(ref.repo), headers={"Accept": ", ".join(accept)})
        if r.status == 404:
            return None
        _check(r, f"GET {ref}")
        return r.body, r.header("Content-Type").split(";")[0]

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> Reply:
        return self._request("PUT", f"{self.base}/{repo}/manifests/{reference}",
                             self._scope(repo, push=True), body=body,
                             headers={"Content-Type": media_type})

    # -- blobs -------------------------------------------------------------------------------
    def put_blob(self, repo: str, data: bytes) -> str:
        digest = sha256(data)
        scope = self._scope(repo, push=True)
        r = self._request("HEAD", f"{self.base}/{repo}/blobs/{digest}", scope)
        if r.status == 200:
            return digest
        r = self._request("POST", f"{self.base}/{repo}/blobs/uploads/", scope)
        _check(r, f"upload to {self.host}/{repo}", (202,))
        if not r.header("Location"):
            raise EnvbuildError(f"registry error on upload to {self.host}/{repo}: "
                                "no Location for the upload",
                                "the registry does not follow the OCI distribution API; "
                                "push to a registry that does (registry:2, Harbor, ...)")
        location = urljoin(f"{self.base}/", r.header("Location"))
        sep = "&" if "?" in location else "?"
        r = self._request("PUT", f"{location}{sep}digest={digest}", scope, body=data,
                          headers={"Content-Type": "application/octet-stream"})
        _check(r, f"upload to {self.host}/{repo}", (201,))
        return digest

    def get_blob(self, repo: str, digest: str, limit: int = 16 << 20) -> bytes:
        r = self._request("GET", f"{self.base}/{repo}/blobs/{digest}", self._scope(repo))
        _check(r, f"blob {digest} in {self.host}/{repo}")
        data = r.body
        if len(data) > limit:
            raise EnvbuildError(f"blob {digest} in {self.host}/{repo} is over {limit >> 20} MiB",
                                "envbuild reads attachments up to that size: this one was not "
                                "pushed by envbuild")
        if sha256(data) != digest:
            raise EnvbuildError(f"blob {digest} in {self.host}/{repo} does not match its digest",
                                "the registry served other bytes: check for a proxy rewriting "
                                "answers, then push the image again")
        return data

    def referrers(self, repo: str, digest: str,
                  artifact_type: str | None) -> list[dict[str, Any]] | None:
        """Manifests whose subject is digest (referrers API; of one artifact type, or all);
        None when the registry has none."""
        r = self._request("GET", f"{self.base}/{repo}/referrers/{digest}", self._scope(repo),
                          params={"artifactType": artifact_type} if artifact_type else None,
                          headers={"Accept": OCI_INDEX})
        if r.status != 200 or not r.header("Content-Type").startswith(OCI_INDEX):
            return None
        try:
            found = parse_json(r.body).get("manifests", [])
        except (ValueError, AttributeError):
            return None
        if not isinstance(found, list):
            return None
        return [m for m in found if isinstance(m, dict)
                and (artifact_type is None or m.get("artifactType") == artifact_type)]


def _check(r: Reply, what: str, ok: tuple[int, ...] = (200,)) -> None:
    if r.status not in ok:
        raise EnvbuildError(f"registry error on {what}: HTTP {r.status} "
                            f"{' '.join(r.text[:200].split())}",
                            "check the registry address and that this login may write there")


def client(host: str) -> Client:
    return Client(host)


def push_index(tag_ref: str, members: list[tuple[str, str]]) -> str:
    """Push an OCI image index at tag_ref over platform images already in its repository:
    members = (platform 'linux/arm64', digest). Each member's media type and size are read
    from the registry; the index's digest is returned."""
    ref = parse_ref(tag_ref)
    c = client(ref.host)
    manifests = []
    for platform, digest in members:
        found = c.head_manifest(ref.with_digest(digest))
        if found is None:
            raise EnvbuildError(f"{ref.host}/{ref.repo}@{digest} ({platform}) is not in the "
                                "registry", "push every platform image before the index")
        os_, _, arch = platform.partition("/")
        manifests.append({"mediaType": found[1], "digest": digest, "size": found[2],
                          "platform": {"architecture": arch, "os": os_}})
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests},
                      sort_keys=True, separators=(",", ":")).encode()
    _check(c.put_manifest(ref.repo, ref.reference, body, OCI_INDEX), f"PUT {tag_ref}", (201,))
    return sha256(body)


def index_platforms(ref_text: str) -> dict[str, str] | None:
    """platform -> manifest digest of the index (or manifest list) ref_text names; None when
    there is none, {} when it names a single image."""
    ref = parse_ref(ref_text)
    got = client(ref.host).get_manifest(ref)
    if got is None:
        return None
    body, media_type = got
    if media_type not in (OCI_INDEX, DOCKER_LIST):
        return {}
    try:
        entries = parse_json(body).get("manifests", [])
    except (ValueError, AttributeError):
        return {}
    out: dict[str, str] = {}
    for m in entries if isinstance(entries, list) else []:
        plat = m.get("platform") if isinstance(m, dict) else None
        if isinstance(plat, dict) and isinstance(m.get("digest"), str):
            out[f"{plat.get('os')}/{plat.get('architecture')}"] = m["digest"]
    return out


def resolve_digest(ref: str) -> str | None:
    """The manifest digest a reference resolves to now; None when it does not exist."""
    r = parse_ref(ref)
    hit = client(r.host).head_manifest(r)
    return hit[0] if hit else None


def report_manifest(report_digest: str, report_size: int,
                    subject: tuple[str, str, int] | None, created: str) -> dict[str, Any]:
    """The artifact manifest of a report blob (pure)."""
    layer = attachments.descriptor(REPORT_TYPE, report_digest, report_size,
                                   {attachments.TITLE: "validation.json"})
    return attachments.artifact_manifest(
        REPORT_TYPE, layer, sha256(EMPTY),
        {"mediaType": subject[1], "digest": subject[0], "size": subject[2]} if subject else None,
        created)


def _subject(c: Client, ref: Ref, digest: str) -> tuple[str, str, int]:
    subject = c.head_manifest(ref.with_digest(digest))
    if subject is None:
        raise EnvbuildError(f"{ref.host}/{ref.repo}@{digest} is not in the registry",
                            "push the image first")
    return subject


def _index_at(c: Client, ref: Ref, tag: str) -> object:
    got = c.get_manifest(Ref(ref.host, ref.repo, tag), (OCI_INDEX,))
    if got is None:
        return None
    try:
        return parse_json(got[0])
    except ValueError:
        return None


_FALLBACK_LOCKS: dict[tuple[str, str, str], threading.Lock] = {}
_FALLBACK_GUARD = threading.Lock()


def _list_in_fallback(c: Client, ref: Ref, digest: str, desc: dict[str, Any]) -> None:
    """Add desc to the fallback tag's index. A read-modify-write, which the registry API cannot
    make atomic: writers in this process (team build --jobs) take turns; another process (an
    overlapping CI run) may still drop an entry between our read and write, so it is read back
    and written again until the index lists it (a drop after that is not seen)."""
    fallback = attachments.fallback_tag(digest)
    with _FALLBACK_GUARD:
        lock = _FALLBACK_LOCKS.setdefault((ref.host, ref.repo, fallback), threading.Lock())
    with lock:
        _list_locked(c, ref, fallback, desc)


def _list_locked(c: Client, ref: Ref, fallback: str, desc: dict[str, Any]) -> None:
    for attempt in range(6):
        index = json.dumps(attachments.with_referrer(_index_at(c, ref, fallback), desc),
                           sort_keys=True).encode()
        _check(c.put_manifest(ref.repo, fallback, index, OCI_INDEX),
               f"push of the referrers index to {ref.host}/{ref.repo}:{fallback}", (201,))
        now = _index_at(c, ref, fallback)
        listed = now.get("manifests") if isinstance(now, dict) else None
        if isinstance(listed, list) and any(isinstance(m, dict) and
                                            m.get("digest") == desc["digest"] for m in listed):
            return
        time.sleep(0.05 * (attempt + 1))
    raise EnvbuildError(f"the referrers index {ref.host}/{ref.repo}:{fallback} kept changing "
                        "under another writer", "run the push again")


def _put_artifact(c: Client, ref: Ref, digest: str, subject: tuple[str, str, int],
                  manifest_for: Any, reference: str | None = None) -> tuple[str, dict[str, Any]]:
    """PUT an artifact manifest (manifest_for(subject or None)) at reference (default: its own
    digest); list it in the fallback tag's index unless the registry indexed it itself (its
    answer carries OCI-Subject). (where it is, its descriptor)."""
    manifest = manifest_for(subject)
    body = json.dumps(manifest, sort_keys=True).encode()
    r = c.put_manifest(ref.repo, reference or sha256(body), body, OCI_MANIFEST)
    if r.status == 400:  # a registry that refuses `subject`: the fallback tag still lists it,
        # and verify takes it when the provenance binds it (its statement names the image)
        manifest = manifest_for(None)
        body = json.dumps(manifest, sort_keys=True).encode()
        r = c.put_manifest(ref.repo, reference or sha256(body), body, OCI_MANIFEST)
    _check(r, f"push of an attachment to {ref.host}/{ref.repo}", (201,))
    # the referrers tag schema: the descriptor carries the manifest's artifactType and
    # annotations (created), as the referrers API lists them
    desc = {**attachments.descriptor(OCI_MANIFEST, sha256(body), len(body),
                                     manifest.get("annotations")),
            "artifactType": manifest["artifactType"]}
    if not r.header("OCI-Subject"):
        _list_in_fallback(c, ref, digest, desc)
    where = f"{ref.host}/{ref.repo}" + (f":{reference}" if reference else f"@{sha256(body)}")
    return where, desc


def attach_report(image: str, digest: str, report: dict[str, Any]) -> str:
    """Push report as an artifact attached to image@digest; the artifact's reference."""
    blob = json.dumps(report, indent=1, sort_keys=True).encode()
    return attach_blob(image, digest, REPORT_TYPE, REPORT_TYPE, blob, "validation.json",
                       tag=report_tag(digest))


def _bounded(blob: bytes, title: str) -> None:
    if len(blob) > ATTACHMENT_LIMIT:
        raise EnvbuildError(f"{title} is {len(blob) >> 20} MiB: over the {ATTACHMENT_LIMIT >> 20}"
                            " MiB envbuild attaches (and reads back)",
                            "an SBOM that large lists more than an image holds: report it")


def attach_blob(image: str, digest: str, artifact_type: str, layer_type: str, blob: bytes,
                title: str, *, tag: str | None = None) -> str:
    """Push blob as the one layer of an artifact whose subject is image@digest (by digest, or at
    tag); the artifact's reference."""
    report_tag(digest)  # a sha256 digest, or a usage error
    _bounded(blob, title)
    ref = parse_ref(image)
    c = client(ref.host)
    subject = _subject(c, ref, digest)
    blob_digest = c.put_blob(ref.repo, blob)
    c.put_blob(ref.repo, EMPTY)
    created = datetime.now(UTC).isoformat(timespec="microseconds")
    layer = attachments.descriptor(layer_type, blob_digest, len(blob), {attachments.TITLE: title})

    def manifest_for(subj: tuple[str, str, int] | None) -> dict[str, Any]:
        return attachments.artifact_manifest(
            artifact_type, layer, sha256(EMPTY),
            {"mediaType": subj[1], "digest": subj[0], "size": subj[2]} if subj else None, created)

    return _put_artifact(c, ref, digest, subject, manifest_for, tag)[0]


def _append_to_cosign_image(c: Client, ref: Ref, tag: str, layer: dict[str, Any]) -> str:
    """cosign keeps signatures (`.sig`) and attestations (`.att`) as the layers of one OCI image
    per digest: add a layer to it (one already there stays; the same blob is not added twice)."""
    got = c.get_manifest(Ref(ref.host, ref.repo, tag), (OCI_MANIFEST,))
    layers: list[dict[str, Any]] = []
    if got is not None:
        try:
            old = parse_json(got[0]).get("layers", [])
            layers = [x for x in old if isinstance(x, dict)][:MAX_LISTED] \
                if isinstance(old, list) else []
        except (ValueError, AttributeError):
            layers = []
    if not any(x.get("digest") == layer["digest"] and x.get("annotations") ==
               layer.get("annotations") for x in layers):
        layers.append(layer)
    config = json.dumps({"architecture": "", "os": "", "config": {},
                         "rootfs": {"type": "layers",
                                    "diff_ids": [str(x.get("digest")) for x in layers]}},
                        sort_keys=True, separators=(",", ":")).encode()
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": attachments.descriptor(attachments.OCI_CONFIG,
                                                 c.put_blob(ref.repo, config), len(config)),
                "layers": layers}
    _check(c.put_manifest(ref.repo, tag, json.dumps(manifest, sort_keys=True).encode(),
                          OCI_MANIFEST), f"push of {tag} to {ref.host}/{ref.repo}", (201,))
    return f"{ref.host}/{ref.repo}:{tag}"


def push_cosign_signature(image: str, digest: str, payload: bytes, signature: str) -> str:
    """cosign's signature image at tag sha256-<hex>.sig: a layer per signature, the
    simple-signing payload, the signature in the layer's annotation."""
    ref = parse_ref(image)
    c = client(ref.host)
    _subject(c, ref, digest)
    layer = attachments.descriptor(signing.SIMPLESIGNING_MEDIA_TYPE,
                                   c.put_blob(ref.repo, payload), len(payload),
                                   {signing.COSIGN_SIGNATURE_ANNOTATION: signature})
    return _append_to_cosign_image(c, ref, attachments.cosign_tag(digest), layer)


def push_cosign_attestation(image: str, digest: str, envelope: bytes,
                            predicate_type: str) -> str:
    """cosign's attestation image at tag sha256-<hex>.att (what `cosign verify-attestation`
    reads): a layer per DSSE envelope, its predicate type annotated."""
    ref = parse_ref(image)
    c = client(ref.host)
    _subject(c, ref, digest)
    _bounded(envelope, "the attestation")
    layer = attachments.descriptor(signing.DSSE_MEDIA_TYPE, c.put_blob(ref.repo, envelope),
                                   len(envelope), {"predicateType": predicate_type})
    return _append_to_cosign_image(c, ref, attachments.cosign_att_tag(digest), layer)


def _read_artifact(c: Client, ref: Ref, reference: str, where: str
                   ) -> list[attachments.Found]:
    """An artifact manifest (by digest or tag) and its layers (an envbuild artifact has one;
    cosign's signature image one per signature, at most MAX_LISTED read); [] when absent."""
    is_digest = refs.is_digest(reference)
    got = c.get_manifest(Ref(ref.host, ref.repo, "" if is_digest else reference,
                             reference if is_digest else ""), (OCI_MANIFEST,))
    if got is None:
        return []
    try:
        manifest = parse_json(got[0])
        layers = [(str(x["digest"]), str(x["mediaType"])) for x in manifest["layers"]]
    except (ValueError, KeyError, TypeError):
        return []
    return [attachments.Found(where, manifest, layer_type,
                              c.get_blob(ref.repo, layer_digest, ATTACHMENT_LIMIT), layer_digest)
            for layer_digest, layer_type in layers[:MAX_LISTED] if refs.is_digest(layer_digest)]


def manifest_members(image: str, digest: str) -> dict[str, str] | None:
    """platform -> digest when image@digest is an index (or manifest list); None otherwise."""
    ref = parse_ref(image)
    c = client(ref.host)
    _subject(c, ref, digest)
    return index_platforms(str(ref.with_digest(digest))) or None


def fetch_attachments(image: str, digest: str
                      ) -> tuple[dict[str, list[attachments.Found]], list[attachments.Found],
                                 str]:
    """Every envbuild artifact attached to image@digest, by kind (the referrers API and the
    fallback tag's index, plus the report's own tag; at most MAX_LISTED), cosign's signatures,
    and how they were found (referrers | tag | referrers+tag)."""
    ref = parse_ref(image)
    c = client(ref.host)
    _subject(c, ref, digest)
    api = c.referrers(ref.repo, digest, None)
    index = _index_at(c, ref, attachments.fallback_tag(digest))
    ms = index.get("manifests") if isinstance(index, dict) else None
    tagged = [m for m in ms if isinstance(m, dict)] if isinstance(ms, list) else []
    via = "+".join(w for w, there in (("referrers", bool(api)), ("tag", bool(tagged))) if there) \
        or ("referrers" if api is not None else "tag")
    found: dict[str, list[attachments.Found]] = {}
    seen: set[str] = set()
    for m in [*(api or []), *tagged][:MAX_LISTED]:
        kind = attachments.KINDS.get(str(m.get("artifactType")))
        d = m.get("digest")
        if kind is None or not isinstance(d, str) or not refs.is_digest(d) or d in seen:
            continue
        seen.add(d)
        found.setdefault(kind, []).extend(
            _read_artifact(c, ref, d, f"{ref.host}/{ref.repo}@{d}")[:1])
    if not found.get("report"):
        arts = _read_artifact(c, ref, report_tag(digest),
                              f"{ref.host}/{ref.repo}:{report_tag(digest)}")[:1]
        if arts:
            found["report"] = arts
    sig_tag = attachments.cosign_tag(digest)
    sigs = [f for f in _read_artifact(c, ref, sig_tag, f"{ref.host}/{ref.repo}:{sig_tag}")
            if f.layer_type == signing.SIMPLESIGNING_MEDIA_TYPE]
    return found, sigs, via


@record
class Attached:
    image: str  # host/repo@digest
    report: dict[str, Any]
    artifact: str  # where it was found
    via: str  # referrers | tag


def fetch_report(image: str) -> Attached | None:
    """The validation report attached to image (a tag or a digest); None when none is."""
    ref = parse_ref(image)
    c = client(ref.host)
    digest = ref.digest
    if not digest:
        hit = c.head_manifest(ref)
        if hit is None:
            raise EnvbuildError(f"{image} is not in the registry",
                                "check the reference (docker push it first)")
        digest = hit[0]
    candidates: list[tuple[str, str]] = []
    for m in c.referrers(ref.repo, digest, REPORT_TYPE) or []:
        if isinstance(m.get("digest"), str) and refs.is_digest(m["digest"]):
            candidates.append((m["digest"], "referrers"))
    candidates.append((report_tag(digest), "tag"))
    for reference, via in candidates:
        got = c.get_manifest(Ref(ref.host, ref.repo, *((reference, "") if via == "tag"
                                                        else ("", reference))), (OCI_MANIFEST,))
        if got is None:
            continue
        try:
            manifest = parse_json(got[0])
            layer = next(x for x in manifest["layers"] if x["mediaType"] == REPORT_TYPE)
            report = parse_json(c.get_blob(ref.repo, str(layer["digest"])))
        except (ValueError, KeyError, TypeError, StopIteration):
            continue
        if isinstance(report, dict):
            return Attached(f"{ref.host}/{ref.repo}@{digest}", report,
                            f"{ref.host}/{ref.repo}" + (f":{reference}" if via == "tag"
                                                        else f"@{reference}"), via)
    return None
