"""An image's attestation data: its SBOM (CycloneDX 1.6), its build provenance (in-toto
Statement v1, SLSA Provenance v1) and its validation report, made after validation and before
any push (ship() calls `attest` through Shipping's hook), and written as three files.

The engine collects the raw facts (one container run: envbuild/engine/image_facts.py), the pure
builders in envbuild/core (sbom, provenance) turn them into documents, this module composes."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild.common.errors import EnvbuildError, UsageError
from envbuild.common.record import record

if TYPE_CHECKING:
    from envbuild.core.provenance import Dependency
    from envbuild.core.sbom import ImageFacts
    from envbuild.core.spec import Spec
    from envbuild.engine.build import BuildResult
    from envbuild.render.context import RenderOptions

SBOM_FILE = "sbom.cdx.json"
PROVENANCE_FILE = "provenance.intoto.json"
VALIDATION_FILE = "validation.json"
SBOM_MEDIA_TYPE = "application/vnd.cyclonedx+json"
# the build context's linked wheelhouse is left out of its digest: each installed wheel is a
# resolved dependency of its own, with its sha256
CONTEXT_EXCLUDES = ("wheelhouse", ".envbuild-manifest.json")


@record
class BaseDigest:
    """What the base image reference resolved to: its digest and where that came from."""

    ref: str
    digest: str  # sha256:... ('' when nothing knows it)
    kind: str  # pinned_in_ref | registry | repo_digest | image_id | unknown


@record
class Attestation:
    sbom_text: str  # the SBOM file's exact bytes (its digest is a byproduct of the provenance)
    provenance: dict[str, Any]
    report_text: str | None  # validation.json's exact bytes, when validation ran
    components: int = 0

    @property
    def sbom(self) -> dict[str, Any]:
        return dict(json.loads(self.sbom_text))

    @property
    def report(self) -> dict[str, Any] | None:
        return dict(json.loads(self.report_text)) if self.report_text is not None else None

    def write(self, directory: Path) -> dict[str, Path]:
        """The three files into `directory` (made if missing), each written atomically:
        {"sbom", "provenance", "validation"?} -> path. Without a report, a validation.json
        left there by an earlier run is removed."""
        from envbuild.common.files import write_atomic

        d = out_dir(directory, "--sbom")
        try:
            d.mkdir(parents=True, exist_ok=True)
            out = {"sbom": d / SBOM_FILE, "provenance": d / PROVENANCE_FILE}
            write_atomic(out["sbom"], self.sbom_text, 0o644)
            write_atomic(out["provenance"], provenance_text(self.provenance), 0o644)
            if self.report_text is not None:
                out["validation"] = d / VALIDATION_FILE
                write_atomic(out["validation"], self.report_text, 0o644)
            else:  # not validated now: an older report must not pass for this image's
                (d / VALIDATION_FILE).unlink(missing_ok=True)
        except OSError as exc:
            from envbuild.common.outputs import os_error

            raise os_error(exc, d, "write", "--sbom") from None
        return out


def provenance_text(stmt: Mapping[str, Any]) -> str:
    return json.dumps(stmt, indent=2, ensure_ascii=False) + "\n"


def report_text(report: Mapping[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def out_dir(directory: Path, flag: str) -> Path:
    """A directory the files can go to, checked before any build: not a file, and (it or the
    nearest existing parent) writable. UsageError (exit 2) otherwise."""
    from envbuild.common.outputs import resolve_out

    d = resolve_out(directory, flag)
    if d.exists() and not d.is_dir():
        raise UsageError(f"{flag} {d} is a file, not a directory",
                         f"give a directory (made if missing), e.g. {flag} ./envbuild-out")
    probe = d
    while not probe.exists():
        probe = probe.parent
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {d}: {probe} is not writable",
                         f"choose a directory you can write to, e.g. {flag} ./envbuild-out")
    return d


# -- the base image's digest ------------------------------------------------------------------
def current_base_digest(ref: str) -> str:
    """The registry digest the base image reference resolves to now: the one it pins, else its
    registry's, else the local engine's repo digest of it ('' when none knows)."""
    found = base_digest(ref)
    return found.digest if found.kind != "image_id" else ""


def base_digest(ref: str) -> BaseDigest:
    """current_base_digest, and for a base only this engine has (built or imported here, never
    in a registry) its image id (kind image_id)."""
    from envbuild.core import refs
    from envbuild.engine import docker, registry

    if refs.pinned_digest(ref):
        return BaseDigest(ref, refs.pinned_digest(ref), "pinned_in_ref")
    try:
        digest = registry.resolve_digest(ref)
        if digest:
            return BaseDigest(ref, digest, "registry")
    except EnvbuildError:
        pass
    try:
        local = docker.local_image(ref)
    except EnvbuildError:
        return BaseDigest(ref, "", "unknown")
    known = refs.base_digest(ref, local)
    return BaseDigest(ref, str(known["digest"] or ""), str(known["kind"]))


# -- the attestation --------------------------------------------------------------------------
def dependencies(base: BaseDigest, context_digest: str, options: RenderOptions, spec: Spec,
                 wheelhouse: Path | None, f: ImageFacts,
                 platform: str | None) -> list[Dependency]:
    """SLSA resolvedDependencies (pure): the base image by digest, the rendered context, where
    the wheels came from (the torch index, the user index, or the wheelhouse) and every
    installed distribution, with the sha256 of its wheel where pip reported one."""
    from envbuild.common.redact import mask_url
    from envbuild.core.provenance import Dependency
    from envbuild.core.sbom import canonical, pypi_purl

    out = [Dependency(name="base image", uri=docker_purl(base.ref, platform),
                      digest=base.digest, annotations={"reference": base.ref,
                                                       "digest_kind": base.kind})]
    out.append(Dependency(name="build context", digest=f"sha256:{context_digest}",
                          annotations={"excludes": ", ".join(CONTEXT_EXCLUDES) + ": each "
                                       "installed wheel is listed with its own sha256"}))
    if wheelhouse is not None:  # by its directory's name: where it is here is nobody's business
        out.append(Dependency(name="wheelhouse", uri=wheelhouse_uri(wheelhouse),
                              annotations={"role": "the torch stack's only source "
                                           "(pip --no-index); user packages found there first"}))
    else:
        out.append(Dependency(name="torch index",
                              uri=mask_url(options.torch_index_url or spec.index_url)))
    if options.pip or options.team_pip:
        out.append(Dependency(name="pip index", uri=mask_url(options.pip_index_url or
                                                             "https://pypi.org/simple")))
    wheels = {(canonical(w.name), w.version): w for w in f.installed_wheels()}
    for d in f.dists:
        w = wheels.get((d.key, d.version))
        purl = pypi_purl(d.name, d.version)
        if w is None:
            out.append(Dependency(uri=purl, name=d.name, annotations={
                "sha256": "unknown: no pip installation report names it (installed with the "
                          "venv itself, or by a pip older than 22.2)"}))
        elif not w.sha256:
            out.append(Dependency(uri=purl, name=w.file or d.name, download=mask_url(w.url),
                                  annotations={"sha256": "not reported: a VCS or directory "
                                               "install", "step": w.step}))
        else:
            out.append(Dependency(uri=purl, name=w.file, digest=f"sha256:{w.sha256}",
                                  download=mask_url(w.url), annotations={"step": w.step}))
    return out


def wheelhouse_uri(wheelhouse: Path) -> str:
    """`wheelhouse:NAME`, NAME the directory's own name (percent-encoded): no path of the
    machine that built the image (its home directory, its user name) goes into the provenance;
    each wheel installed from it is a dependency of its own with its sha256."""
    from urllib.parse import quote

    return "wheelhouse:" + quote(wheelhouse.resolve().name or "wheelhouse", safe="")


def docker_purl(ref: str, platform: str | None) -> str:
    """pkg:docker/NAME@TAG of an image reference (BuildKit's own form), with the registry and
    platform as qualifiers; the reference itself when it does not parse."""
    from packageurl import PackageURL

    from envbuild.core import refs

    try:
        r = refs.parse(ref)
    except refs.RefError:
        return ref
    namespace, _, name = r.familiar.rpartition("/")
    host = r.host if r.host != refs.DEFAULT_REGISTRY else ""
    if host:
        namespace = namespace.removeprefix(host).lstrip("/")
    return str(PackageURL(type="docker", namespace=namespace or None, name=name,
                          version=r.tag or None,
                          qualifiers={k: v for k, v in (("repository_url", host),
                                                        ("platform", platform or "")) if v}
                          or None))


def attest(build: BuildResult, spec: Spec, context_digest: str, base: BaseDigest,
           report: Mapping[str, Any] | None, *, options: RenderOptions,
           wheelhouse: Path | None, started: datetime, matrix_snapshot: str,
           subject: tuple[str, str] | None = None) -> Attestation:
    """The image's SBOM, provenance and validation report. `context_digest`: the rendered
    build context's tree_digest (taken while it was on disk, CONTEXT_EXCLUDES left out);
    `report`: the validation's JSON (None: not validated); `subject`: (name, sha256:...) of the
    image, by default its tag and local image id."""
    from envbuild import __version__
    from envbuild.common.digest import sha256_hex
    from envbuild.core import provenance, sbom
    from envbuild.engine import docker, image_facts

    raw = image_facts.collect(build.tag, platform=spec.platform if build.emulated else None)
    f = sbom.facts(raw)
    finished = datetime.now(UTC)
    image_id = build.image_id
    serial = str(uuid.uuid5(uuid.NAMESPACE_URL, f"envbuild-sbom:{image_id}:{finished}"))
    described = sbom.Described(build.tag, image_id, spec.hash, base.ref, base.digest, base.kind,
                               __version__)
    sbom_text = sbom.bom_json(f, described, timestamp=finished, serial=serial)
    rep_text = report_text(report) if report is not None else None
    byproducts: list[dict[str, Any]] = [
        {"name": SBOM_FILE, "mediaType": SBOM_MEDIA_TYPE,
         "digest": {"sha256": sha256_hex(sbom_text.encode())}}]
    if rep_text is not None:
        byproducts.append({"name": VALIDATION_FILE, "mediaType": "application/json",
                           "digest": {"sha256": sha256_hex(rep_text.encode())}})
    name, digest = subject or (build.tag, image_id)
    stmt = provenance.statement(
        provenance.Subject(name, digest), spec=spec.to_json(), spec_hash=spec.hash,
        inputs={"base_image": base.ref, "pip": [*options.team_pip, *options.pip],
                "apt": list(options.apt)},
        envbuild_version=__version__, matrix_snapshot=matrix_snapshot,
        dependencies=dependencies(base, context_digest, options, spec, wheelhouse, f,
                                  spec.platform),
        builder={"envbuild": __version__, **docker.builder_versions(build.builder)},
        invocation_id=str(uuid.uuid4()), started=started, finished=finished,
        byproducts=byproducts)
    components = len(json.loads(sbom_text).get("components", []))
    return Attestation(sbom_text, stmt, rep_text, components)
