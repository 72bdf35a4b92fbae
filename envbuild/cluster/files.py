"""Writing the cluster validation's files into --out (the sbatch script, the worker, the
Kubernetes manifests, the job's own log): one file at a time, atomically."""

from __future__ import annotations

from pathlib import Path


def write_file(path: Path, text: str, mode: int = 0o644) -> None:
    """Write through a temporary sibling and rename it over `path`: a reader never sees half."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    tmp.replace(path)
