"""Air-gapped builds: `envbuild bundle` collects on a connected machine what a build needs;
`envbuild make --from-bundle DIR` builds and validates from it with no network.

A bundle directory:
  bundle.json   what is in it: spec, the system image's id and OCI digests, the base image it was
                built FROM with its digest, every wheel's sha256, the files
  system.tar    the *system image* (the base image with the rendered OS-package and user steps
                already run: apt/dnf need a network; nothing else does) as an OCI image layout in
                a tar (oci-layout, index.json, blobs/sha256/...) that also keeps docker-archive's
                manifest.json, like Docker >= 25's `docker save`: any OCI tool reads it and
                dockerd 20.10's `docker load` still loads it (to_oci_archive)
  context/      the rendered build context: its Dockerfile starts FROM the system image and holds
                the remaining steps; requirements.txt pins every wheel of the torch stack (pip
                download of the rendered pins from the torch index in a container of the system
                image, or every wheel of --wheelhouse) with --hash, user-requirements.txt every
                wheel of the --pip packages' closure (collected as wheels on the connected side:
                sdists are built there, so the offline side needs no build backend); wheelhouse/
                holds both sets of wheels
  matrix/       the matrix the spec was resolved with (a snapshot, for the record)
The offline build runs with `--network none` (every RUN step) and every pip install with
`--no-index --require-hashes` (hash-checking mode) from the bundle's wheelhouse.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import posixpath
import re
import shlex
import shutil
import tarfile
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from envbuild.common import boundedio
from envbuild.common.echo import shown
from envbuild.common.errors import EnvbuildError, UsageError
from envbuild.common.files import atomic_file
from envbuild.common.record import record
from envbuild.core.refs import base_digest as base_digest  # bundle.json's base image
from envbuild.core.refs import is_digest, is_sha256
from envbuild.render.context import VENV, WHEELHOUSE_MOUNT

if TYPE_CHECKING:
    from envbuild.render.context import RenderOptions

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


def files_hash(files: dict[str, Any]) -> str:
    """12 hex digits over the names, modes and contents of rendered files (a tag suffix)."""
    h = hashlib.sha256()
    for name in sorted(files):
        f = files[name]
        data = f.content.encode() if isinstance(f.content, str) else bytes(f.content)
        h.update(f"{name}\0{f.mode:o}\0{len(data)}\0".encode() + data)
    return h.hexdigest()[:12]


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


@record
class CollectPlan:
    """How a pip layer of the rendered Dockerfile is collected as wheels: the image's
    interpreter, and the exact pip options of that layer (its index, extra indexes, trusted
    hosts, --find-links). `layer` is "user" (the --pip packages: `pip wheel`, so sdists are built
    here) or "torch" (the torch stack: `pip download` of wheels only, as the build installs
    them)."""

    interpreter: str
    pip_args: tuple[str, ...]
    layer: str = "user"

    @property
    def what(self) -> str:
        return "the torch stack" if self.layer == "torch" else "the --pip packages"

    @property
    def inputs(self) -> tuple[str, ...]:
        """The rendered files the command reads (mounted under COLLECT_IN)."""
        if self.layer == "torch":
            return ("requirements.txt",)
        return ("user-requirements.txt", "constraints.txt")

    def command(self) -> list[str]:
        """The collection container's command: a throwaway venv of the image's own Python (so
        the wheels fit its version and platform), then `pip wheel` of the user requirements under
        the build's constraints, or `pip download --only-binary=:all:` of the torch pins (every
        dependency comes along: the nvidia-* / ROCm wheels of a GPU variant). Arguments go as
        positional parameters: nothing is re-quoted."""
        script = ('set -e; if [ -f "$HOME/proxy.env" ]; then . "$HOME/proxy.env"; fi; '
                  '"$0" -m venv /tmp/envbuild-collect; exec /tmp/envbuild-collect/bin/pip "$@"')
        if self.layer == "torch":
            verb = ["download", "--only-binary=:all:", "--no-cache-dir", "--progress-bar", "off",
                    "--dest", COLLECT_OUT]
        else:
            verb = ["wheel", "--no-cache-dir", "--progress-bar", "off", "--wheel-dir",
                    COLLECT_OUT]
        files = [a for n in self.inputs
                 for a in ("-c" if n == "constraints.txt" else "-r", f"{COLLECT_IN}/{n}")]
        return ["/bin/sh", "-c", script, self.interpreter, *verb, *self.pip_args, *files]


def proxy_env_file(proxies: dict[str, str]) -> str:
    """The proxies as a file the collection script sources (mounted, never in the container's
    environment, where `docker inspect` would show a proxy login)."""
    lines = []
    for name, value in sorted(proxies.items()):
        if not re.fullmatch(r"[A-Za-z_]+", name, re.ASCII):
            raise UsageError(f"{name[:40]!r} is not a proxy variable name",
                             "proxy variables are HTTP_PROXY, HTTPS_PROXY, NO_PROXY (letters "
                             "and _)")
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
     "{index}, --proxy and the container's DNS"),
    (r"Failed building wheel|Could not build wheels|subprocess-exited-with-error",
     "an sdist did not build into a wheel: its build needs more than this image has (see the "
     "log); or give it as a wheel on the index"),
)


def collect_hint(output: str, layer: str = "user") -> str:
    """What to do about a failed collection of a layer ("user" or "torch"), from pip's output."""
    index = "--torch-index-url" if layer == "torch" else "--pip-index-url"
    for pattern, hint in _COLLECT_HINTS:
        if re.search(pattern, output):
            return hint.format(index=index)
    if layer == "torch":
        return ("check that --torch-index-url (default: the PyTorch index of the variant) serves "
                "these pins as wheels for the image's Python and platform, with all they need "
                "(--torch-index-kind pypi for a PyPI mirror); or give the wheels with "
                "--wheelhouse DIR")
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


