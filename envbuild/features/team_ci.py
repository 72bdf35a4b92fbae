"""`envbuild team ci --github | --gitlab --install SPEC`: the CI pipeline of a team file, from
the templates ci-github.yml.j2 / ci-gitlab.yml.j2.

What runs when (docs/guides/ci.md): a pull (merge) request builds and validates the family
without pushing and, where a fleet.toml lies next to the team file, compares the base branch's
team file with the request's (`envbuild plan`); the nightly schedule first checks the committed
lock (`team check --junit`, a test report), then builds and validates without pushing (drift: a
moved base, vanished wheels); only the default branch's push events (and a manual run on the
default branch) push, and then commit the new lock back. Paths in it are relative to the
repository (the nearest directory above the team file holding .git; else the team file's
directory), where the pipeline file goes by default.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections import Counter
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild.common.errors import UsageError
from envbuild.common.record import record

if TYPE_CHECKING:
    import jinja2

PROVIDERS = {"github": (Path(".github/workflows/envbuild.yml"), "ci-github.yml.j2"),
             "gitlab": (Path(".gitlab-ci.yml"), "ci-gitlab.yml.j2")}
SECRET_PREFIX = "ENVBUILD_REGISTRY_"  # + the host's slug + _USER / _PASSWORD
GIT_TOKEN = "ENVBUILD_GIT_TOKEN"  # GitLab: a token that may push the lock commit
PYTHON = "3.12"  # of the CI job that runs envbuild (envbuild needs >= 3.11)
NIGHTLY = "17 3 * * *"  # the schedule (GitHub: in the file; GitLab: a pipeline schedule)
REPORTS = "envbuild-reports"  # the JUnit files' directory, relative to the repository
FLEET = "fleet.toml"  # next to the team file: `plan` runs where it exists
# Where the plan job checks out the base branch (GitHub: under the job's own temp directory).
BASE_DIR = {"github": "$RUNNER_TEMP/envbuild-base", "gitlab": "/tmp/envbuild-base"}
# What a path in the pipeline may hold: it goes unquoted into YAML, shell lines and expressions.
_SAFE_PATH = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9._+@/-]*")
INSTALL_HINT = ("what pip installs envbuild from, e.g. --install 'envbuild @ "
                "git+https://github.com/ORG/envbuild@v0.1.0', --install dist/envbuild-0.1.0-"
                "py3-none-any.whl (a wheel in the repository) or --install 'envbuild==0.1.0' "
                "(an index that has it)")
# What --install may hold: no quotes, no $ (shell, GitHub expressions), no backslash, no
# whitespace other than single spaces (`envbuild @ URL`), printable ASCII.
_INSTALL_CHARS = re.compile(r"[A-Za-z0-9._+\-@/:=<>!~,\[\]#%?&;*^]+(?: [A-Za-z0-9._+\-@/:=<>!~,"
                            r"\[\]#%?&;*^]+)*")
_URL_SCHEMES = ("https", "git+https")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_WHEEL = re.compile(r"[A-Za-z0-9_.]+-[A-Za-z0-9_.!+]+(?:-[0-9][A-Za-z0-9_.]*)?"
                    r"-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+\.whl")
MAX_INSTALL = 500


@record
class Login:
    """How the pipeline logs in to one registry host: the CI secrets (variables) the user sets,
    or the provider's own token."""

    host: str
    user: str  # the secret's / variable's name (GitHub's ghcr.io: github.actor)
    password: str
    own: bool = False  # the provider's token (GITHUB_TOKEN): nothing to set

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "user": self.user, "password": self.password,
                "set_by": "the CI" if self.own else "you"}


@record
class Pipeline:
    provider: str
    path: Path  # where it is (or would be) written
    text: str
    team: str  # the team file, relative to the repository
    registries: tuple[str, ...]  # the hosts the pipeline logs in to
    logins: tuple[Login, ...]
    install: str  # what pip installs
    warnings: tuple[str, ...] = ()
    changed: bool = True  # False: the same file was already there


def repository_root(team_file: Path) -> Path:
    """The nearest directory above the team file that holds .git; else the team file's own."""
    here = team_file.absolute().parent
    for d in (here, *here.parents):
        if (d / ".git").exists():
            return d
    return here


def safe_path(rel: str) -> bool:
    """A repository-relative path the pipeline can name unquoted: letters, digits and
    . _ + @ - /, not starting with - or @ or /, no . or .. component."""
    return bool(_SAFE_PATH.fullmatch(rel)) and not {".", ".."} & set(rel.split("/"))


