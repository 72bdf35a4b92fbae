"""The resolved environment spec: everything later stages need, with its content hash."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any

SPEC_SCHEMA = 1


@dataclass(frozen=True)
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

    def identity(self) -> dict[str, Any]:
        """The fields that define the environment (the trace only explains it)."""
        d = asdict(self)
        d.pop("trace")
        d.pop("warnings")
        if d["max_driver"] is None:  # absent unless a GPU caps the driver: hashes stay stable
            d.pop("max_driver")
        return d

    @cached_property
    def hash(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["archs"] = list(self.archs)
        d["gpus"] = [dict(g) for g in self.gpus]
        d["components"] = list(self.components)
        d["trace"] = list(self.trace)
        d["warnings"] = list(self.warnings)
        if d["max_driver"] is None:
            d.pop("max_driver")
        return {"schema": SPEC_SCHEMA, **d, "spec_hash": self.hash}


def from_json(data: dict[str, Any]) -> Spec:
    fields = {k: v for k, v in data.items() if k not in ("schema", "spec_hash")}
    for key in ("archs", "components", "trace", "warnings"):
        fields[key] = tuple(fields.get(key, ()))
    fields["gpus"] = tuple(dict(g) for g in fields.get("gpus", ()))
    return Spec(**fields)
