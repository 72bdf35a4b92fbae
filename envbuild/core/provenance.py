"""An image's build provenance: an in-toto Statement v1 whose predicate is SLSA Provenance v1.

Pure: every fact is an argument (times, ids and digests included), so the same build gives the
same statement. The subject is an argument too: a local image is named by its image id, and a
push re-subjects the statement to the registry's manifest digest
(envbuild.core.attachments.resubject)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from envbuild.common.digest import sha256_hex
from envbuild.common.record import record

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
# What an envbuild build is (SLSA: a URI naming the build's template, versioned with its shape;
# docs/guides/team.md describes it). URNs: envbuild owns no domain to put an https URI under.
BUILD_TYPE = "urn:envbuild:build-type:image:v1"
BUILDER_ID = "urn:envbuild:builder:docker-buildkit"


@record
class Subject:
    name: str  # the image reference
    digest: str  # sha256:... (a local image: its image id; a pushed one: its manifest digest)


@record
class Dependency:
    """One resolved dependency (SLSA ResourceDescriptor): uri and/or name, and its digest."""

    name: str = ""
    uri: str = ""
    digest: str = ""  # sha256:... or ''
    download: str = ""  # where it came from (downloadLocation)
    annotations: Mapping[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.uri:
            out["uri"] = self.uri
        if self.name:
            out["name"] = self.name
        if self.digest:
            alg, _, value = self.digest.partition(":")
            out["digest"] = {alg: value}
        if self.download:
            out["downloadLocation"] = self.download
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out


def _descriptor_subject(s: Subject) -> dict[str, Any]:
    alg, _, value = s.digest.partition(":")
    return {"name": s.name, "digest": {alg: value}}


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def spec_digest(spec_json: Mapping[str, Any]) -> str:
    """sha256 of the spec's JSON form (canonical): the externalParameters' own digest."""
    return "sha256:" + sha256_hex(canonical_json(spec_json).encode("utf-8", "surrogatepass"))


def statement(subject: Subject, *, spec: Mapping[str, Any], spec_hash: str,
              inputs: Mapping[str, Any], envbuild_version: str, matrix_snapshot: str,
              dependencies: Iterable[Dependency], builder: Mapping[str, str],
              invocation_id: str, started: datetime, finished: datetime,
              byproducts: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The Statement (a dict, JSON-ready). `spec`: the resolved spec's JSON form; `inputs`: the
    build's other options (base image, packages); `builder`: its versions (engine, buildkit);
    `byproducts`: ResourceDescriptors of what came out beside the image (the SBOM, the
    validation report), each with its digest."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [_descriptor_subject(subject)],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"spec": dict(spec), "spec_hash": spec_hash,
                                       "spec_digest": spec_digest(spec), **dict(inputs)},
                "internalParameters": {"envbuild": envbuild_version,
                                       "matrix": {"sha256": matrix_snapshot} if matrix_snapshot
                                       else {}},
                "resolvedDependencies": [d.to_json() for d in dependencies],
            },
            "runDetails": {
                "builder": {"id": BUILDER_ID,
                            "version": {k: v for k, v in builder.items() if v}},
                "metadata": {"invocationId": invocation_id,
                             "startedOn": _time(started), "finishedOn": _time(finished)},
                "byproducts": [dict(b) for b in byproducts],
            },
        },
    }


def _time(t: datetime) -> str:
    """RFC 3339 in UTC, seconds (SLSA's timestamps)."""
    from datetime import UTC

    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
