"""`envbuild team ci --github | --gitlab`: the CI pipeline of a team file, from the templates
ci-github.yml.j2 / ci-gitlab.yml.j2.

The pipeline builds the family on pull (merge) requests without pushing, and with `--push` on the
default branch and on the nightly schedule; checks the lock's images nightly with
`team check --junit` and publishes the JUnit file; and on a pull request, where a fleet.toml lies
next to the team file, posts `envbuild plan`'s table. Paths in it are relative to the repository
(the nearest directory above the team file holding .git; else the team file's directory), where
the pipeline file goes by default.
"""

from __future__ import annotations

import os
import re
import stat
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild.common.errors import UsageError
from envbuild.common.record import record

if TYPE_CHECKING:
    import jinja2

PROVIDERS = {"github": (Path(".github/workflows/envbuild.yml"), "ci-github.yml.j2"),
             "gitlab": (Path(".gitlab-ci.yml"), "ci-gitlab.yml.j2")}
SECRETS = ("ENVBUILD_REGISTRY_USER", "ENVBUILD_REGISTRY_PASSWORD")
PYTHON = "3.12"  # of the CI job that runs envbuild (envbuild needs >= 3.11)
NIGHTLY = "17 3 * * *"  # the schedule (GitHub: in the file; GitLab: a pipeline schedule)
REPORTS = "envbuild-reports"  # the JUnit files' directory, relative to the repository
FLEET = "fleet.toml"  # next to the team file: `plan` runs where it exists
# What a path in the pipeline may hold: it goes unquoted into YAML, shell lines and expressions.
_SAFE_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+@/-]*")


@record
class Pipeline:
    provider: str
    path: Path  # where it is (or would be) written
    text: str
    team: str  # the team file, relative to the repository
    registries: tuple[str, ...]  # the hosts the pipeline logs in to
    changed: bool = True  # False: the same file was already there


def repository_root(team_file: Path) -> Path:
    """The nearest directory above the team file that holds .git; else the team file's own."""
    here = team_file.absolute().parent
    for d in (here, *here.parents):
        if (d / ".git").exists():
            return d
    return here


def _relative(path: Path, root: Path, what: str) -> str:
    rel = Path(os.path.relpath(path.absolute(), root)).as_posix()
    if rel.startswith("../") or not _SAFE_PATH.fullmatch(rel) or "/../" in f"/{rel}/":
        from envbuild.common.echo import shown

        raise UsageError(f"{what} {shown(rel)}: a path the pipeline cannot name as it is",
                         "letters, digits and . _ + @ - / inside the repository, e.g. "
                         "ml/envbuild.toml")
    return rel


def _registries(team: Any) -> tuple[str, ...]:
    from envbuild.core import refs

    missing = [i.name for i in team.images if not i.registry]
    if missing:
        raise UsageError(f"{team.path}: [image.{missing[0]}] has no registry; the pipeline "
                         "pushes every image on the default branch and checks it nightly",
                         "set registry in [defaults] or in the image's table")
    return tuple(sorted({refs.parse(f"{i.registry.rstrip('/')}/x:y").host
                         for i in team.images}))


@cache
def _env() -> jinja2.Environment:
    import json

    import jinja2

    from envbuild.common.resources import templates_dir

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())),
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
    env.filters["q"] = json.dumps  # a YAML double-quoted string
    env.globals["gh"] = lambda expr: "${{ " + expr + " }}"  # a GitHub Actions expression
    return env


def render(provider: str, team_file: Path | None = None) -> Pipeline:
    """The pipeline for the team file (default ./envbuild.toml), not written."""
    from envbuild import __version__
    from envbuild.features import teamfile
    from envbuild.features.team_lock import lock_path

    if provider not in PROVIDERS:
        raise UsageError(f"no CI provider {provider[:40]!r}", "--github or --gitlab")
    team = teamfile.load(team_file)
    root = repository_root(team.path)
    rel = _relative(team.path, root, "the team file")
    folder = rel.rpartition("/")[0]
    fleet = f"{folder}/{FLEET}" if folder else FLEET
    registries = _registries(team)
    out, template = PROVIDERS[provider]
    text = _env().get_template(template).render(
        team=rel, plan_to=rel if "/" in rel or rel.endswith(".toml") else f"./{rel}",
        lock=_relative(lock_path(team.path), root, "the lock"), fleet=fleet,
        registries=registries, secrets=SECRETS, python=PYTHON, nightly=NIGHTLY,
        reports=REPORTS, requirement=f"envbuild=={__version__}", version=__version__)
    return Pipeline(provider, root / out, text, rel, registries)


def write(provider: str, team_file: Path | None = None, out: Path | None = None,
          force: bool = False) -> Pipeline:
    """Render and write the pipeline (atomically, its directories made): an existing file is
    replaced only when it is the same or with `force`."""
    import dataclasses

    from envbuild.common.boundedio import kind_of, path_text
    from envbuild.common.files import write_atomic

    p = render(provider, team_file)
    path = out if out is not None else p.path
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UsageError(f"--out {path_text(path)}: {exc.strerror or exc}",
                         "choose another --out") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UsageError(f"--out {path_text(path)}: is {kind_of(st.st_mode)}, not a file",
                         "give the pipeline file's path, e.g. --out .gitlab-ci.yml")
    if st is not None:
        if _same(path, p.text):
            return dataclasses.replace(p, path=path, changed=False)
        if not force:
            raise UsageError(f"{path_text(path)} exists and is not the pipeline envbuild writes "
                             "now", "--force replaces it; or write elsewhere with --out")
    try:
        path.absolute().parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, p.text)
    except OSError as exc:
        raise UsageError(f"cannot write {path_text(path)}: {exc.strerror or exc}",
                         "choose another --out") from None
    return dataclasses.replace(p, path=path)


def _same(path: Path, text: str) -> bool:
    from envbuild.common.boundedio import read_bytes

    try:
        return read_bytes(path, "pipeline file") == text.encode()
    except (UsageError, OSError):
        return False  # too big, unreadable: not ours
