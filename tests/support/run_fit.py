"""Helpers of the `envbuild run --fit` tests (tests/unit/test_run_fit.py, tests/cli/
test_run_fit.py): a fit report saved as `envbuild fit --json` prints it, and the run preflight on
a recorded host (the doctor's fixtures), with Docker's `docker info` put in."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from envbuild.core import compat
from envbuild.core.memory import Job
from envbuild.core.spec import Spec, from_json
from envbuild.doctor import model, record
from envbuild.doctor.model import Cmd, HostFacts
from envbuild.features import fit, run
from envbuild.matrix import Matrix
from tests.support import FIXTURES

LLAMA_8B = FIXTURES / "fit" / "configs" / "meta-llama-3-8b.json"
SPEC_H100 = FIXTURES / "hosts" / "h100-sxm-driver580-torch2.11-cu130" / "spec-cu130.json"
NVIDIA_DOCKER: dict[str, object] = {
    "ServerVersion": "27.3.1", "OperatingSystem": "Ubuntu 24.04",
    "Runtimes": {"nvidia": {"path": "nvidia-container-runtime"}, "runc": {}},
    "DefaultRuntime": "runc", "CgroupDriver": "systemd", "CgroupVersion": "2"}
FULL = Job(mixed=True)  # an 8B full fine-tune, mixed-precision AdamW
INFER = Job(mode="infer", batch=1, seq=2048)  # its bf16 inference


def report(tmp: Path, job: Job, name: str = "report.json", **req: Any) -> Path:
    """What `envbuild fit --config LLAMA_8B ... --method formula --gpu H100 --json` prints,
    saved to tmp/name."""
    made = fit.fit(fit.FitRequest(job=job, config=LLAMA_8B, method="formula", gpus=("H100",),
                                  **req))
    path = tmp / name
    path.write_text(json.dumps(made.to_json()))
    return path


def spec_of(path: Path) -> Spec:
    return from_json(json.loads(path.read_text()))


def host(name: str, docker: Mapping[str, object] = NVIDIA_DOCKER) -> HostFacts:
    """The doctor's recorded host `name` with `docker info` replaced by `docker`."""
    facts = record.load(FIXTURES / "doctor" / name)
    outputs = dict(facts.outputs)
    outputs[model.DOCKER_INFO] = Cmd(model.OUTPUTS[model.DOCKER_INFO], 0, json.dumps(docker))
    return replace(facts, outputs=outputs)


def preflight(m: Matrix, facts: HostFacts, **req: Any) -> run.Preflight:
    image = run.ImageFacts("envbuild/cu130:test", spec_of(SPEC_H100))
    return run.preflight(image, facts, m, compat.host_rules(), run.RunRequest(**req))