def _relative(path: Path, root: Path, what: str) -> str:
    rel = Path(os.path.relpath(path.absolute(), root)).as_posix()
    if not safe_path(rel):
        from envbuild.common.echo import shown

        raise UsageError(f"{what} {shown(rel)}: a path the pipeline cannot name as it is",
                         "letters, digits and . _ + @ - / inside the repository, e.g. "
                         "ml/envbuild.toml or .ci/envbuild.toml")
    return rel


def secret_slug(host: str) -> str:
    """A registry host as a CI secret's name takes it: upper case, every run of other
    characters one _ (registry.example.com:5000 -> REGISTRY_EXAMPLE_COM_5000)."""
    return re.sub(r"[^A-Z0-9]+", "_", host.upper()).strip("_") or "HOST"


def slugs(hosts: Iterable[str]) -> dict[str, str]:
    """Each host's slug; hosts of one family whose slugs would be the same (a-b.io, a.b.io)
    each get _ and the first 6 hex digits of their name's SHA-256 after it."""
    hosts = sorted(set(hosts))
    plain = {h: secret_slug(h) for h in hosts}
    seen = Counter(plain.values())
    return {h: s if seen[s] == 1 else
            f"{s}_{hashlib.sha256(h.encode()).hexdigest()[:6].upper()}"
            for h, s in plain.items()}


def logins(provider: str, hosts: Iterable[str]) -> tuple[Login, ...]:
    """One login per registry host: the secrets ENVBUILD_REGISTRY_<SLUG>_USER / _PASSWORD;
    ghcr.io on GitHub with the workflow's GITHUB_TOKEN (packages: write). (GitLab's project
    registry, $CI_REGISTRY, is logged in to with CI_REGISTRY_USER / CI_REGISTRY_PASSWORD when
    the pipeline runs: the template asks which host it is.)"""
    out = []
    for host, slug in slugs(hosts).items():
        if provider == "github" and host == "ghcr.io":
            out.append(Login(host, "github.actor", "GITHUB_TOKEN", own=True))
        else:
            out.append(Login(host, f"{SECRET_PREFIX}{slug}_USER",
                             f"{SECRET_PREFIX}{slug}_PASSWORD"))
    return tuple(out)


def no_install() -> UsageError:
    return UsageError("--install is required: the pipeline installs envbuild with pip, and "
                      "envbuild is not published on PyPI", INSTALL_HINT)


def install_spec(spec: str | None, root: Path) -> tuple[str, list[str]]:
    """--install as pip gets it: a PEP 508 requirement of envbuild (`envbuild==0.1.0`,
    `envbuild @ git+https://...@ref`), an https / git+https URL, or a wheel's path relative to
    the repository. (the spec, warnings); UsageError for anything else."""
    from envbuild.common.echo import shown

    if spec is None:
        raise no_install()

    def bad(why: str) -> UsageError:
        return UsageError(f"--install {shown(spec)}: {why}", INSTALL_HINT)

    if len(spec) > MAX_INSTALL:
        raise bad(f"longer than {MAX_INSTALL} characters")
    if not _INSTALL_CHARS.fullmatch(spec):
        raise bad("a character the pipeline cannot quote safely (letters, digits, single "
                  "spaces and . _ + - @ / : = < > ! ~ , [ ] # % ? & ; * ^ only)")
    if spec.startswith("-"):
        raise bad("an option, not what to install")
    if _SCHEME.match(spec):
        _url(spec, bad)
        return spec, []
    if spec.endswith(".whl") and " " not in spec:
        return spec, _wheel(spec, root, bad)
    return _requirement(spec, bad), []


def _url(url: str, bad: Callable[[str], UsageError]) -> None:
    from urllib.parse import urlsplit

    try:
        u = urlsplit(url)
        u.port  # noqa: B018 - a bad port raises ValueError
    except ValueError as exc:
        raise bad(f"not a URL ({exc})") from None
    if u.scheme not in _URL_SCHEMES:
        raise bad(f"a {u.scheme or 'schemeless'} URL: https:// or git+https:// only (a CI job "
                  "has no SSH key, and http can be tampered with)")
    if not u.hostname or "@" in u.netloc or u.query:
        raise bad("a URL needs a host and no user, token or query in it (a pipeline file is "
                  "read by everyone who can read the repository)")


