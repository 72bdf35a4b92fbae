"""What a built CUDA image's GPU-less report must say of its wheel, against the matrix row it was
resolved from (shared by the x86_64 and the emulated arm64 image tests)."""

from __future__ import annotations

from typing import Any

from envbuild.matrix import Variant
from envbuild.validator.rules import cudnn_version_str


def assert_wheel_facts(checks: dict[str, dict[str, Any]], spec: dict[str, Any],
                       variant: Variant, row: str) -> None:
    """The real arch list, CUDA, cuDNN and NCCL of the installed wheel equal the matrix's `row`
    (named in the failure: the fact to fix), and every CUDA package is of the spec's major."""
    torch_facts = checks["facts.torch"]["evidence"]
    assert torch_facts["arch_list"] == spec["archs"], f"fix matrix/torch.toml {row}"
    assert torch_facts["cuda"] == variant.version
    assert variant.cudnn.startswith(cudnn_version_str(torch_facts["cudnn"]) + ".")
    assert variant.nccl.startswith(torch_facts["nccl"])
    majors = {d["major"] for d in checks["cuda.packages"]["evidence"]["distributions"]
              if d["major"] is not None}
    assert majors == {int(variant.version.split(".")[0])}
