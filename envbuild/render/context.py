"""Rendering: a resolved spec -> the files of a build context. Pure and deterministic.

`render()` returns {relative path: RenderedFile}; `write_tree()` (the only I/O, in
envbuild.common.outputs) writes them all or none, with a manifest so that `--force` replaces only a
previous render.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import tomllib
from dataclasses import field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit, urlunsplit

import jinja2

from envbuild import __version__
from envbuild.common.errors import MatrixError, UsageError
from envbuild.common.record import record
from envbuild.common.redact import mask_url, shown
from envbuild.common.resources import matrix_dir, templates_dir
from envbuild.common.versions import minor_number
from envbuild.core import refs, tags, targets
from envbuild.core.request import COMPONENTS
from envbuild.core.spec import Spec
from envbuild.matrix import Matrix, OsInfo

if TYPE_CHECKING:
    from envbuild.core.redist import CompatArchive

VENV = "/opt/venv"
WHEELHOUSE_MOUNT = "/run/envbuild/wheelhouse"
_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$", re.ASCII)
# `FROM scratch` (Docker's empty image) has no shell, no package manager and no libc.
_NO_SHELL = re.compile(r"^(?:(?:docker\.io/)?library/)?scratch(?::latest)?$")


@record
class RenderedFile:
    content: str | bytes
    mode: int = 0o644


@record
class RenderOptions:
    user: str = "envbuild"
    uid: int = 1000
    pip: tuple[str, ...] = ()
    team_pip: tuple[str, ...] = ()  # a team's shared packages (their own layer, before pip)
    apt: tuple[str, ...] = ()
    conda: tuple[str, ...] = ()
    torch_index_url: str | None = None
    torch_local_tag: bool = True  # False on a PyPI-like torch index (envbuild.core.torch_index)
    pip_index_url: str | None = None
    pip_extra_index_urls: tuple[str, ...] = ()
    index_credentials: bool = False
    ca_cert: bool = False
    wheelhouse: bool = False
    wheels: tuple[tuple[str, int], ...] = ()  # the wheelhouse's (name, size): in the image tag
    base_image: str | None = None
    # a cross-platform image's torch stage runs on the build machine: its image (default: the
    # base image, which must then be multi-platform, as Docker Hub's distribution images are)
    build_base: str | None = None
    python_source: str | None = None
    apptainer: bool = False
    image_ref: str = ""
    extra: dict[str, str] = field(default_factory=dict)
    cuda_redist_url: str | None = None  # a mirror of NVIDIA's redist root (--cuda-redist-url)
    compat: CompatArchive | None = None  # the forward-compat archive read from that mirror
    # --build-extension: (name, ((relative path, bytes), ...)) per source tree
    extension_sources: tuple[tuple[str, tuple[tuple[str, bytes], ...]], ...] = ()
    # the compiled-extension keys whose wheels the --wheelhouse holds (its ext-KEY directories)
    ext_prebuilt: frozenset[str] = frozenset()


def image_reference(value: str, flag: str = "--base-image") -> str:
    try:
        refs.parse(value)
        ok = len(value) <= 255
    except refs.RefError:
        ok = False
    if not ok:
        raise UsageError(f"{flag} {shown(value, 60)!r} is not an image reference",
                         "e.g. ubuntu:22.04, registry.example.com:5000/mirror/ubuntu:22.04")
    if flag == "--base-image" and _NO_SHELL.fullmatch(value):
        raise UsageError(f"--base-image {value}: the empty image has no shell, package manager "
                         "or C library, and every build step runs bash",
                         "give a distribution image (ubuntu:24.04, debian:bookworm-slim) or "
                         "its mirror")
    return value


# RFC 3986 characters less every one a shell treats specially ($ & ' ( ) ; and, outside RFC 3986,
# ` | < > { } " \ whitespace, control and non-ASCII characters).
_URL_CHARS = re.compile(r"[A-Za-z0-9._~:/?#\[\]@!*+,=%-]+")
_PCT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_URL_HINT = "e.g. https://pypi.example.com/simple (a login: https://USER:TOKEN@host/simple)"
_PCT_HINT = ("percent-encode it (%XX): in a login, / is %2F, ? %3F, # %23, @ %40, : %3A; "
             + _URL_HINT)


def index_url(value: str, flag: str) -> tuple[str, bool]:
    """(URL without credentials, whether it had credentials). Credentials go in a build secret.

    Refused (UsageError, exit 2): anything but http(s) with a host; any character outside
    RFC 3986 or special to a shell; a login standing anywhere but before the host (an
    unencoded '/' '?' '#' of its password ended the host early: the rest would be written
    into the Dockerfile as a path); a query or fragment (a token there would be written into
    the Dockerfile, so into the image history: the hint says to move it into the user:token@
    part). Every message shows the value with its login and query masked, whatever its shape.
    """
    echo = shown(value, 80, url=True)
    if len(value) > 2000:
        raise UsageError(f"{flag} is {len(value)} characters long (limit 2000)", _URL_HINT)
    _, sep, rest = value.partition("://")
    end = min((i for i in (rest.find(c) for c in "/?#") if i != -1), default=len(rest))
    if sep and "@" in rest[end:]:
        raise UsageError(f"{flag} {echo!r}: an '@' after the host (a login whose '/' '?' or "
                         "'#' ended the host early?)", _PCT_HINT)
    if "?" in value or "#" in value:
        raise UsageError(
            f"{flag} {echo!r} has a query or fragment, which would be stored in the image "
            "history", "give a token as the URL's user part instead: "
            "https://__token__:TOKEN@host/simple (it goes into a build secret, never the image)")
    bad = next((c for c in value if not _URL_CHARS.fullmatch(c)), None)
    if bad is not None:
        if bad.isspace():
            raise UsageError(f"{flag} {echo!r} contains whitespace, which a URL may not hold",
                             "a login with whitespace cannot go into the build's netrc secret "
                             "either: use a token without; " + _URL_HINT)
        # the character may be the password's own: named only when nothing was masked
        what = f"the character {bad!a}" if mask_url(value) == value else "a character"
        raise UsageError(f"{flag} {echo!r} contains {what}, which a URL may not hold here",
                         _PCT_HINT)
    if _PCT.search(value):
        raise UsageError(f"{flag} {echo!r} has a % that is not a %XX escape", _URL_HINT)
    parts = urlsplit(value)
    try:
        port = parts.port
    except ValueError:
        raise UsageError(f"{flag} {echo!r} has an invalid port", _URL_HINT) from None
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise UsageError(f"{flag} {echo!r} is not an http(s) URL with a host", _URL_HINT)
    user, password = unquote(parts.username or ""), unquote(parts.password or "")
    if re.search(r"[\s\x00-\x1f\x7f\\\"]", user + password):
        raise UsageError(f"{flag} {echo!r}: its credentials hold whitespace, a control "
                         "character, a quote or a backslash (percent-encoded or not)",
                         "a netrc secret cannot carry them; use a token without")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = host + (f":{port}" if port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", "")), bool(user or password)


@cache
def system_users() -> frozenset[str]:
    """Names of the system accounts of the base images' OS families (matrix/system-users.toml)."""
    from envbuild.common.boundedio import load_toml

    path = matrix_dir() / "system-users.toml"
    try:
        doc = load_toml(path, "matrix file")
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise MatrixError(f"cannot read {path}: {exc}") from None
    return frozenset(u for fam in doc.get("family", []) for u in fam.get("users", []))


