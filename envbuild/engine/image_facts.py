"""What a built image holds, for its SBOM and provenance: one container run of the standalone
probe (envbuild/engine/sbom_probe.py) with the image's own venv Python, no network, its output
read bounded and parsed as untrusted JSON. The raw facts go to envbuild.core.sbom (pure)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envbuild.common.boundedio import RECORD_BYTES, TooDeep, parse_json
from envbuild.common.errors import EnvbuildError
from envbuild.engine import docker
from envbuild.render.context import VENV

REPORT_DIR = "/opt/envbuild"  # where the Dockerfile's pip installs leave pip-report-STEP.json
OUTPUT_LIMIT = RECORD_BYTES  # the probe caps what it prints far below this


def probe_source() -> str:
    return (Path(__file__).with_name("sbom_probe.py")).read_text(encoding="utf-8")


def probe_argv() -> list[str]:
    """The probe's command line in the image: its venv's Python, isolated (-I: no PYTHONPATH,
    no user site), the probe's source and where the pip reports are."""
    return [f"{VENV}/bin/python", "-I", "-c", probe_source(), REPORT_DIR]


def collect(ref: str, *, platform: str | None = None, timeout: float = 300) -> dict[str, Any]:
    """The raw facts of the image `ref` (a dict, shape unchecked: core.sbom.facts checks it)."""
    run = docker.run_container(ref, probe_argv(), target="cpu", gpus=False, timeout=timeout,
                               labels={docker.LABEL_ROLE: "sbom", "io.envbuild.image": ref},
                               platform=platform, network=False, output_limit=OUTPUT_LIMIT)
    hint = (f"check `docker run --rm {ref} {VENV}/bin/python -V`; an image envbuild did not "
            "build may have no venv there")
    if run.timed_out:
        raise EnvbuildError(f"listing what {ref} holds did not finish within {timeout:.0f} s",
                            hint)
    if run.truncated:
        raise EnvbuildError(f"listing what {ref} holds printed more than "
                            f"{OUTPUT_LIMIT >> 20} MiB", hint)
    text = run.output.strip()
    try:
        data = parse_json(text) if run.exit_code == 0 else None
    except (ValueError, TooDeep, RecursionError):
        data = None
    if not isinstance(data, dict):
        tail = text[-300:] if text else "no output"
        raise EnvbuildError(f"could not list what {ref} holds (exit {run.exit_code}): {tail}",
                            hint)
    return data
