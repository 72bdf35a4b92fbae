"""`envbuild matrix refresh`: read version facts from their sources and diff them against matrix/.

Three layers, kept apart (one module each; this package's face is the use case and its parts):
- ``Http`` (envbuild/common/http.py, the one HTTP client: timeouts, retries with backoff, one-line
  errors, the registry token flow);
- fetchers (``fetch``: ``fetch_pypi``, ``fetch_index``, ``fetch_tags``): I/O only, they turn
  payloads into facts with the pure parsers (``facts``, over ``envbuild.common.wheelzip``);
- pure functions: payload parsers, ``diff_*`` (``diff``: facts + Matrix in, list of ``Change``
  out) and ``apply_changes`` (``tomledit``: TOML text + changes in, TOML text out, editing only
  the affected lines so comments, order and sources stay as they are).
``run`` composes them: the use case ``run_refresh``.
"""

from envbuild.features.refresh.diff import diff_extensions, diff_index, diff_pypi, diff_tags
from envbuild.features.refresh.facts import Change
from envbuild.features.refresh.fetch import fetch_extensions, fetch_index, fetch_pypi, fetch_tags
from envbuild.features.refresh.run import SOURCES, RefreshResult, run_refresh, write_changes
from envbuild.features.refresh.tomledit import apply_changes

__all__ = ["SOURCES", "Change", "RefreshResult", "apply_changes", "diff_extensions",
           "diff_index", "diff_pypi", "diff_tags", "fetch_extensions", "fetch_index",
           "fetch_pypi", "fetch_tags", "run_refresh", "write_changes"]
