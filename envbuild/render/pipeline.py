"""The stages glued together: request -> spec -> rendered context (and, for --all, many).

Pure apart from reading the CA bundle / wheelhouse names for validation; heavy modules (jinja2,
docker) are imported only when a stage runs.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from envbuild.common.echo import shown
from envbuild.common.errors import ConflictError, UsageError
from envbuild.common.record import record

if TYPE_CHECKING:
    from collections.abc import Mapping

    from envbuild.core.request import Request
    from envbuild.core.spec import Spec
    from envbuild.matrix import Matrix
    from envbuild.render.context import RenderedFile, RenderOptions


@record
class ContextInputs:
    pip: tuple[str, ...] = ()
    team_pip: tuple[str, ...] = ()  # a team's shared packages: their own layer, before pip
    apt: tuple[str, ...] = ()
    conda: tuple[str, ...] = ()
    allow_url: bool = False
    user: str = "envbuild"
    pip_index_url: str | None = None
    pip_extra_index_urls: tuple[str, ...] = ()
    torch_index_url: str | None = None
    torch_index_kind: str | None = None  # pypi | pytorch: overrides the URL-shape guess
    cuda_redist_url: str | None = None  # a mirror of NVIDIA's redist root (--forward-compat)
    ca_cert: Path | None = None
    wheelhouse: Path | None = None
    base_image: str | None = None
    build_base_image: str | None = None  # a cross-platform image's torch stage's image
    python_source: str | None = None
    apptainer: bool = False
    extension_sources: tuple[Path, ...] = ()  # --build-extension: compiled in a builder stage


# --build-extension: a source tree goes into the build context whole, so it is bounded.
SOURCE_FILES = 500
SOURCE_BYTES = 16 << 20
_SOURCE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$", re.ASCII)
_KEY = re.compile(r"^[0-9a-f]{16}$", re.ASCII)
_SKIP_DIRS = frozenset({".git", "__pycache__", "build", "dist", ".eggs", ".tox", ".venv"})


def read_source_tree(path: Path) -> tuple[str, tuple[tuple[str, bytes], ...]]:
    """--build-extension DIR: (its name, its files as (relative path, bytes)), regular files
    only (no link is followed), build outputs and VCS data left out, bounded in count and size.
    UsageError (exit 2) for anything else."""
    import os
    import stat

    from envbuild.common.boundedio import read_bytes

    flag = f"--build-extension {shown(str(path))}"
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        raise UsageError(f"{flag}: no such directory", "give the extension's source directory "
                         "(the one with setup.py or pyproject.toml)") from None
    name = path.resolve().name
    if not stat.S_ISDIR(st.st_mode) or not _SOURCE_NAME.fullmatch(name):
        raise UsageError(f"{flag}: not a source directory with a plain name",
                         "give a directory named in letters, digits, '.', '_' and '-'")
    if not any((path / f).is_file() for f in ("setup.py", "pyproject.toml")):
        raise UsageError(f"{flag}: no setup.py or pyproject.toml", "pip builds the wheel from "
                         "one of them: give the project's root directory")
    files: list[tuple[str, bytes]] = []
    total = 0
    for root, dirs, names in os.walk(path, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
        for n in sorted(names):
            full = Path(root) / n
            if full.is_symlink() or not full.is_file():
                continue
            rel = full.relative_to(path).as_posix()
            if not rel.isprintable() or not rel.encode("utf-8", "replace").decode() == rel:
                raise UsageError(f"{flag}: a file name that is not printable UTF-8 "
                                 f"({shown(rel)})", "rename it: the build context and the "
                                 "Dockerfile name every file")
            data = read_bytes(full, "extension source file", cap=SOURCE_BYTES)
            total += len(data)
            files.append((rel, data))
            if len(files) > SOURCE_FILES or total > SOURCE_BYTES:
                raise UsageError(f"{flag}: more than {SOURCE_FILES} files or {SOURCE_BYTES >> 20}"
                                 " MB", "point at the extension's own source tree (no datasets, "
                                 "no build outputs)")
    return name, tuple(files)


@record
class Secrets:
    """BuildKit secrets: id -> file path (given) or content (made here, written 0600 at build)."""

    files: dict[str, Path] = field(default_factory=dict)
    contents: dict[str, str] = field(default_factory=dict)

    def redact(self, text: str) -> str:
        for value in self.contents.values():
            for token in value.split():
                if len(token) >= 4 and token not in ("machine", "login", "password"):
                    text = text.replace(token, "***")
        return text


@record
class Prepared:
    spec: Spec
    options: RenderOptions
    files: dict[str, RenderedFile]
    secrets: Secrets
    wheelhouse: Path | None


_SECRET_HINTS = {
    "--ca-cert": "give a PEM bundle file, e.g. /etc/ssl/certs/ca-certificates.crt",
    "--netrc": "give a netrc file, e.g. ~/.netrc",
}


def secret_file(path: Path, flag: str) -> Path:
    """A file given as a build secret: it must be a readable regular file."""
    hint = _SECRET_HINTS.get(flag, "give a file")
    from envbuild.common.boundedio import regular_file

    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a directory, not a file", hint)
    try:
        regular_file(path, "file", hint)  # a FIFO or a device (/dev/zero) is refused by name
    except FileNotFoundError:
        raise UsageError(f"{flag} {path}: no such file", hint) from None
    except UsageError as exc:
        raise UsageError(f"{flag} {exc.message}", hint) from None
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot be read ({exc.strerror})", hint) from None
    return path.resolve()


def _netrc(urls: list[str]) -> str:
    lines = []
    for u in urls:
        p = urlsplit(u)
        if p.username or p.password:
            # netrc holds the decoded values (index_url refused whitespace in them); a
            # user-only token has no password token at all: `password` with nothing after it
            # would take the next line's `machine` as the password and break the whole file
            password = unquote(p.password or "")
            lines.append(f"machine {p.hostname} login {unquote(p.username or '')}"
                         + (f" password {password}" if password else ""))
    return "\n".join(lines) + ("\n" if lines else "")


def render_options(ci: ContextInputs, image_ref: str = "") -> tuple[RenderOptions, Secrets]:
    from envbuild.core.packages import validate_all
    from envbuild.core.tags import wheel_sizes
    from envbuild.render.context import RenderOptions, image_reference, index_url, user_name

    pip, apt, conda = validate_all(list(ci.pip), list(ci.apt), list(ci.conda), ci.allow_url)
    team_pip = validate_all(list(ci.team_pip), [], [], ci.allow_url)[0]
    raw_urls = [u for u in (ci.pip_index_url, ci.torch_index_url, *ci.pip_extra_index_urls) if u]
    creds = False
    pip_index = torch_index = None
    if ci.pip_index_url:
        pip_index, c = index_url(ci.pip_index_url, "--pip-index-url")
        creds |= c
    if ci.torch_index_url:
        torch_index, c = index_url(ci.torch_index_url, "--torch-index-url")
        creds |= c
    extras = []
    for u in ci.pip_extra_index_urls:
        clean, c = index_url(u, "--pip-extra-index-url")
        extras.append(clean)
        creds |= c
    if ci.torch_index_kind is not None and ci.torch_index_kind not in ("pypi", "pytorch"):
        raise UsageError(f"--torch-index-kind {ci.torch_index_kind[:40]!r} is not pypi or "
                         "pytorch", "pypi: PyPI or a PyPI mirror; pytorch: the PyTorch wheel "
                         "index or a mirror of one variant's index")
    from envbuild.core.request import check_python_source

    check_python_source(ci.python_source)
    secrets = Secrets()
    if ci.ca_cert is not None:
        secrets.files["ca"] = secret_file(ci.ca_cert, "--ca-cert")
    if creds:
        secrets.contents["netrc"] = _netrc(raw_urls)
    if ci.wheelhouse is not None and (not ci.wheelhouse.is_dir()
                                      or not any(ci.wheelhouse.glob("*.whl"))):
        raise UsageError(f"--wheelhouse {ci.wheelhouse}: not a directory of *.whl files",
                         "fill it with: pip download -d DIR torch==X.Y.Z ...")
    redist_url = None
    if ci.cuda_redist_url:
        redist_url, c = index_url(ci.cuda_redist_url, "--cuda-redist-url")
        if c:
            raise UsageError("--cuda-redist-url: credentials in the URL are not supported",
                             "serve the mirror without a login, or from the build's network")
    opts = RenderOptions(
        user=user_name(ci.user), pip=tuple(pip), team_pip=tuple(team_pip), apt=tuple(apt),
        conda=tuple(conda),
        torch_index_url=torch_index, pip_index_url=pip_index, pip_extra_index_urls=tuple(extras),
        index_credentials=creds, ca_cert=ci.ca_cert is not None,
        wheelhouse=ci.wheelhouse is not None, wheels=wheel_sizes(ci.wheelhouse),
        base_image=image_reference(ci.base_image) if ci.base_image else None,
        build_base=(image_reference(ci.build_base_image, "--build-base-image")
                    if ci.build_base_image else None),
        python_source=ci.python_source, apptainer=ci.apptainer, image_ref=image_ref,
        cuda_redist_url=redist_url,
        extension_sources=_sources(ci.extension_sources),
        ext_prebuilt=compiled_keys(ci.wheelhouse))
    return opts, secrets


EXT_DIRS = 1000  # ext-KEY directories of a wheelhouse looked at


def wheelhouse_links(wheelhouse: Path | None, files: Mapping[str, RenderedFile]
                     ) -> dict[str, Path]:
    """What of the wheelhouse goes into the build context (linked, not copied): its wheels, and
    the ext-KEY directory of compiled extensions the Dockerfile installs from (a context
    rendered without a builder stage)."""
    if wheelhouse is None:
        return {}
    links = {"wheelhouse": wheelhouse}
    compiled = compiled_extension(files)
    if compiled is not None and compiled[1]:
        links[f"wheelhouse/ext-{compiled[0]}"] = wheelhouse / f"ext-{compiled[0]}"
    return links


def compiled_extension(files: Mapping[str, RenderedFile]) -> tuple[str, bool] | None:
    """(the key of the extensions a rendered context compiles, whether the wheelhouse already
    holds their wheels: then no builder stage was rendered); None: the context compiles none."""
    import json

    plan = files.get("ext-build.json")
    if plan is None:
        return None
    return str(json.loads(plan.content)["key"]), "build-extensions.py" not in files


def compiled_keys(wheelhouse: Path | None) -> frozenset[str]:
    """The keys of the compiled extensions a wheelhouse holds: its ext-KEY directories with a
    wheel in them (`make` exports each there after compiling it; a half-written one is named
    .ext-KEY-partial until it is whole)."""
    import itertools

    if wheelhouse is None:
        return frozenset()
    dirs = itertools.islice(wheelhouse.glob("ext-*"), EXT_DIRS)
    return frozenset(d.name.removeprefix("ext-") for d in dirs
                     if _KEY.fullmatch(d.name.removeprefix("ext-")) and d.is_dir()
                     and not d.is_symlink() and any(d.glob("*.whl")))


def _sources(paths: tuple[Path, ...]) -> tuple[tuple[str, tuple[tuple[str, bytes], ...]], ...]:
    out = [read_source_tree(p) for p in paths]
    names = [n for n, _ in out]
    for n in names:
        if names.count(n) > 1:
            raise UsageError(f"--build-extension: two sources named {n}",
                             "give each extension once (its directory name names it)")
    return tuple(out)


def index_kind(ci: ContextInputs) -> str | None:
    """--torch-index-kind, else (a --wheelhouse without a torch index) the layout its torch
    wheel names: PyPI's torch-2.13.0-... is pinned without +cu130, torch-2.13.0+cpu-... with."""
    from envbuild.core.torch_index import wheelhouse_kind

    if ci.torch_index_kind is not None or ci.wheelhouse is None or ci.torch_index_url:
        return ci.torch_index_kind
    return wheelhouse_kind(sorted(p.name for p in ci.wheelhouse.glob("torch-*.whl")))


