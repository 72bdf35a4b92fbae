"""Which layout the torch index has, and so how torch is pinned. Pure.

Two layouts exist:
- "pytorch": the PyTorch wheel index (index_base/<variant>, or a mirror of one variant's index):
  every wheel carries the variant as a local version (torch 2.13.0+cu130), so the pins carry it.
- "pypi": PyPI or a PyPI mirror (Artifactory, Nexus, devpi): wheels have no local version, and
  `torch==X.Y.Z` on Linux x86_64 *is* the release's default variant (matrix/torch.toml
  default_variant). The pins drop the local tag, the validator confirms the build; any other
  variant does not exist there, which is refused before a build.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from envbuild.common.errors import ConflictError, UsageError
from envbuild.common.record import record
from envbuild.common.versions import minor_of
from envbuild.core.spec import Spec
from envbuild.matrix import Matrix

KINDS = ("pypi", "pytorch")


@record
class TorchIndex:
    kind: str  # pypi | pytorch
    why: str  # how the kind was decided, for the trace and messages
    local_tag: bool  # pin torch==X.Y.Z+<variant> (True) or torch==X.Y.Z (False)


def _norm(url: str) -> str:
    return url.strip().rstrip("/").lower()


def index_kind(url: str | None, m: Matrix, override: str | None = None) -> tuple[str, str]:
    """(kind, why) of a torch index URL (None: the matrix's own PyTorch index).

    Decided from the URL's shape: the matrix's pypi_index or a path ending in /simple is PyPI-like;
    index_base, or a path whose last segment is a variant tag the matrix knows (cu130, cpu,
    rocm6.4) is the PyTorch layout; anything else keeps the option's documented meaning (a mirror
    of the PyTorch index). `override` (--torch-index-kind) wins: an Artifactory remote of
    download.pytorch.org/whl/cu130 ends in /simple too.
    """
    if override is not None:
        if override not in KINDS:
            raise UsageError(f"--torch-index-kind {override[:40]!r} is not pypi or pytorch",
                             "pypi: PyPI or a PyPI mirror (no +cuXXX wheels); pytorch: the "
                             "PyTorch wheel index or a mirror of one variant's index")
        return override, "--torch-index-kind"
    meta = m.meta.get("torch", {})
    if url is None:
        return "pytorch", "the PyTorch wheel index (matrix index_base)"
    u = _norm(url)
    if u == _norm(str(meta.get("pypi_index", "https://pypi.org/simple"))):
        return "pypi", "the matrix's pypi_index"
    base = _norm(str(meta.get("index_base", "")))
    if base and (u == base or u.startswith(base + "/")):
        return "pytorch", "under the matrix's index_base"
    last = urlsplit(u).path.rstrip("/").rsplit("/", 1)[-1]
    if last in {v.tag.lower() for v in m.variants}:
        return "pytorch", f"its path ends in the variant tag {last}"
    if last == "simple":
        return "pypi", "a PEP 503 simple index: its path ends in /simple"
    return "pytorch", "assumed a PyTorch-index mirror (--torch-index-kind pypi if it is not)"


def wheelhouse_kind(names: list[str]) -> str | None:
    """The index layout a wheelhouse's torch wheels came from (pure): 'pypi' when they carry no
    local tag (torch-2.13.0-cp311-...: PyPI's default build), 'pytorch' when they do
    (torch-2.13.0+cpu-...), None without a torch wheel or with both kinds."""
    kinds = {("pytorch" if "+" in n.split("-")[1] else "pypi") for n in names
             if n.startswith("torch-") and n.endswith(".whl") and n.count("-") >= 4}
    return kinds.pop() if len(kinds) == 1 else None


def plan(spec: Spec, m: Matrix, url: str | None, override: str | None = None) -> TorchIndex:
    """How to pin torch for this index; ConflictError (exit 1) when the index cannot have the
    resolved variant: the request and the index are each well formed, together unsatisfiable
    (the same class as a resolver conflict), refused before anything is built."""
    kind, why = index_kind(url, m, override)
    if spec.target == "mps":  # macOS wheels come from PyPI and never carry a local tag
        return TorchIndex(kind, why, local_tag=False)
    if kind == "pytorch":
        return TorchIndex(kind, why, local_tag=True)
    rel = m.torch_release(minor_of(spec.torch))
    default = rel.default_variant if rel else None
    if spec.variant != default:
        shown = f"a PyPI-like index ({why})"
        fix = [f"use the PyTorch index {str(m.meta['torch']['index_base']).rstrip('/')}/"
               f"{spec.variant} or a mirror of it (--torch-index-kind pytorch if that mirror's "
               "URL ends in /simple)"]
        known = m.variants_of(rel.version) if rel else []
        dv = next((v for v in known if v.tag == default), None)
        if dv is not None and dv.kind == "cuda":
            fix.append(f"or pick the build PyPI has for torch {spec.torch}: {default} "
                       f"(`envbuild make --target cuda --cuda {dv.version} --torch {spec.torch}`)")
        raise ConflictError(
            f"torch {spec.torch}+{spec.variant} is not on {shown}: PyPI publishes only the "
            f"{default or 'default'} build of torch {spec.torch} for Linux x86_64, without a local "
            "tag", "; ".join(fix))
    return TorchIndex(kind, why, local_tag=False)
