"""Air-gapped builds: `envbuild bundle` collects on a connected machine what a build needs;
`envbuild make --from-bundle DIR` builds and validates from it with no network.

A bundle directory:
  bundle.json   what is in it: spec, the system image's id, every wheel's sha256, the files
  system.tar    docker archive of the *system image*: the base image with the rendered OS-package
                and user steps already run (apt/dnf need a network; nothing else does)
  context/      the rendered build context: its Dockerfile starts FROM the system image and holds
                the remaining steps; requirements.txt pins every wheel of --wheelhouse (the torch
                stack) with --hash, user-requirements.txt every wheel of the --pip packages'
                closure (collected as wheels on the connected side: sdists are built there, so the
                offline side needs no build backend); wheelhouse/ holds both sets of wheels
  matrix/       the matrix the spec was resolved with (a snapshot, for the record)
The offline build runs with `--network none` (every RUN step) and every pip install with
`--no-index --require-hashes` (hash-checking mode) from the bundle's wheelhouse.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild.errors import EnvbuildError, UsageError
from envbuild.render import VENV, WHEELHOUSE_MOUNT

if TYPE_CHECKING:
    from envbuild.render import RenderOptions

BUNDLE_SCHEMA = 1
SYSTEM_ARCHIVE = "system.tar"
_CUT = re.compile(r"^COPY [^\n]*requirements\.txt[^\n]*$", re.MULTILINE)
# A wheel file name, ASCII only (name-version[-build]-python-abi-platform.whl); the parts are
# then checked by packaging's own parser. Nothing else may reach a requirements line.
_WHEEL = re.compile(r"[A-Za-z0-9_.]+-[A-Za-z0-9_.!+]+(?:-[0-9][A-Za-z0-9_]*)?"
                    r"(?:-[A-Za-z0-9_.]+){3}\.whl", re.ASCII)
# Every pip install of the rendered Dockerfile: `.../bin/pip install ARGS -r FILE [-c FILE]`.
_PIP = re.compile(r"^(?P<head>[^\n]*/bin/pip install )(?P<args>[^\n]*?)(?P<tail> -r /opt/envbuild/"
                  r"[A-Za-z0-9_.-]+\.txt(?: -c /opt/envbuild/constraints\.txt)?)$", re.MULTILINE)
_USER_PIP = re.compile(r"/bin/pip install (?P<args>[^\n]*) -r /opt/envbuild/user-requirements"
                       r"\.txt -c /opt/envbuild/constraints\.txt$", re.MULTILINE)
_VENV = re.compile(r"^\s*(?P<python>\S+) -m venv " + re.escape(VENV) + r"(?: |$)", re.MULTILINE)
# What every offline pip install gets: the bundle's wheels only, each checked against its hash.
OFFLINE_PIP_ARGS = ("--no-index", "--find-links", WHEELHOUSE_MOUNT, "--require-hashes")
# Where the collection container sees its inputs and writes the wheels.
COLLECT_IN = "/run/envbuild/in"
COLLECT_OUT = "/run/envbuild/out"
COLLECT_HOME = "/run/envbuild/home"
COLLECT_CA = "/run/secrets/ca.pem"


def split_dockerfile(text: str) -> tuple[str, str]:
    """(system part, rest): cut before the COPY of requirements.txt. The system part is the base
    plus the OS-package and user steps; its ENV, SHELL and user persist in the image config."""
    m = _CUT.search(text)
    if m is None:
        raise UsageError("this rendered Dockerfile has no requirements.txt step to cut at",
                         "re-render it with this envbuild version")
    return text[:m.start()], text[m.start():]


def system_files(files: dict[str, Any], system_part: str) -> dict[str, Any]:
    """The system image's build context: its Dockerfile, spec.json (what a context is), and only
    the rendered files that part uses (apt-packages.txt): the pip files stay out, so the system
    image, its id and system.tar do not change with --pip."""
    keep = {"spec.json", ".dockerignore"} | {n for n in files if n in system_part}
    return {n: f for n, f in files.items() if n in keep}


def offline_options(opts: RenderOptions) -> RenderOptions:
    """The render options of the offline context: no build secrets (no CA bundle, no index
    login: an offline build has no network to use them on, and `make --from-bundle` takes none)."""
    return dataclasses.replace(opts, ca_cert=False, index_credentials=False)


def offline_dockerfile(rest: str, system_ref: str) -> str:
    """FROM the system image, then `rest` with every pip install made offline: the rendered
    index options are replaced by OFFLINE_PIP_ARGS (no index, the bundle's wheels, hashes)."""
    if _PIP.search(rest) is None:
        raise UsageError("this rendered Dockerfile has no pip install step to make offline",
                         "re-render it with this envbuild version")
    offline = _PIP.sub(lambda m: m.group("head") + shlex.join(OFFLINE_PIP_ARGS) + m.group("tail"),
                       rest)
    return ("# Offline build from an envbuild bundle: the system image already holds the OS\n"
            "# packages and the user; every RUN step runs with --network none, and every pip\n"
            "# install takes only the bundle's wheels, each checked against its sha256.\n"
            f"FROM {system_ref}\n{offline}")


@dataclass(frozen=True)
class CollectPlan:
    """How the user packages are collected as wheels: the image's interpreter, and the exact pip
    options of the rendered user layer (its index, extra indexes, trusted hosts, --find-links)."""

    interpreter: str
    pip_args: tuple[str, ...]

    def command(self) -> list[str]:
        """The collection container's command: a throwaway venv of the image's own Python (so
        the wheels fit its version and platform), then `pip wheel` of the user requirements under
        the build's constraints. Arguments go as positional parameters: nothing is re-quoted."""
        script = ('set -e; if [ -f "$HOME/proxy.env" ]; then . "$HOME/proxy.env"; fi; '
                  '"$0" -m venv /tmp/envbuild-collect; exec /tmp/envbuild-collect/bin/pip "$@"')
        return ["/bin/sh", "-c", script, self.interpreter, "wheel", "--no-cache-dir",
                "--progress-bar", "off", "--wheel-dir", COLLECT_OUT, *self.pip_args,
                "-r", f"{COLLECT_IN}/user-requirements.txt",
                "-c", f"{COLLECT_IN}/constraints.txt"]


def proxy_env_file(proxies: dict[str, str]) -> str:
    """The proxies as a file the collection script sources (mounted, never in the container's
    environment, where `docker inspect` would show a proxy login)."""
    lines = []
    for name, value in sorted(proxies.items()):
        if not re.fullmatch(r"[A-Za-z_]+", name, re.ASCII):
            raise UsageError(f"{name[:40]!r} is not a proxy variable name")
        lines.append(f"export {name}={shlex.quote(value)}")
    return "\n".join(lines) + "\n"


def collect_failure(output: str) -> str:
    """The one line of pip's output that says why collecting failed."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for pattern in (r"^ERROR: No matching distribution found for ", r"^ERROR: (?!Exception)"):
        found = [ln for ln in lines if re.search(pattern, ln)]
        if found:
            return found[-1].removeprefix("ERROR: ")[:200]
    return (lines[-1] if lines else "pip gave no output")[:200]


_COLLECT_HINTS = (
    (r"ProxyError|Cannot connect to proxy|407 Proxy Authentication",
     "pip could not get through the proxy: check --proxy (or HTTP(S)_PROXY / NO_PROXY)"),
    (r"CERTIFICATE_VERIFY_FAILED|SSLError|certificate verify failed",
     "HTTPS is intercepted here: pass --ca-cert with your proxy's CA bundle"),
    (r"NewConnectionError|Name or service not known|Temporary failure in name resolution|"
     r"Network is unreachable|Connection refused",
     "the index cannot be reached from a container on docker's default network: check "
     "--pip-index-url, --proxy and the container's DNS"),
    (r"Failed building wheel|Could not build wheels|subprocess-exited-with-error",
     "an sdist did not build into a wheel: its build needs more than this image has (see the "
     "log); or give it as a wheel on the index"),
)


def collect_hint(output: str) -> str:
    """What to do about a failed collection, from pip's output."""
    for pattern, hint in _COLLECT_HINTS:
        if re.search(pattern, output):
            return hint
    return ("check the --pip requirements, and that --pip-index-url / --pip-extra-index-url "
            "serve them and all they depend on to this machine")


def collect_plan(dockerfile: str) -> CollectPlan | None:
    """The collection plan from the full rendered Dockerfile; None when it installs no user
    packages (no user-layer RUN)."""
    m = _USER_PIP.search(dockerfile)
    if m is None:
        return None
    py = _VENV.search(dockerfile)
    if py is None:
        raise UsageError("this rendered Dockerfile creates no venv to collect wheels for",
                         "re-render it with this envbuild version")
    return CollectPlan(shlex.split(py.group("python"))[0], tuple(shlex.split(m.group("args"))))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


_SHA256 = re.compile(r"[0-9a-f]{64}", re.ASCII)


def wheel_pin(filename: str) -> tuple[str, str]:
    """(canonical project name, version) of a wheel file name; exit 2 for anything else."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    if len(filename) > 255 or not _WHEEL.fullmatch(filename):
        raise UsageError(f"{filename[:80]!r} is not a wheel file name",
                         "a wheelhouse holds name-version-python-abi-platform.whl files only")
    try:
        name, version, _, _ = parse_wheel_filename(filename)
    except (InvalidWheelFilename, ValueError):
        raise UsageError(f"{filename[:80]!r} is not a valid wheel file name",
                         "a wheelhouse holds name-version-python-abi-platform.whl files only"
                         ) from None
    return str(name), str(version)


def hashed_requirements(wheels: dict[str, str], what: str = "every wheel of the bundle") -> str:
    """name==version --hash=sha256:... for every wheel (file name -> sha256), one per project
    (wheels of one release for several platforms share the line). Two versions of one project
    cannot both be pinned: refused."""
    lines = [f"# Generated by envbuild bundle: {what}, with its sha256."]
    by_project: dict[str, tuple[str, set[str]]] = {}
    for filename, digest in sorted(wheels.items()):
        project, version = wheel_pin(filename)
        if not _SHA256.fullmatch(digest):
            raise UsageError(f"{filename}: {digest[:80]!r} is not a sha256 hex digest")
        seen, digests = by_project.setdefault(project, (version, set()))
        if seen != version:
            raise UsageError(f"the wheelhouse holds {project} {seen} and {version}",
                             "keep one version of each project in it")
        digests.add(digest)
    for project, (version, digests) in sorted(by_project.items()):
        lines.append(f"{project}=={version}" + "".join(f" --hash=sha256:{d}"
                                                        for d in sorted(digests)))
    return "\n".join(lines) + "\n"


def merge_wheels(torch: dict[str, str], user: dict[str, str]) -> dict[str, str]:
    """The user wheels (file name -> sha256) that are not already in the torch wheelhouse. A file
    name in both must be the same file (same sha256): exit 1 otherwise."""
    new = {}
    for name, digest in sorted(user.items()):
        wheel_pin(name)
        if name not in torch:
            new[name] = digest
        elif torch[name] != digest:
            raise EnvbuildError(
                f"the --pip packages need {name} with sha256 {digest[:12]}..., but --wheelhouse "
                f"has a different file of that name ({torch[name][:12]}...)",
                "the index and the wheelhouse serve different files under one name: refill the "
                "wheelhouse from the same index, or remove that wheel from it")
    return new


@dataclass(frozen=True)
class Bundle:
    root: Path
    meta: dict[str, Any]

    @property
    def system_ref(self) -> str:
        return str(self.meta["system_ref"])

    @property
    def system_id(self) -> str:
        return str(self.meta["system_id"])


def read_bundle(root: Path) -> Bundle:
    """Read and check a bundle: every listed file present with its recorded sha256 (exit 2)."""
    path = root / "bundle.json"
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        raise UsageError(f"--from-bundle {root}: no readable bundle.json",
                         "make one with: envbuild bundle [make options] --out DIR") from None
    if not isinstance(meta, dict) or meta.get("schema") != BUNDLE_SCHEMA:
        raise UsageError(f"--from-bundle {root}: not an envbuild bundle of schema "
                         f"{BUNDLE_SCHEMA}", "re-make it with this envbuild version")
    for rel, digest in sorted(dict(meta.get("files", {})).items()):
        f = root / rel
        if ".." in Path(rel).parts or not f.is_file():
            raise UsageError(f"--from-bundle {root}: {rel} is missing", "copy the whole bundle")
        if sha256_file(f) != digest:
            raise UsageError(f"--from-bundle {root}: {rel} does not match its recorded sha256",
                             "the bundle was changed or damaged in transit: copy it again")
    return Bundle(root, meta)


def write_meta(root: Path, meta: dict[str, Any]) -> None:
    files = {}
    for f in sorted(root.rglob("*")):
        if f.is_file() and f.name != "bundle.json":
            files[str(f.relative_to(root))] = sha256_file(f)
    meta = {**meta, "schema": BUNDLE_SCHEMA, "files": files}
    (root / "bundle.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def wheels_in(directory: Path, what: str, strict: bool) -> dict[str, str]:
    """file name -> sha256 of the *.whl files in a directory, each name checked (wheel_pin).
    strict (a directory made for us): anything but plain wheel files there is refused (exit 1);
    otherwise other files are left alone."""
    out = {}
    for f in sorted(directory.iterdir()):
        wheel = f.name.endswith(".whl") and f.is_file() and not (strict and f.is_symlink())
        if not wheel:
            if strict:
                raise EnvbuildError(f"{what} left {f.name[:80]!r}, which is not a wheel file",
                                    "only *.whl files belong in a wheelhouse")
            continue
        wheel_pin(f.name)
        out[f.name] = sha256_file(f)
    return out


def copy_wheels(src: Path, dst: Path, expected: dict[str, str]) -> None:
    """Copy these wheels (file name -> sha256) from src into dst; every copy must have its
    recorded sha256, or the source changed while it was read (exit 1)."""
    dst.mkdir(parents=True, exist_ok=True)
    for name, digest in sorted(expected.items()):
        shutil.copyfile(src / name, dst / name)
        if sha256_file(dst / name) != digest:
            raise EnvbuildError(f"{src / name} changed while it was copied", "run bundle again")