def prepare(req: Request, ci: ContextInputs, m: Matrix, image_ref: str = "") -> Prepared:
    from envbuild.core.resolve import resolve, with_python_source
    from envbuild.core.torch_index import plan
    from envbuild.render.context import render

    opts, secrets = render_options(ci, image_ref)  # input errors first: nothing resolved yet
    spec = with_python_source(resolve(req, m), ci.python_source, m)
    # A PyPI-like torch index: pins without the local tag, or refused before any build.
    local = plan(spec, m, opts.torch_index_url, index_kind(ci)).local_tag
    opts = dataclasses.replace(opts, torch_local_tag=local)
    if spec.forward_compat and opts.cuda_redist_url:  # the mirror's manifest gives the checksum
        from envbuild.core import redist

        opts = dataclasses.replace(opts, compat=redist.from_mirror(m, spec.forward_compat,
                                                                   opts.cuda_redist_url))
    if not _container(spec.target) and (opts.base_image or opts.apt or opts.wheelhouse):
        raise UsageError("--base-image, --apt and --wheelhouse do not apply to --target mps",
                         "--target mps is a native macOS environment: leave these options out")
    from envbuild.core import platforms

    if opts.build_base and not platforms.foreign(spec.platform):
        raise UsageError("--build-base-image applies only to an image for another platform",
                         "the image is for linux/amd64, built in one stage: leave it out, or "
                         "add --platform linux/arm64")
    files = render(spec, opts, m)
    return Prepared(spec, opts, files, secrets, ci.wheelhouse)


