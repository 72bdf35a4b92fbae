"""The `resolve` and `render` use cases: a spec (with a size estimate when asked), and build
contexts written to disk (one, or every valid combination). Nothing here prints; the heavy
modules (jinja2, the size fetcher) load only when a call needs them, so `envbuild resolve`
starts fast."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild.common.errors import UsageError

if TYPE_CHECKING:
    from envbuild.core.request import Request
    from envbuild.core.size import SizeEstimate
    from envbuild.core.spec import Spec
    from envbuild.render.pipeline import ContextInputs, Prepared


class Resolved:
    """The spec, and its size estimate when asked for (never for mps). A plain class: no
    dataclass machinery on the start-up path of `envbuild resolve`."""

    __slots__ = ("size", "spec")

    def __init__(self, spec: Spec, size: SizeEstimate | None = None) -> None:
        self.spec = spec
        self.size = size

    def to_json(self) -> dict[str, Any]:
        return {**self.spec.to_json(), **({"size": self.size.to_json()} if self.size else {})}


def resolve(req: Request, python_source: str | None = None, *, size: bool = False) -> Resolved:
    """The explained spec for a request; with `size`, the image size estimated per layer."""
    from envbuild.core.request import check_python_source
    from envbuild.core.resolve import resolve as do_resolve
    from envbuild.core.resolve import with_python_source
    from envbuild.matrix import load

    check_python_source(python_source)
    m = load()
    spec = with_python_source(do_resolve(req, m), python_source, m)
    est = None
    if size and spec.target != "mps":
        from envbuild.engine.sizefetch import gather

        est = gather(spec, m.extra.get("sizes", {}))
    return Resolved(spec, est)


class Rendered:
    """One rendered context: what was written, the notes on what the base stores twice, and the
    size estimate when asked for."""

    __slots__ = ("duplicates", "prepared", "size")

    def __init__(self, prepared: Prepared, duplicates: list[str],
                 size: SizeEstimate | None = None) -> None:
        self.prepared = prepared
        self.duplicates = duplicates
        self.size = size

    @property
    def spec(self) -> Spec:
        return self.prepared.spec

    def to_json(self, out: Path) -> dict[str, Any]:
        spec = self.spec
        return {"out": str(out), "spec_hash": spec.hash, "files": sorted(self.prepared.files),
                "spec": spec.to_json(), "duplicates": self.duplicates,
                **({"size": self.size.to_json()} if self.size else {})}


def render(out: Path, req: Request, ci: ContextInputs, *, force: bool = False,
           size: bool = False) -> Rendered:
    """Resolve and render one build context into `out` (a new or empty directory, or with force
    a previous render), the wheelhouse hard-linked; with `size`, the size estimate."""
    from envbuild.core.size import duplicates
    from envbuild.matrix import load
    from envbuild.render.context import write_tree
    from envbuild.render.pipeline import prepare, wheelhouse_links

    m = load()
    prepared = prepare(req, ci, m)
    links = wheelhouse_links(ci.wheelhouse, prepared.files)
    write_tree(prepared.files, out, force, links)
    spec = prepared.spec
    dup = duplicates(spec, m.extra.get("sizes", {}))
    est = None
    if size and spec.target != "mps":
        from envbuild.engine.sizefetch import gather

        est = gather(spec, m.extra.get("sizes", {}), base_image=ci.base_image,
                     wheelhouse=ci.wheelhouse, torch_index=ci.torch_index_url,
                     user_index=ci.pip_index_url, pip=ci.pip)
    return Rendered(prepared, dup, est)


def render_all(out: Path, req: Request, ci: ContextInputs, *, force: bool = False) -> list[str]:
    """One directory under `out` per valid torch x variant x Python x OS combination the
    request allows; returns their names."""
    from envbuild.matrix import load
    from envbuild.render.context import write_tree
    from envbuild.render.pipeline import prepare_all

    rendered = prepare_all(req, ci, load())
    if not rendered:
        raise UsageError("no valid combination matches these filters",
                         "loosen a filter (--torch, --python, --os, --target); "
                         "`envbuild matrix show torch` lists what exists")
    tree = {f"{name}/{rel}": f for name, p in rendered for rel, f in p.files.items()}
    write_tree(tree, out, force)
    return [name for name, _ in rendered]