def user_name(value: str) -> str:
    if not _USER.fullmatch(value):
        raise UsageError(f"--user {value[:40]!r} is not a valid user name",
                         "lower-case letters, digits, _ and -, e.g. --user envbuild, --user root")
    if value in system_users():
        raise UsageError(f"--user {value}: a system account of that name already exists in "
                         "the base images (useradd would fail, or the image would run as a "
                         "service account)", "choose another name, e.g. --user envbuild "
                         "(or --user root to run as root)")
    return value


# Characters no rendered value may hold: a newline would start a new Dockerfile instruction or
# requirements line whatever the quoting (the validators refuse them first; this is the wall).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# A bare word outside a shell (FROM, WORKDIR, a mount target, an xargs list): nothing to quote.
_WORD = re.compile(r"[A-Za-z0-9._:/@+=~-]+")


def _finalize(value: Any) -> Any:
    if isinstance(value, str) and _CONTROL.search(value):
        raise UsageError(f"refusing to render {shown(value, 40)!r}: it holds a control "
                         "character", "check the values given on the command line")
    return value


def _no_control(value: Any) -> None:
    """Refuse a control character anywhere in a template context (strings, lists, dataclasses)."""
    if isinstance(value, str):
        _finalize(value)
    elif isinstance(value, dict):
        for v in value.values():
            _no_control(v)
    elif isinstance(value, list | tuple | set | frozenset):
        for v in value:
            _no_control(v)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _no_control(getattr(value, f.name))


