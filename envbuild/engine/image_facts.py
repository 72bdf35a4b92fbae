"""What a built image holds, for its SBOM, provenance and the team lock: one container run of the
standalone probe (envbuild/engine/sbom_probe.py) with the image's own venv Python, no network,
the image's ENTRYPOINT replaced by that Python (nvidia/cuda's prints a banner), its output read
bounded and only what follows the probe's last MARKER line parsed, as untrusted JSON. The raw
facts go to envbuild.core.sbom (pure)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envbuild.common.boundedio import RECORD_BYTES, TooDeep, parse_json
from envbuild.common.errors import EnvbuildError
from envbuild.engine import docker
from envbuild.engine.sbom_probe import DISTS_ONLY, MARKER
from envbuild.render.context import VENV

REPORT_DIR = "/opt/envbuild"  # where the Dockerfile's pip installs leave pip-report-STEP.json
OUTPUT_LIMIT = RECORD_BYTES  # the probe caps what it prints far below this


def probe_source() -> str:
    return (Path(__file__).with_name("sbom_probe.py")).read_text(encoding="utf-8")


def probe_argv(arg: str = REPORT_DIR) -> list[str]:
    """The probe's command line in the image: its venv's Python, isolated (-I: no PYTHONPATH,
    no user site), the probe's source and where the pip reports are (DISTS_ONLY: the
    distributions alone)."""
    return [f"{VENV}/bin/python", "-I", "-c", probe_source(), arg]


def probe_output(text: str, marker: str = MARKER) -> Any:
    """The JSON value after the output's last `marker` line (whatever printed before it, a
    banner, is skipped; the text is the run's, read bounded); ValueError when there is no
    marker line or what follows is not JSON, TooDeep when it nests too deep. `marker`: the
    probe's own (the SBOM probe's by default; envbuild/validator/memprobe.py has another)."""
    at = -1
    for mark in (f"\n{marker}\n", f"\n{marker}\r\n"):
        at = max(at, text.rfind(mark))
    if at < 0 and text.startswith((f"{marker}\n", f"{marker}\r\n")):
        at = 0  # the first line (no newline before it)
    elif at >= 0:
        at += 1
    if at < 0:
        raise ValueError("no probe output")
    return parse_json(text[at:].split("\n", 1)[1].strip())


def _run(ref: str, arg: str, role: str, *, platform: str | None, timeout: float) -> dict[str, Any]:
    argv = probe_argv(arg)
    run = docker.run_container(ref, argv[1:], entrypoint=argv[:1], target="cpu", gpus=False,
                               timeout=timeout,
                               labels={docker.LABEL_ROLE: role, "io.envbuild.image": ref},
                               platform=platform, network=False, output_limit=OUTPUT_LIMIT)
    hint = (f"check `docker run --rm --entrypoint {VENV}/bin/python {ref} -V`; an image envbuild "
            "did not build may have no venv there")
    if run.timed_out:
        raise EnvbuildError(f"listing what {ref} holds did not finish within {timeout:.0f} s",
                            hint)
    if run.truncated:
        raise EnvbuildError(f"listing what {ref} holds printed more than "
                            f"{OUTPUT_LIMIT >> 20} MiB", hint)
    try:
        data = probe_output(run.output) if run.exit_code == 0 else None
    except (ValueError, TooDeep, RecursionError):
        data = None
    if not isinstance(data, dict):
        text = run.output.strip()
        tail = text[-300:] if text else "no output"
        raise EnvbuildError(f"could not list what {ref} holds (exit {run.exit_code}): {tail}",
                            hint)
    return data


def collect(ref: str, *, platform: str | None = None, timeout: float = 300) -> dict[str, Any]:
    """The raw facts of the image `ref` (a dict, shape unchecked: core.sbom.facts checks it)."""
    return _run(ref, REPORT_DIR, "sbom", platform=platform, timeout=timeout)


def installed(ref: str, *, timeout: float = 120) -> dict[str, Any]:
    """The raw facts of `ref`'s venv distributions alone ({"dists": [...]}, unchecked): name,
    version and how each was installed (its `direct` reference kind, '' from an index)."""
    return _run(ref, DISTS_ONLY, "freeze", platform=None, timeout=timeout)