def _wheel(path: str, root: Path, bad: Callable[[str], UsageError]) -> list[str]:
    if path.startswith("/") or not safe_path(path):
        raise bad("a wheel's path relative to the repository (no /, . or .. component), e.g. "
                  "dist/envbuild-0.1.0-py3-none-any.whl")
    if not _WHEEL.fullmatch(path.rpartition("/")[2]):
        raise bad("not a wheel's file name (NAME-VERSION-PY-ABI-PLATFORM.whl)")
    if not (root / path).is_file():
        from envbuild.common.boundedio import path_text

        return [f"--install {path}: not in the repository {path_text(root)} yet: commit it, "
                "the pipeline installs it from the checkout"]
    return []


def _requirement(spec: str, bad: Callable[[str], UsageError]) -> str:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    try:
        req = Requirement(spec)
    except InvalidRequirement as exc:
        raise bad(f"not a requirement ({str(exc).splitlines()[0][:120]})") from None
    if canonicalize_name(req.name) != "envbuild":
        raise bad(f"installs {req.name}, not envbuild")
    if req.url is not None:
        _url(req.url, bad)
    return spec


def _registries(team: Any) -> tuple[str, ...]:
    from envbuild.core import refs

    missing = [i.name for i in team.images if not i.registry]
    if missing:
        raise UsageError(f"{team.path}: [image.{missing[0]}] has no registry; the pipeline "
                         "pushes every image on the default branch and checks it nightly",
                         "set registry in [defaults] or in the image's table")
    return tuple(sorted({refs.parse(f"{i.registry.rstrip('/')}/x:y").host
                         for i in team.images}))


def _arm64(team: Any) -> list[str]:
    return [i.name for i in team.images
            if "linux/arm64" in i.platforms or i.request.platform == "linux/arm64"]


def _warnings(team: Any) -> list[str]:
    gpu = [i.name for i in team.images if i.push_requires_gpu]
    if not gpu:
        return []
    return [f"{', '.join(f'[image.{n}]' for n in gpu)}: push_requires = \"gpu\", and the "
            "pipeline's runners have no GPU: `team build --push` there never pushes "
            f"{'it' if len(gpu) == 1 else 'them'}; run the build job on a GPU runner (GitHub: "
            "its runs-on label; GitLab: its tags)"]


@cache
def _env() -> jinja2.Environment:
    import json
    import shlex

    import jinja2

    from envbuild.common.resources import templates_dir

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())),
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
    env.filters["q"] = json.dumps  # a YAML double-quoted string
    env.filters["sh"] = shlex.quote  # one shell word
    env.globals["gh"] = lambda expr: "${{ " + expr + " }}"  # a GitHub Actions expression
    return env


def render(provider: str, team_file: Path | None = None, install: str | None = None
           ) -> Pipeline:
    """The pipeline for the team file (default ./envbuild.toml), not written."""
    from envbuild import __version__
    from envbuild.features import teamfile
    from envbuild.features.team_lock import lock_path

    if provider not in PROVIDERS:
        raise UsageError(f"no CI provider {provider[:40]!r}", "--github or --gitlab")
    team = teamfile.load(team_file)
    root = repository_root(team.path)
    spec, notes = install_spec(install, root)
    rel = _relative(team.path, root, "the team file")
    folder = rel.rpartition("/")[0]
    fleet = f"{folder}/{FLEET}" if folder else FLEET
    registries = _registries(team)
    found = logins(provider, registries)
    out, template = PROVIDERS[provider]
    text = _env().get_template(template).render(
        team=rel, lock=_relative(lock_path(team.path), root, "the lock"), fleet=fleet,
        base=f"{BASE_DIR[provider]}/{rel}", logins=found, install=spec, python=PYTHON,
        nightly=NIGHTLY, reports=REPORTS, version=__version__, arm64=_arm64(team),
        git_token=GIT_TOKEN)
    return Pipeline(provider, root / out, text, rel, registries, found, spec,
                    (*notes, *_warnings(team)))


def write(provider: str, team_file: Path | None = None, out: Path | None = None,
          force: bool = False, install: str | None = None) -> Pipeline:
    """Render and write the pipeline (atomically, its directories made): an existing file is
    replaced only when it is the same or with `force`."""
    import dataclasses

    from envbuild.common.boundedio import kind_of, path_text
    from envbuild.common.files import write_atomic

    p = render(provider, team_file, install)
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