def _sh(value: Any) -> str:
    """One shell word, whatever the value holds (POSIX single quotes)."""
    return shlex.quote(_finalize(str(value)))


def _shjoin(values: Any) -> str:
    return " ".join(_sh(v) for v in values)


def _word(value: Any) -> str:
    text = str(value)
    if not _WORD.fullmatch(text):
        raise UsageError(f"refusing to render {shown(text, 40)!r} where only a plain word "
                         "(letters, digits, . _ : / @ + = ~ -) may stand",
                         "check the values given on the command line")
    return text


# A Dockerfile ENV value: a word, with commas and comparisons too (compute,utility, cuda>=13.0),
# which the Dockerfile parser (no shell) keeps as they are; never $, \\, a quote or a space, which
# it would expand, unescape or split.
_ENV_VALUE = re.compile(r"[A-Za-z0-9._:/@+=~,<>-]+")


def _env_value(value: Any) -> str:
    text = str(value)
    if not _ENV_VALUE.fullmatch(text):
        raise UsageError(f"refusing to render {shown(text, 40)!r} as an ENV value",
                         "check the values given on the command line")
    return text


def _env_words(values: Any) -> str:
    """Several ENV-value words as one value: bare when one, else space-joined in quotes."""
    words = [_env_value(v) for v in values]
    return words[0] if len(words) == 1 else '"' + " ".join(words) + '"'


def _yaml(value: Any) -> str:
    """A YAML double-quoted scalar: any string survives (': ', ' #', quotes, non-ASCII)."""
    out = []
    for ch in str(value):
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code <= 0xFF:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


@cache
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(sh=_sh, shjoin=_shjoin, word=_word, yaml=_yaml, env=_env_value,
                       env_words=_env_words)
    return env


def _template(name: str, **ctx: Any) -> str:
    return _env().get_template(name).render(**ctx)


@record
class _Python:
    source: str
    packages: tuple[str, ...]
    bootstrap_packages: tuple[str, ...]
    pip_packages: tuple[str, ...]  # the OS's python3 with venv: a build stage's pip
    interpreter: str
    uv_requirement: str


def _python_plan(spec: Spec, os_info: OsInfo, source: str, m: Matrix) -> _Python:
    """The OS packages for the image's Python, named from os.toml's per-OS package properties.

    Every final image also gets the C/C++ compilers and the Python headers torch.compile needs
    (Inductor's C++ backend on CPU, Triton's launcher on GPUs); a standalone CPython brings its own
    headers. The python-build-standalone bootstrap stage needs only a Python with venv.
    """
    py = spec.python
    apt = os_info.package_manager == "apt"
    certs: tuple[str, ...] = ("ca-certificates",) if apt else ()
    # The OS's own package for the default python3, and for another version it ships (apt names
    # it by the whole version; dnf by the minor, read only there)
    named = f"python{py}" if apt or minor_number(py) >= 11 else f"python3{minor_number(py)}"

    def packages(pkg: str, headers: bool) -> tuple[str, ...]:
        out = [pkg]
        if os_info.venv_suffix:
            out.append(pkg + os_info.venv_suffix)
        if headers:
            out.append(pkg + os_info.headers_suffix)
        return (*out, *certs)

    compilers = os_info.compiler_packages
    uv = str(m.meta.get("os", {}).get("uv_version", ""))
    uv_req = f"uv=={uv}" if uv else "uv"
    pip = packages("python3", False)
    if source == "standalone":
        return _Python("standalone", ("ca-certificates", *compilers), pip,
                       pip, f"/opt/python/{py}/bin/python{py}", uv_req)
    if py == os_info.python:
        return _Python("os", (*packages("python3", True), *compilers), (), pip, "python3",
                       uv_req)
    if py in os_info.extra_python:
        return _Python("os", (*packages(named, True), *compilers), (), pip, f"python{py}",
                       uv_req)
    raise UsageError(f"--python-source os: {os_info.id} does not ship Python {py}",
                     "drop --python-source to use a standalone CPython build")