_TORCH_PIP = re.compile(r"/bin/pip install (?P<args>[^\n]*) -r /opt/envbuild/requirements\.txt$",
                        re.MULTILINE)


def torch_plan(dockerfile: str) -> CollectPlan:
    """The plan that downloads the torch stack: the rendered torch layer's own pip options (its
    index, extra indexes, trusted hosts) and the venv's interpreter, from a Dockerfile rendered
    without a wheelhouse (one rendered with --wheelhouse has nothing to download from)."""
    m = _TORCH_PIP.search(dockerfile)
    py = _VENV.search(dockerfile)
    if m is None or py is None:
        raise UsageError("this rendered Dockerfile has no torch layer to collect wheels for",
                         "re-render it with this envbuild version")
    args = tuple(shlex.split(m.group("args")))
    if "--no-index" in args:
        raise UsageError("this rendered Dockerfile installs torch from a wheelhouse: nothing to "
                         "download", "render it without --wheelhouse")
    return CollectPlan(shlex.split(py.group("python"))[0], args, layer="torch")


def with_wheelhouse(options: RenderOptions) -> RenderOptions:
    """The render options of a bundle whose torch wheels were collected: as if --wheelhouse had
    been given (the torch layer from the wheelhouse, the user layer with it as --find-links)."""
    return dataclasses.replace(options, wheelhouse=True)


def torch_source_text(source: dict[str, Any]) -> str:
    """Where the torch wheels came from, for the summary line (bundle.json's torch_source)."""
    if source.get("from") == "wheelhouse":
        return f"from --wheelhouse {source.get('wheelhouse')}"
    return f"downloaded from {source.get('index_url')} ({source.get('index_kind')} index)"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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
    if not re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", name, re.ASCII):  # "_-1-py3-none-any.whl"
        raise UsageError(f"{filename[:80]!r} names no project",
                         "a wheelhouse holds name-version-python-abi-platform.whl files only")
    return str(name), str(version)


def hashed_requirements(wheels: dict[str, str], what: str = "every wheel of the bundle") -> str:
    """name==version --hash=sha256:... for every wheel (file name -> sha256), one per project
    (wheels of one release for several platforms share the line). Two versions of one project
    cannot both be pinned: refused."""
    lines = [f"# Generated by envbuild bundle: {what}, with its sha256."]
    by_project: dict[str, tuple[str, set[str]]] = {}
    for filename, digest in sorted(wheels.items()):
        project, version = wheel_pin(filename)
        if not is_sha256(digest):
            raise UsageError(f"{filename}: {digest[:80]!r} is not a sha256 hex digest",
                             "a digest is 64 hex digits; download the wheel again")
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
                f"the --pip packages need {name} with sha256 {digest[:12]}..., but the torch "
                f"wheelhouse has a different file of that name ({torch[name][:12]}...)",
                "the index and the wheelhouse serve different files under one name: refill the "
                "wheelhouse from the same index, or remove that wheel from it")
    return new