def _container(target: str) -> bool:
    from envbuild.core import targets

    return targets.get(target).container


def all_requests(base: Request, m: Matrix) -> list[Request]:
    """Every (torch release x variant x Python x OS) combination that base's filters allow."""
    from envbuild.core.request import split_torch, torch_specifier

    spec = torch_specifier(base.torch) if base.torch else None
    only = split_torch(base.torch)[1] if base.torch else None  # `--torch 2.5.1+cu121`
    from envbuild.core import targets as registry

    targets = [base.target] if base.target else list(registry.NAMES)
    out: list[Request] = []
    for rel in m.torch:
        patches = [p.torch for p in m.patches_of(rel.version)
                   if spec is None or spec.contains(p.torch, prereleases=True)]
        if not patches:
            continue
        pythons = [base.python] if base.python else list(rel.python)
        for v in m.variants_of(rel.version):
            if only is not None and v.tag != only:
                continue
            for target in targets:
                if v.kind != registry.get(target).wheel_kind:
                    continue
                oses = _oses_for(m, target, v.version, base)
                for py in pythons:
                    for os_id in oses:
                        out.append(dataclasses.replace(
                            base, target=target, torch=patches[-1], python=py, os=os_id,
                            cuda=v.version if v.kind == "cuda" else None,
                            rocm=v.version if v.kind == "rocm" else None))
    return out