def secret_mounts(opts: RenderOptions, uid: int, home: str) -> list[str]:
    """BuildKit secret mounts: a CA bundle and index credentials, never in a layer."""
    out: list[str] = []
    home = _word(home)
    if opts.ca_cert:
        out.append(f"--mount=type=secret,id=ca,target=/run/secrets/ca.pem,uid={uid}")
    if opts.index_credentials:
        out.append(f"--mount=type=secret,id=netrc,target={home}/.netrc,uid={uid}")
    return out


def torch_pins(spec: Spec, local_tag: bool = True) -> list[str]:
    """requirements.txt: torch and its companions, exact builds (no local tag on a PyPI-like
    index, where the release's default variant is published without one)."""
    native = not targets.get(spec.target).container  # mps: PyPI's macOS wheels
    local = "" if native or not local_tag else f"+{spec.variant}"
    versions = {"torch": spec.torch, "torchvision": spec.torchvision,
                "torchaudio": spec.torchaudio}
    # request.COMPONENTS names what envbuild installs (packages.py refuses them as user packages)
    return [f"{name}=={versions[name]}{local}" for name in COMPONENTS if versions[name]]


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


def validator_source(m: Matrix) -> bytes:
    """The validator package as one deterministic zipapp (envbuild/validator/zipapp.py), with
    the matrix facts it reads (matrix/wsl2.toml's Linux driver packages)."""
    from envbuild.validator import rules

    rule = rules.linux_driver_rule(m.extra.get("wsl2"))
    return _validator_zip(json.dumps(rule, sort_keys=True).encode())


@cache
def _validator_zip(linux_driver: bytes) -> bytes:
    from envbuild.validator import rules, zipapp

    return zipapp.build(data={rules.LINUX_DRIVER_DATA: linux_driver})


@record
class Indexes:
    """Which index serves what: the one rule every format follows (Dockerfile, environment.yml,
    setup-macos.sh, the requirements.txt note).

    torch and its companions (and their dependencies) come from the torch index (--torch-index-url,
    else the variant's PyTorch index); the user's and the team's packages from the user index
    (--pip-index-url, else PyPI); --pip-extra-index-url serves both. A plain-http index is
    trusted for its own host only (pip ignores it otherwise). The URLs hold no login: that is
    a build secret (netrc) in the image, and the user's ~/.netrc or pip configuration elsewhere.
    """

    torch: str
    user: str
    extras: tuple[str, ...] = ()

    def _args(self, first: str, more: tuple[str, ...] = ()) -> list[str]:
        extra = list(dict.fromkeys((*more, *self.extras)))
        return (["--index-url", first, *_trusted_hosts([first])]
                + [a for u in extra for a in ("--extra-index-url", u)] + _trusted_hosts(extra))

    def torch_args(self) -> list[str]:
        """pip's options for the torch stack."""
        return self._args(self.torch)

    def user_args(self) -> list[str]:
        """pip's options for the user's (and the team's) packages."""
        return self._args(self.user)

    def one_call_args(self, user_packages: bool) -> list[str]:
        """pip's options where one pip call installs both (a conda environment file's pip
        section: pip takes one --index-url per call). Without user packages, the torch stack's
        own; with them, the user index first and the torch index as an extra one: the user's
        packages resolve against their index, and torch's exact builds (+cu121, pinned) exist
        only on the torch index. A package both indexes serve goes to the newer version, as pip
        does with any extra index: the one difference from two calls."""
        if not user_packages or self.user == self.torch:
            return self.torch_args()
        return self._args(self.user, (self.torch,))