@record
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
        meta = boundedio.load_json(path, "bundle.json")  # a FIFO, device, huge or deep: exit 2
    except (OSError, ValueError):
        raise UsageError(f"--from-bundle {root}: no readable bundle.json",
                         "make one with: envbuild bundle [make options] --out DIR") from None
    if not isinstance(meta, dict) or meta.get("schema") != BUNDLE_SCHEMA:
        raise UsageError(f"--from-bundle {root}: not an envbuild bundle of schema "
                         f"{BUNDLE_SCHEMA}", "re-make it with this envbuild version")
    for rel, digest in sorted(dict(meta.get("files", {})).items()):
        f = root / rel
        if ".." in Path(rel).parts or not f.is_file():
            raise UsageError(f"--from-bundle {root}: {shown(rel)} is missing",
                             "copy the whole bundle")
        if sha256_file(f) != digest:
            raise UsageError(f"--from-bundle {root}: {shown(rel)} does not match its recorded "
                             "sha256",
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


# --- system.tar: the docker archive of `docker save` as an OCI image layout ---------------------

MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar"
REF_NAME = "org.opencontainers.image.ref.name"
CONTAINERD_NAME = "io.containerd.image.name"
OCI_LAYOUT = b'{"imageLayoutVersion":"1.0.0"}'
_MAX_JSON = 16 << 20  # manifest.json and the image config: read whole, so bounded


@record
class OciImage:
    """What to_oci_archive wrote: the digests of the OCI manifest, the config (the image id) and
    every layer (uncompressed tars: each equals its diff_id), and the image's name."""

    manifest: str
    config: str
    layers: tuple[str, ...]
    name: str

    def to_json(self) -> dict[str, Any]:
        return {"format": "oci-image-layout+docker-archive", "name": self.name,
                "manifest_digest": self.manifest, "config_digest": self.config,
                "layer_digests": list(self.layers)}


class _Hashing:
    """A reader that hashes what passes through it (a layer is copied once, never held)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw, self.hash = raw, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.hash.update(data)
        return data


def _bad(what: str, why: str) -> UsageError:
    return UsageError(f"{what}: {why}", "save the image again with `docker save`; an archive "
                      "from anywhere else is not taken")


def archive_members(tf: tarfile.TarFile, what: str) -> dict[str, tarfile.TarInfo]:
    """name -> member of a docker archive, every member checked (exit 2): no absolute name, no
    `..`, no name twice, only files and directories, and a symlink only as `docker save` writes
    one: a layer.tar pointing at another layer's regular layer.tar inside the archive."""
    members: dict[str, tarfile.TarInfo] = {}
    for m in tf:
        name = m.name
        parts = name.split("/")
        if not name or name.startswith("/") or ".." in parts or "\\" in name or "\0" in name:
            raise _bad(what, f"member {name[:80]!r} is outside the archive")
        key = posixpath.normpath(name)
        if key == ".":
            continue
        if key in members:
            raise _bad(what, f"member {key[:80]!r} is in it twice")
        if m.issym():
            target = posixpath.normpath(posixpath.join(posixpath.dirname(key), m.linkname))
            if (not key.endswith("/layer.tar") or m.linkname.startswith("/")
                    or target.split("/")[0] == ".." or not target.endswith("/layer.tar")):
                raise _bad(what, f"{key[:80]!r} is a link to {m.linkname[:80]!r}")
        elif not (m.isreg() or m.isdir()):
            raise _bad(what, f"member {key[:80]!r} is not a file or a directory")
        members[key] = m
    for key, m in members.items():
        if m.issym():
            dest = members.get(posixpath.normpath(posixpath.join(posixpath.dirname(key),
                                                                 m.linkname)))
            if dest is None or not dest.isreg():
                raise _bad(what, f"{key[:80]!r} is a link to {m.linkname[:80]!r}, which is not "
                           "a layer in it")
    return members


def _regular(members: dict[str, tarfile.TarInfo], path: object, what: str) -> tarfile.TarInfo:
    """The regular file a manifest.json path names (through at most one layer.tar link)."""
    if not isinstance(path, str) or not path:
        raise _bad(what, f"manifest.json names {str(path)[:80]!r}")
    key = posixpath.normpath(path)
    m = members.get(key)
    if m is not None and m.issym():
        m = members.get(posixpath.normpath(posixpath.join(posixpath.dirname(key), m.linkname)))
    if m is None or not m.isreg():
        raise _bad(what, f"manifest.json names {path[:80]!r}, which is not a file in it")
    return m


def _read_small(tf: tarfile.TarFile, m: tarfile.TarInfo, what: str) -> bytes:
    f = tf.extractfile(m)
    if m.size > _MAX_JSON or f is None:
        raise _bad(what, f"{m.name[:80]!r} is over {_MAX_JSON >> 20} MiB")
    return f.read()


def _json(data: bytes, what: str, name: str) -> Any:
    try:
        return boundedio.parse_json(data)
    except boundedio.TooDeep as exc:
        raise _bad(what, f"{name} is {exc}") from None
    except ValueError:
        raise _bad(what, f"{name} is not JSON") from None


def _canonical(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def containerd_name(ref: str) -> str:
    """The fully qualified name (docker.io/library/x:latest) that io.containerd.image.name takes."""
    from envbuild.engine.registry import parse_ref

    r = parse_ref(ref)
    return f"{r.host}/{r.repo}:{r.tag or 'latest'}"


def to_oci_archive(src: Path, dst: Path, ref: str) -> OciImage:
    """Convert the docker archive `src` (`docker save` of one image, legacy format) into `dst`:
    an OCI image layout (oci-layout, index.json naming `ref`, blobs/sha256/ holding the config,
    the OCI manifest and every layer as an uncompressed tar) that keeps a docker-archive
    manifest.json pointing at those blobs, as Docker >= 25 writes it, so older engines load it.
    Layers are streamed (hashed while copied); each must equal its diff_id in the config (else
    exit 1); a member name outside the archive or a stray link is refused (exit 2). Nothing is
    left at dst on failure."""
    what = f"docker archive {src.name}"
    try:
        with tarfile.open(src, "r:") as tf, atomic_file(dst) as fh, \
                tarfile.open(fileobj=fh, mode="w:", format=tarfile.PAX_FORMAT) as out:
            members = archive_members(tf, what)
            if "manifest.json" not in members or not members["manifest.json"].isreg():
                raise _bad(what, "no manifest.json (not a docker archive)")
            images = _json(_read_small(tf, members["manifest.json"], what), what, "manifest.json")
            if not (isinstance(images, list) and len(images) == 1 and isinstance(images[0], dict)
                    and isinstance(images[0].get("Layers"), list)):
                raise _bad(what, "manifest.json does not describe exactly one image")
            config_bytes = _read_small(tf, _regular(members, images[0].get("Config"), what), what)
            config = _json(config_bytes, what, "the image config")
            rootfs = config.get("rootfs") if isinstance(config, dict) else None
            diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
            layer_paths = images[0]["Layers"]
            if (not isinstance(rootfs, dict) or rootfs.get("type") != "layers"
                    or not isinstance(diff_ids, list)
                    or not all(isinstance(d, str) and is_digest(d) for d in diff_ids)
                    or len(diff_ids) != len(layer_paths)):
                raise _bad(what, "its config's rootfs.diff_ids do not list its layers")

            def blob(digest: str, size: int, data: IO[bytes] | _Hashing) -> None:
                info = tarfile.TarInfo(f"blobs/sha256/{digest.removeprefix('sha256:')}")
                info.size, info.mode, info.mtime = size, 0o644, 0
                out.addfile(info, data)  # tarfile only read()s it

            for d in ("blobs", "blobs/sha256"):
                info = tarfile.TarInfo(d)
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
                out.addfile(info)
            layers: list[dict[str, Any]] = []
            written: dict[str, tarfile.TarInfo] = {}
            for path, diff_id in zip(layer_paths, diff_ids, strict=True):
                m = _regular(members, path, what)
                layers.append({"mediaType": MT_LAYER, "digest": diff_id, "size": m.size})
                if written.get(diff_id) is m:  # docker save linked a layer seen twice: one blob
                    continue
                f = tf.extractfile(m)
                assert f is not None  # a regular member
                reader = _Hashing(f)
                if diff_id in written:  # the same diff_id from another member: only checked
                    while reader.read(1 << 20):
                        pass
                else:
                    blob(diff_id, m.size, reader)
                if "sha256:" + reader.hash.hexdigest() != diff_id:
                    raise EnvbuildError(
                        f"{what}: layer {path[:80]} has sha256 {reader.hash.hexdigest()[:12]}..., "
                        f"not its diff_id {diff_id[7:19]}... in the image config",
                        "the archive is damaged, or not what the engine saved: save it again")
                written.setdefault(diff_id, m)
            config_digest = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
            blob(config_digest, len(config_bytes), _bytes(config_bytes))
            manifest = _canonical({
                "schemaVersion": 2, "mediaType": MT_MANIFEST, "layers": layers,
                "config": {"mediaType": MT_CONFIG, "digest": config_digest,
                           "size": len(config_bytes)}})
            manifest_digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
            blob(manifest_digest, len(manifest), _bytes(manifest))
            name = containerd_name(ref)
            index = _canonical({"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": [{
                "mediaType": MT_MANIFEST, "digest": manifest_digest, "size": len(manifest),
                "annotations": {CONTAINERD_NAME: name, REF_NAME: name.rsplit(":", 1)[1]}}]})
            docker_manifest = _canonical([{
                "Config": f"blobs/sha256/{config_digest[7:]}", "RepoTags": [ref],
                "Layers": [f"blobs/sha256/{la['digest'][7:]}" for la in layers]}])
            for fname, data in (("oci-layout", OCI_LAYOUT), ("index.json", index),
                                ("manifest.json", docker_manifest)):
                info = tarfile.TarInfo(fname)
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                out.addfile(info, _bytes(data))
    except (tarfile.TarError, EOFError) as exc:
        raise _bad(what, f"not a readable tar ({str(exc)[:80]})") from None
    return OciImage(manifest_digest, config_digest, tuple(la["digest"] for la in layers), name)


def _bytes(data: bytes) -> IO[bytes]:
    return io.BytesIO(data)