def _oses_for(m: Matrix, target: str, version: str, base: Request) -> list[str | None]:
    from envbuild.core import targets

    source = targets.get(target).os_candidates
    if source == "none":
        return [None]
    if source == "all":
        ids = [o.id for o in m.oses]
    elif source == "rocm-release":
        rel = m.rocm_release(version)
        ids = list(rel.os) if rel else []
    else:
        cuda = m.cuda_release(version)
        ids = [i.os for i in m.images_for(cuda.image)] if cuda and cuda.image else []
    if base.os:
        ids = [i for i in ids if i == base.os]
    return list(ids)


def prepare_all(base: Request, ci: ContextInputs,
                m: Matrix) -> list[tuple[str, Prepared]]:
    """Render every valid combination; combinations the resolver refuses are left out."""
    from envbuild.core import targets
    from envbuild.core.request import parse
    from envbuild.core.resolve import resolve_parsed, with_python_source
    from envbuild.core.torch_index import plan
    from envbuild.render.context import render

    opts, secrets = render_options(ci)
    seen: dict[str, tuple[str, Prepared]] = {}
    for req in all_requests(base, m):
        try:
            spec = with_python_source(
                resolve_parsed(m, dataclasses.replace(parse(req, m), given=frozenset())),
                ci.python_source, m)
            # on a PyPI-like torch index only the release's default variant exists
            local = plan(spec, m, opts.torch_index_url, index_kind(ci)).local_tag
        except (ConflictError, UsageError):
            continue
        if spec.hash in seen:
            continue
        native = not targets.get(spec.target).container
        name = "-".join(x for x in (spec.target, spec.torch, spec.variant, f"py{spec.python}",
                                    "" if native else spec.os) if x)
        o = dataclasses.replace(opts, torch_local_tag=local)
        seen[spec.hash] = (name, Prepared(spec, o, render(spec, o, m), secrets, ci.wheelhouse))
    return sorted(seen.values(), key=lambda x: x[0])