def indexes(spec: Spec, opts: RenderOptions, m: Matrix) -> Indexes:
    """The index plan of a render (see Indexes)."""
    pypi = str(m.meta["torch"].get("pypi_index", "https://pypi.org/simple"))
    return Indexes(torch=opts.torch_index_url or spec.index_url,
                   user=opts.pip_index_url or pypi, extras=tuple(opts.pip_extra_index_urls))


def pip_options(args: list[str]) -> list[str]:
    """pip arguments as requirements-file lines (`--index-url URL`), one option a line."""
    return [f"{a} {b}" for a, b in zip(args[::2], args[1::2], strict=True)]


def render(spec: Spec, opts: RenderOptions, m: Matrix) -> dict[str, RenderedFile]:
    idx = indexes(spec, opts, m)
    # No value reaching a template may hold a control character (a newline would start a new
    # Dockerfile instruction or requirements line whatever the quoting): checked once, here.
    _no_control((spec, opts, idx))
    pins = torch_pins(spec, opts.torch_local_tag)
    user_packages = bool(opts.pip or opts.team_pip)
    common: dict[str, Any] = {
        "envbuild_version": __version__, "spec": spec, "spec_hash": spec.hash, "pins": pins,
        "user_pip": list(opts.pip), "user_conda": list(opts.conda), "user_apt": list(opts.apt),
        "all_user_pip": [*opts.team_pip, *opts.pip], "index_url": idx.torch, "venv": VENV,
        "torch_pip_args": idx.torch_args(), "user_pip_args": idx.user_args(),
        "one_call_options": pip_options(idx.one_call_args(user_packages)),
        "one_call_merged": user_packages and idx.user != idx.torch,
    }
    files = {
        "requirements.txt": RenderedFile(_template("requirements.txt.j2", **common)),
        "constraints.txt": RenderedFile(_template("constraints.txt.j2", **common)),
        "user-requirements.txt": RenderedFile(_template("user-requirements.txt.j2", **common)),
        **({"team-requirements.txt": RenderedFile(_template(
            "user-requirements.txt.j2", **{**common, "user_pip": list(opts.team_pip)}))}
           if opts.team_pip else {}),
        **{layer["file"]: RenderedFile(_template(
            "user-requirements.txt.j2", **{**common, "user_pip": layer["packages"],
                                           "header": "the --with extensions as resolved (spec "
                                           f"{spec.hash}), one per line."}))
           for layer in extension_layers(spec, [])},
        "spec.json": RenderedFile(json.dumps(spec.to_json(), indent=2) + "\n"),
        "peaks.json": RenderedFile(peaks_json(m)),
        "validator.pyz": RenderedFile(validator_source(m)),
    }
    native = not targets.get(spec.target).container  # mps: a native macOS environment
    conda_platform = "osx-arm64" if native else "linux-64"
    files["environment.yml"] = RenderedFile(
        _template("environment.yml.j2", conda_platform=conda_platform, **common))
    if native:
        files["setup-macos.sh"] = RenderedFile(_template("setup-macos.sh.j2", **common), 0o755)
        return files

    os_info = m.os_info(spec.os)
    if os_info is None:
        raise UsageError(f"spec names OS {spec.os!r}, which the matrix does not define",
                         "resolve the spec again with this matrix (`envbuild matrix show os`)")
    source = opts.python_source or spec.python_source
    python = _python_plan(spec, os_info, source, m)
    root = opts.user == "root"
    uid = 0 if root else opts.uid
    home = "/root" if root else f"/home/{opts.user}"
    # The image: the same indexes, or its wheelhouse (the torch stack from it alone; user
    # packages may still come from their index, local wheels found first).
    pip_args = ["--no-index", "--find-links", WHEELHOUSE_MOUNT] if opts.wheelhouse else \
        idx.torch_args()
    user_pip_args = (["--find-links", WHEELHOUSE_MOUNT] if opts.wheelhouse else []) + \
        idx.user_args()
    base_image = opts.base_image or spec.base_image
    assert base_image is not None
    ctx = {
        **common, "os": os_info, "python": python, "user": opts.user, "uid": uid,
        "home": home, "chown": "" if root else f"--chown={uid}:{uid} ",
        "ca_cert": opts.ca_cert, "index_credentials": opts.index_credentials,
        "wheelhouse": opts.wheelhouse, "pip_args": pip_args, "user_pip_args": user_pip_args,
        "base_image": base_image, "spec_label": spec_label(spec),
        "runtime": m.meta.get("cuda", {}).get("runtime", {}),
        "has_os_packages": bool(opts.apt),
        "package_layers": package_layers(opts, spec, pip_args),
        "secret_mounts": secret_mounts(opts, uid, home),
        "root_secret_mounts": secret_mounts(opts, 0, "/root"),
    }
    ctx.update(_runtime_context(spec, opts, m))
    ctx["cross"] = _cross_stage(spec, opts, os_info, python, base_image)
    ctx["ext_build"] = extension_build(spec, opts, m)
    if ctx["ext_build"] is not None:
        files["ext-build.json"] = RenderedFile(
            json.dumps(ctx["ext_build"]["plan"], indent=2, sort_keys=True) + "\n")
    if ctx["ext_build"] is not None and not ctx["ext_build"]["prebuilt"]:
        files["build-extensions.py"] = RenderedFile(
            (templates_dir() / "build-extensions.py").read_text(encoding="utf-8"))
        for name, tree in opts.extension_sources:
            for rel, data in tree:
                files[f"ext-src/{name}/{rel}"] = RenderedFile(data)
    if ctx["compat"] is not None:
        files["install-cuda-compat.py"] = RenderedFile(
            (templates_dir() / "install-cuda-compat.py").read_text(encoding="utf-8"))
    files["Dockerfile"] = RenderedFile(_template("Dockerfile.j2", **ctx))
    files[".dockerignore"] = RenderedFile(_template("dockerignore.j2", **ctx))
    files["apt-packages.txt"] = RenderedFile(_template("apt-packages.txt.j2", **ctx))
    files["envbuild-validate"] = RenderedFile(_template("envbuild-validate.j2", **ctx), 0o755)
    if opts.apptainer:  # from the image `envbuild build` makes of these files: its own tag
        ref = opts.image_ref or tags.default_tag(spec, tags.files_hash(
            {rel: f.content for rel, f in files.items()}, opts.wheels))
        files["apptainer.def"] = RenderedFile(_template("apptainer.def.j2", image_ref=ref, **ctx))
    return files


