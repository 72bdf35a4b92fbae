"""Rendering: a resolved spec -> the files of a build context. Pure and deterministic.

`render()` returns {relative path: RenderedFile}; `write_tree()` (the only I/O, in
envbuild.outputs) writes them all or none, with a manifest so that `--force` replaces only a
previous render.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import jinja2

from envbuild import __version__
from envbuild.errors import UsageError
from envbuild.matrix import Matrix, OsInfo
from envbuild.resources import templates_dir
from envbuild.spec import Spec

VENV = "/opt/venv"
WHEELHOUSE_MOUNT = "/run/envbuild/wheelhouse"
_IMAGE_REF = re.compile(
    r"^(?:[a-z0-9.-]+(?::\d+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$")
_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class RenderedFile:
    content: str | bytes
    mode: int = 0o644


@dataclass(frozen=True)
class RenderOptions:
    user: str = "envbuild"
    uid: int = 1000
    pip: tuple[str, ...] = ()
    apt: tuple[str, ...] = ()
    conda: tuple[str, ...] = ()
    torch_index_url: str | None = None
    pip_index_url: str | None = None
    pip_extra_index_urls: tuple[str, ...] = ()
    index_credentials: bool = False
    ca_cert: bool = False
    wheelhouse: bool = False
    base_image: str | None = None
    python_source: str | None = None
    apptainer: bool = False
    image_ref: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def image_reference(value: str, flag: str = "--base-image") -> str:
    if len(value) > 255 or not _IMAGE_REF.fullmatch(value):
        raise UsageError(f"{flag} {value[:60]!r} is not an image reference",
                         "e.g. ubuntu:22.04, registry.example.com:5000/mirror/ubuntu:22.04")
    return value


def index_url(value: str, flag: str) -> tuple[str, bool]:
    """(URL without credentials, whether it had credentials). Credentials go in a secret."""
    parts = urlsplit(value)
    if parts.scheme not in ("https", "http") or not parts.hostname or re.search(r"\s", value):
        raise UsageError(f"{flag} {value[:60]!r} is not an http(s) URL",
                         "e.g. https://pypi.example.com/simple")
    has_creds = bool(parts.username or parts.password)
    netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, "")), has_creds


def user_name(value: str) -> str:
    if not _USER.fullmatch(value):
        raise UsageError(f"--user {value[:40]!r} is not a valid user name",
                         "lower-case letters, digits, _ and -, e.g. --user envbuild, --user root")
    return value


@cache
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def _template(name: str, **ctx: Any) -> str:
    return _env().get_template(name).render(**ctx)


@dataclass(frozen=True)
class _Python:
    source: str
    packages: tuple[str, ...]
    bootstrap_packages: tuple[str, ...]
    interpreter: str
    uv_requirement: str


def _python_plan(spec: Spec, os_info: OsInfo, source: str, m: Matrix) -> _Python:
    py = spec.python
    apt = os_info.package_manager == "apt"
    minor = py.split(".")[1]
    system: tuple[str, ...]
    named: tuple[str, ...]
    if apt:
        system = ("python3", "python3-venv", "ca-certificates")
        named = (f"python{py}", f"python{py}-venv", "ca-certificates")
    else:
        system = ("python3",)
        named = (f"python{py}" if int(minor) >= 11 else f"python3{minor}",)
    uv = str(m.meta.get("os", {}).get("uv_version", ""))
    uv_req = f"uv=={uv}" if uv else "uv"
    if source == "standalone":
        return _Python("standalone", ("ca-certificates",), system, f"/opt/python/python{py}",
                       uv_req)
    if py == os_info.python:
        return _Python("os", system, (), "python3", uv_req)
    if py in os_info.extra_python:
        return _Python("os", named, (), f"python{py}", uv_req)
    raise UsageError(f"--python-source os: {os_info.id} does not ship Python {py}",
                     "drop --python-source to use a standalone CPython build")


def secret_mounts(opts: RenderOptions, uid: int, home: str) -> list[str]:
    """BuildKit secret mounts: a CA bundle and index credentials, never in a layer."""
    out = []
    if opts.ca_cert:
        out.append(f"--mount=type=secret,id=ca,target=/run/secrets/ca.pem,uid={uid}")
    if opts.index_credentials:
        out.append(f"--mount=type=secret,id=netrc,target={home}/.netrc,uid={uid}")
    return out


def _pins(spec: Spec) -> list[str]:
    local = "" if spec.target == "mps" else f"+{spec.variant}"
    pins = [f"torch=={spec.torch}{local}"]
    if spec.torchvision:
        pins.append(f"torchvision=={spec.torchvision}{local}")
    if spec.torchaudio:
        pins.append(f"torchaudio=={spec.torchaudio}{local}")
    return pins


def spec_label(spec: Spec) -> str:
    """The spec identity as JSON safe inside a single-quoted Dockerfile LABEL value."""
    blob = json.dumps(spec.identity(), sort_keys=True, separators=(",", ":"))
    blob = blob.replace("\\\\", "\\u005c")
    return blob.replace("'", "\\u0027").replace("$", "\\u0024")


_PEAKS: dict[int, tuple[object, str]] = {}  # id -> (the object itself, so the id stays its own)


def peaks_json(m: Matrix) -> str:
    key = id(m.extra)
    hit = _PEAKS.get(key)
    if hit is None or hit[0] is not m.extra:
        text = json.dumps(m.extra.get("peaks", {}), indent=1, sort_keys=True) + "\n"
        hit = _PEAKS[key] = (m.extra, text)
    return hit[1]


@cache
def validator_source() -> bytes:
    """The validator package as one deterministic zipapp (envbuild/validator/zipapp.py)."""
    from envbuild.validator import zipapp

    return zipapp.build()


def render(spec: Spec, opts: RenderOptions, m: Matrix) -> dict[str, RenderedFile]:
    torch_index = opts.torch_index_url or spec.index_url
    pypi = str(m.meta["torch"].get("pypi_index", "https://pypi.org/simple"))
    user_index = opts.pip_index_url or pypi
    pins = _pins(spec)
    common: dict[str, Any] = {
        "envbuild_version": __version__, "spec": spec, "spec_hash": spec.hash, "pins": pins,
        "user_pip": list(opts.pip), "user_conda": list(opts.conda), "user_apt": list(opts.apt),
        "index_url": torch_index, "extra_index_urls": list(opts.pip_extra_index_urls),
        "venv": VENV,
    }
    files = {
        "requirements.txt": RenderedFile(_template("requirements.txt.j2", **common)),
        "constraints.txt": RenderedFile(_template("constraints.txt.j2", **common)),
        "user-requirements.txt": RenderedFile(_template("user-requirements.txt.j2", **common)),
        "spec.json": RenderedFile(json.dumps(spec.to_json(), indent=2) + "\n"),
        "peaks.json": RenderedFile(peaks_json(m)),
        "validator.pyz": RenderedFile(validator_source()),
    }
    conda_platform = "osx-arm64" if spec.target == "mps" else "linux-64"
    files["environment.yml"] = RenderedFile(
        _template("environment.yml.j2", conda_platform=conda_platform, **common))
    if spec.target == "mps":
        files["setup-macos.sh"] = RenderedFile(_template("setup-macos.sh.j2", **common), 0o755)
        return files

    os_info = m.os_info(spec.os)
    if os_info is None:
        raise UsageError(f"spec names OS {spec.os!r}, which the matrix does not define")
    source = opts.python_source or spec.python_source
    python = _python_plan(spec, os_info, source, m)
    root = opts.user == "root"
    uid = 0 if root else opts.uid
    home = "/root" if root else f"/home/{opts.user}"
    wheel = ["--no-index", "--find-links", WHEELHOUSE_MOUNT]
    extras = [a for u in opts.pip_extra_index_urls for a in ("--extra-index-url", u)]
    pip_args = wheel if opts.wheelhouse else ["--index-url", torch_index, *extras]
    # User packages may come from the index even with a wheelhouse (local wheels are found too).
    user_pip_args = (["--find-links", WHEELHOUSE_MOUNT] if opts.wheelhouse else []) + \
        ["--index-url", user_index, *extras]
    base_image = opts.base_image or spec.base_image
    assert base_image is not None
    ctx = {
        **common, "os": os_info, "python": python, "user": opts.user, "uid": uid,
        "home": home, "chown": "" if root else f"--chown={uid}:{uid} ",
        "ca_cert": opts.ca_cert, "index_credentials": opts.index_credentials,
        "wheelhouse": opts.wheelhouse, "pip_args": pip_args, "user_pip_args": user_pip_args,
        "base_image": base_image, "spec_label": spec_label(spec),
        "has_os_packages": bool(opts.apt),
        "secret_mounts": secret_mounts(opts, uid, home),
        "root_secret_mounts": secret_mounts(opts, 0, "/root"),
    }
    files["Dockerfile"] = RenderedFile(_template("Dockerfile.j2", **ctx))
    files[".dockerignore"] = RenderedFile(_template("dockerignore.j2", **ctx))
    files["apt-packages.txt"] = RenderedFile(_template("apt-packages.txt.j2", **ctx))
    files["envbuild-validate"] = RenderedFile(_template("envbuild-validate.j2", **ctx), 0o755)
    if opts.apptainer:
        ref = opts.image_ref or default_tag(spec)
        files["apptainer.def"] = RenderedFile(_template("apptainer.def.j2", image_ref=ref, **ctx))
    return files


def default_tag(spec: Spec) -> str:
    return f"envbuild/{spec.target}:{spec.torch}-{spec.variant}-py{spec.python}-{spec.hash}"


def write_tree(files: dict[str, RenderedFile], out: Path, force: bool = False,
               links: dict[str, Path] | None = None) -> Path:
    """Write the rendered files into `out` (the only I/O of rendering): see envbuild.outputs
    for what may be replaced (`force`: only a previous render, by its manifest)."""
    from envbuild.outputs import write_tree as write

    return write(files, out, force, links)
