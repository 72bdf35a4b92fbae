"""The resolved environment spec: everything later stages need, with its content hash."""

from __future__ import annotations

import json
from dataclasses import asdict
from functools import cached_property
from typing import Any

from envbuild.common.digest import sha256_hex
from envbuild.common.record import record

SPEC_SCHEMA = 1
# Left out of the identity and the JSON while None: the hashes of older specs stay stable.
_OPTIONAL = ("max_driver", "require_cuda", "base_id", "forward_compat", "platform")
# The platform every spec had before --platform: left out of the identity, so those hashes stay.
_DEFAULT_PLATFORM = "linux/amd64"


@record
class Spec:
    target: str
    torch: str
    torchvision: str | None
    torchaudio: str | None
    python: str
    python_source: str  # os | standalone | native
    variant: str
    torch_cuda: str | None
    rocm: str | None
    cuda_image: str | None
    cudnn: str | None
    nccl: str | None
    os: str
    flavor: str | None
    base_image: str | None
    index_url: str
    min_driver: str | None
    min_macos: str | None
    archs: tuple[str, ...]
    gpus: tuple[dict[str, str], ...]
    components: tuple[str, ...]
    trace: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    max_driver: str | None = None  # newest driver BRANCH (e.g. "580") when a GPU caps it
    # CUDA on a plain OS base (no nvidia/cuda image under it): the X.Y the image's
    # NVIDIA_REQUIRE_CUDA names, written by the template with the rest of the runtime's settings.
    require_cuda: str | None = None
    base_id: str | None = None  # the inspected --base-image's id (sha256:...): the real base
    # --forward-compat: the version of NVIDIA's forward-compatibility libraries in the image
    forward_compat: str | None = None
    # the container's platform (linux/amd64, linux/arm64); None for a native environment (MPS)
    platform: str | None = None
    # --with: the extension releases installed on top of torch (extensions.Chosen.to_json)
    extensions: tuple[dict[str, str], ...] = ()

    def identity(self) -> dict[str, Any]:
        """The fields that define the environment (the trace only explains it)."""
        d = asdict(self)
        d.pop("trace")
        d.pop("warnings")
        for key in _OPTIONAL:  # absent unless set: the hashes of older specs stay stable
            if d[key] is None:
                d.pop(key)
        if d.get("platform") == _DEFAULT_PLATFORM:
            d.pop("platform")
        if not d["extensions"]:  # a spec without --with hashes as before
            d.pop("extensions")
        return d

    @cached_property
    def hash(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return sha256_hex(blob.encode())[:12]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["archs"] = list(self.archs)
        d["gpus"] = [dict(g) for g in self.gpus]
        d["components"] = list(self.components)
        d["trace"] = list(self.trace)
        d["warnings"] = list(self.warnings)
        d["extensions"] = [dict(e) for e in self.extensions]
        if not d["extensions"]:
            d.pop("extensions")
        for key in _OPTIONAL:
            if d[key] is None:
                d.pop(key)
        return {"schema": SPEC_SCHEMA, **d, "spec_hash": self.hash}


def from_json(data: dict[str, Any]) -> Spec:
    fields = {k: v for k, v in data.items() if k not in ("schema", "spec_hash")}
    for key in ("archs", "components", "trace", "warnings"):
        fields[key] = tuple(fields.get(key, ()))
    fields["gpus"] = tuple(dict(g) for g in fields.get("gpus", ()))
    fields["extensions"] = tuple(dict(e) for e in fields.get("extensions", ()))
    return Spec(**fields)