def _runtime_context(spec: Spec, opts: RenderOptions, m: Matrix) -> dict[str, Any]:
    """What a CUDA image on a plain base writes for the NVIDIA runtime: NVIDIA_REQUIRE_CUDA
    (with brand clauses for the driver branches its forward-compatibility libraries serve) and
    the archive of those libraries."""
    if spec.target != "cuda" or not spec.require_cuda:
        return {"require_words": [], "compat": None}
    words = [f"cuda>={spec.require_cuda}"]
    compat = None
    if spec.forward_compat:
        from envbuild.core import redist

        archive = opts.compat or redist.from_matrix(m, spec.forward_compat, opts.cuda_redist_url)
        pkg = redist.package(m, spec.forward_compat)
        brands = m.meta["cuda"]["forward_compat"]["brands"]
        words += [f"brand={b},driver>={br},driver<{int(br) + 1}"
                  for br in pkg.host_branches for b in brands]
        compat = {"url": archive.url, "sha256": archive.sha256, "size": archive.size,
                  "version": archive.version, "cuda": archive.cuda,
                  "dest": f"/usr/local/cuda-{archive.cuda}", "where": archive.where,
                  "branches": list(pkg.host_branches)}
    return {"require_words": words, "compat": compat}


def _cross_stage(spec: Spec, opts: RenderOptions, os_info: OsInfo, python: _Python,
                 base_image: str) -> dict[str, Any] | None:
    """An image for another platform than linux/amd64 gets its torch stack from a stage that runs
    on the build machine ($BUILDPLATFORM): that machine's pip installs the platform's binary
    wheels into a directory (`--platform ... --only-binary=:all: --target`), which the image
    copies into its venv. An emulated pip (qemu) would take about ten times as long; a native
    arm64 builder runs the same stage natively. None for linux/amd64 (one stage, as before)."""
    from envbuild.core import platforms

    if not platforms.foreign(spec.platform):
        return None
    platform = str(spec.platform)
    tags = platforms.wheel_platforms(platform, os_info.glibc)
    abi = "cp" + spec.python.replace(".", "")
    pip = ["--target", "/opt/stack/site", "--only-binary=:all:", "--implementation", "cp",
           "--python-version", spec.python, "--abi", abi, "--abi", "abi3", "--abi", "none",
           *(a for t in tags for a in ("--platform", t))]
    return {"platform": platform, "build_base": opts.build_base or base_image,
            "packages": python.pip_packages, "pip_args": pip,
            "site": f"{VENV}/lib/python{spec.python}/site-packages"}


def extension_layers(spec: Spec, torch_args: list[str]) -> list[dict[str, Any]]:
    """The --with extensions, right above the torch stack and constrained by it: those from
    PyPI or a release asset through the user's pip options, those from the PyTorch index through
    the torch stack's (a PyPI build and an index build share a version number: one index each
    keeps pip from taking the other)."""
    pypi = [e["install"] for e in spec.extensions
            if not e["where"].startswith("index:") and e["where"] != "sdist"]
    index = [e["install"] for e in spec.extensions if e["where"].startswith("index:")]
    out: list[dict[str, Any]] = []
    if pypi:
        out.append({"title": "The --with extensions (prebuilt wheels: PyPI or release assets)",
                    "file": "extensions-requirements.txt", "packages": pypi, "args": None,
                    "step": "extensions"})
    if index:
        out.append({"title": "The --with extensions from the PyTorch index",
                    "file": "extensions-index-requirements.txt", "packages": index,
                    "args": torch_args, "step": "extensions-index"})
    return out


def extension_build(spec: Spec, opts: RenderOptions, m: Matrix) -> dict[str, Any] | None:
    """The builder stage of --build-extension DIR and of a --with extension --build-extensions
    planned from its PyPI sdist: compiled for exactly the --gpu archs with nvcc from PyPI (the
    cuda-toolkit version torch itself pins). PyPI has an nvcc for CUDA 13 only (the cu12 nvcc
    wheels hold ptxas alone), and the stage runs on the build machine, so another platform's
    image is refused here. `plan` is the builder's ext-build.json."""
    sdists = [e for e in spec.extensions if e["where"] == "sdist"]
    if not opts.extension_sources and not sdists:
        return None
    from envbuild.core import platforms

    names = [n for n, _ in opts.extension_sources] + [e["install"] for e in sdists]
    what = f"--build-extension {names[0]}" if opts.extension_sources else \
        f"--build-extensions ({names[0]})"
    if spec.target != "cuda" or not spec.torch_cuda:
        raise UsageError(f"{what}: a CUDA extension needs a CUDA torch; the spec's target is "
                         f"{spec.target}", "add --target cuda (or --cuda X.Y)")
    if int(spec.torch_cuda.split(".")[0]) < 13:
        raise UsageError(f"{what}: torch {spec.torch} is a CUDA {spec.torch_cuda} build; PyPI's "
                         "CUDA 12 compiler wheels carry no nvcc", "compile against a CUDA 13 "
                         "torch (--cuda 13), or build the wheel elsewhere and --pip it")
    if platforms.foreign(spec.platform):
        raise UsageError(f"{what}: the builder stage would run emulated for {spec.platform}",
                         "build the extension on a native builder and --pip its wheel")
    ccs = sorted({g["cc"] for g in spec.gpus if g.get("vendor") == "nvidia" and g.get("cc")},
                 key=lambda c: tuple(int(x) for x in c.split(".")))
    if not ccs:
        raise UsageError(f"{what}: name the GPUs it is compiled for",
                         "add --gpu (e.g. --gpu H100 --gpu A100): the builder compiles for "
                         "exactly their archs, not torch's whole list")
    values = {"archs_nodot": ";".join(c.replace(".", "") for c in ccs),
              "arch_families": ";".join(dict.fromkeys(f"{c.split('.')[0]}0" for c in ccs))}
    builds = []
    for e in sdists:
        ext = m.extension(e["name"])
        assert ext is not None  # the resolver chose it from the matrix
        env = dict(x.split("=", 1) for x in ext.build_env)
        builds.append({"requirement": e["install"], "no_binary": ext.sdist,
                       "build_requires": list(ext.build_requires),
                       "env": {k: v.format(**values) for k, v in env.items()}})
    plan = {"arch_list": " ".join(ccs), "sources": [n for n, _ in opts.extension_sources],
            "sdists": builds}
    key = extension_key(spec, plan, opts)
    return {"names": names, "arch_list": plan["arch_list"], "sources": plan["sources"],
            "plan": {**plan, "key": key}, "key": key, "prebuilt": key in opts.ext_prebuilt}


def extension_key(spec: Spec, plan: dict[str, Any], opts: RenderOptions) -> str:
    """What a compiled extension wheel depends on, hashed: the plan (extensions, versions, archs,
    build switches), the torch it was compiled against (version, variant, Python, platform, OS:
    the glibc it links), the builder script and every source file. A team compiles each key once:
    its wheels wait in the wheelhouse's ext-KEY directory (and the registry's ext-wheels:KEY)."""
    import hashlib

    h = hashlib.sha256()
    for part in (json.dumps(plan, sort_keys=True), spec.torch, spec.variant or "", spec.python,
                 spec.platform or "linux/amd64", spec.os,
                 (templates_dir() / "build-extensions.py").read_text(encoding="utf-8")):
        h.update(part.encode() + b"\0")
    for name, tree in opts.extension_sources:
        for rel, data in sorted(tree):
            h.update(f"{name}/{rel}".encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()[:16]


def package_layers(opts: RenderOptions, spec: Spec | None = None,
                   torch_args: list[str] | None = None) -> list[dict[str, Any]]:
    """The pip layers above the torch stack, in order: the --with extensions, the team's
    packages (a team file's defaults, shared by its images), then the image's own. Each is one
    COPY and one RUN."""
    out: list[dict[str, Any]] = []
    if spec is not None:
        out += extension_layers(spec, torch_args or [])
    if opts.team_pip:
        out.append({"title": "The team's packages (the team file's defaults)",
                    "file": "team-requirements.txt", "packages": list(opts.team_pip),
                    "args": None, "step": "team"})
    out.append({"title": "The image's own packages", "file": "user-requirements.txt",
                "packages": list(opts.pip), "args": None, "step": "user"})
    return out


def _trusted_hosts(urls: list[str] | tuple[str, ...]) -> list[str]:
    """pip ignores a plain-http index that is not localhost unless its host is trusted; an http
    index URL the user gave explicitly is trusted for that host only (an internal devpi, a
    mirror behind the proxy). https indexes need nothing (their CA: --ca-cert)."""
    out: list[str] = []
    for u in urls:
        p = urlsplit(u)
        if p.scheme == "http" and p.hostname:
            out += ["--trusted-host", p.netloc.rsplit("@", 1)[-1]]
    return out


def write_tree(files: dict[str, RenderedFile], out: Path, force: bool = False,
               links: dict[str, Path] | None = None) -> Path:
    """Write the rendered files into `out` (the only I/O of rendering): see envbuild.common.outputs
    for what may be replaced (`force`: only a previous render, by its manifest)."""
    from envbuild.common.outputs import write_tree as write

    return write(files, out, force, links)
