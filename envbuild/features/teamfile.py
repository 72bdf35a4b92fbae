"""The team file (`envbuild.toml`): a family of images with shared defaults. Pure apart from
reading the file.

    [defaults]                 # applies to every image; an image's own keys win
    registry = "registry.example.com/ml"
    pip = ["numpy>=1.26"]      # the team's packages: their own layer, shared by the family

    [image.cpu]
    target = "cpu"
    pip = ["einops"]           # adds to defaults.pip (in the image's own layer)

    [image.train]              # one tag, an OCI image index over both platform images
    platforms = ["linux/amd64", "linux/arm64"]
    [image.train.arm64]        # what differs on one platform (base_image, build_base_image,
    wheelhouse = "wheels-arm64"  # wheelhouse, torch_index_url)

Keys are `envbuild make`'s long options with `-` as `_`, plus `registry`. Lists merge (defaults
first), scalars override. Every value is checked here, before anything resolves, and a bad one is
refused naming the file, the table and the key (UsageError, exit 2).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import Any

from envbuild.common import boundedio
from envbuild.common.echo import shown
from envbuild.common.errors import UsageError
from envbuild.common.record import record
from envbuild.core.platforms import ALIASES
from envbuild.core.request import COMPONENTS, Request
from envbuild.render.pipeline import ContextInputs

DEFAULT_FILE = "envbuild.toml"
MAX_VALUE = 512
MAX_LIST = 200
MAX_IMAGES = 64
_NAME = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*$", re.ASCII)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_VERSION_EXAMPLE = {"cuda": "12.8", "rocm": "6.2", "python": "3.12", "driver": "535.104.05"}

SCALARS = ("target", "cuda", "rocm", "torch", "python", "driver", "os", "flavor", "base_image",
           "wheelhouse", "ca_cert", "pip_index_url", "torch_index_url", "python_source", "user",
           "registry", "push_requires", "platform", "build_base_image", "engine")
LISTS = ("gpu", "pip", "apt", "conda", "without", "pip_extra_index_url", "platforms", "with")
FLAGS = ("build_extensions",)  # true / false, as make's flag of the same name
KEYS = frozenset(SCALARS + LISTS + FLAGS)
# A platform's own table ([image.NAME.arm64], [defaults.amd64]): what may differ between the
# platform images of one multi-platform image.
PLATFORM_TABLES = {short: ALIASES[short] for short in ("amd64", "arm64")}
PLATFORM_KEYS = ("base_image", "build_base_image", "wheelhouse", "torch_index_url", "engine")
# engine: the Docker engine that builds, checks and pushes the image, as DOCKER_HOST writes it
_ENGINE = re.compile(r"(?:unix|tcp|ssh)://[^\s'\"\\`$;|&<>]{1,400}", re.ASCII)
# What --push needs of an image's validation: "validation" (it passed, on a GPU or not) or "gpu"
# (it passed on a GPU: an image checked only without one stays here).
PUSH_REQUIRES = ("validation", "gpu")


@record
class TeamImage:
    """One image of the family: what `make` needs, and where its packages go."""

    name: str
    request: Request
    inputs: ContextInputs  # inputs.team_pip: the defaults' packages; inputs.pip: its own
    registry: str | None
    values: dict[str, Any]  # the merged keys, as written (for plan and the lock)
    push_requires_gpu: bool = False  # push_requires = "gpu"
    # `platforms`: one image per platform under one tag (an OCI image index); () = one image
    platforms: tuple[str, ...] = ()
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)  # platform -> keys
    directory: Path | None = None  # the team file's: relative paths start there
    engine: str | None = None  # a DOCKER_HOST address; None: this machine's default engine

    def on(self, platform: str) -> TeamImage:
        """The image for one of its platforms: that platform's keys over the image's."""
        import dataclasses

        own = self.overrides.get(platform, {})
        base = self.directory
        ci = dataclasses.replace(
            self.inputs,
            base_image=own.get("base_image", self.inputs.base_image),
            build_base_image=own.get("build_base_image", self.inputs.build_base_image),
            wheelhouse=(_path(own["wheelhouse"], base) if "wheelhouse" in own and base
                        else self.inputs.wheelhouse),
            torch_index_url=own.get("torch_index_url", self.inputs.torch_index_url))
        req = dataclasses.replace(self.request, platform=platform)
        return dataclasses.replace(self, request=req, inputs=ci, platforms=(),
                                   engine=own.get("engine", self.engine))


@record
class TeamFile:
    path: Path
    images: tuple[TeamImage, ...]

    def image(self, name: str) -> TeamImage:
        for i in self.images:
            if i.name == name:
                return i
        raise UsageError(f"{self.path}: no image {name!r}",
                         "images: " + ", ".join(i.name for i in self.images))


def _where(path: Path, table: str, key: str = "") -> str:
    return f"{path}: [{table}]" + (f" {key}" if key else "")


def _string(value: object, path: Path, table: str, key: str) -> str:
    if not isinstance(value, str):
        raise UsageError(f"{_where(path, table, key)}: expected a string, got "
                         f"{type(value).__name__}", f"e.g. {key} = \"...\"")
    if _CONTROL.search(value):
        raise UsageError(f"{_where(path, table, key)}: control characters (newline, NUL, ...) "
                         "are not allowed", "one value per string, on one line; a list holds "
                         f"several: {key} = [\"a\", \"b\"]")
    if len(value) > MAX_VALUE:
        raise UsageError(f"{_where(path, table, key)}: {len(value)} characters (limit "
                         f"{MAX_VALUE})", "check what was pasted there")
    if not value.strip():
        raise UsageError(f"{_where(path, table, key)}: empty",
                         f"give a value, or remove the {key} key")
    return value.strip()


def _check_value(key: str, value: str) -> None:
    """The checks `make` applies to the same option (UsageError with the option's message)."""
    from envbuild.core import packages
    from envbuild.core.request import (  # the option syntax rules
        _CUDA,
        _DRIVER,
        _PYTHON,
        _ROCM,
        FLAVORS,
        PYTHON_SOURCES,
        TARGETS,
        torch_specifier,
    )
    from envbuild.render import context

    simple: dict[str, Callable[[str], object]] = {
        "pip": packages.pip_requirement, "apt": packages.apt_package,
        "conda": packages.conda_spec, "torch": torch_specifier,
        "base_image": context.image_reference, "user": context.user_name,
        "pip_index_url": lambda v: context.index_url(v, "pip_index_url"),
        "torch_index_url": lambda v: context.index_url(v, "torch_index_url"),
        "pip_extra_index_url": lambda v: context.index_url(v, "pip_extra_index_url"),
        "registry": lambda v: context.image_reference(f"{v}/x:y", "registry"),
    }
    patterns = {"cuda": _CUDA, "rocm": _ROCM, "python": _PYTHON, "driver": _DRIVER}
    choices: dict[str, tuple[str, ...]] = {
        "target": TARGETS, "flavor": FLAVORS, "python_source": PYTHON_SOURCES,
        "push_requires": PUSH_REQUIRES,
        "without": tuple(c for c in COMPONENTS if c != "torch")}
    if key in simple:
        simple[key](value)
    elif key in patterns:
        if not patterns[key].match(value):
            raise UsageError(f"{shown(value)} is not a valid {key} version",
                             f"e.g. {key} = \"{_VERSION_EXAMPLE[key]}\"")
    elif key in choices:
        if value not in choices[key]:
            raise UsageError(f"{shown(value)} is not one of {', '.join(choices[key])}",
                             f"{key} = \"{choices[key][0]}\", for example")
    elif key in ("os", "gpu"):
        if not re.fullmatch(r"[\w .+()/-]{1,80}", value):
            raise UsageError(f"{shown(value)} is not a {'GPU' if key == 'gpu' else 'OS'} name",
                             "`envbuild matrix show gpus` / `envbuild matrix show os` list "
                             "the known names")
    elif key in ("wheelhouse", "ca_cert"):
        pass  # paths: checked against the file system when an image is prepared
    elif key in ("platform", "platforms"):
        platform_name(value)
    elif key == "build_base_image":
        context.image_reference(value, "build_base_image")
    elif key == "engine" and not _ENGINE.fullmatch(value):
        raise UsageError(f"{shown(value)} is not a Docker engine address",
                         "as DOCKER_HOST writes it: unix:///run/docker-arm64.sock, "
                         "tcp://builder.example.com:2376, ssh://user@builder")


def platform_name(value: str) -> str:
    """linux/amd64 | linux/arm64, as Docker, uname -m or Debian write them."""
    name = ALIASES.get(value.lower(), value.lower())
    if name not in PLATFORM_TABLES.values():
        raise UsageError(f"{shown(value)} is not a platform",
                         "linux/amd64 or linux/arm64, e.g. platforms = [\"linux/amd64\", "
                         "\"linux/arm64\"]")
    return name


def _platform_tables(data: dict[str, Any], path: Path, table: str) -> dict[str, dict[str, Any]]:
    """[TABLE.amd64] / [TABLE.arm64]: only PLATFORM_KEYS, checked like the image's own."""
    out: dict[str, dict[str, Any]] = {}
    for short, platform in PLATFORM_TABLES.items():
        sub = data.get(short)
        if sub is None:
            continue
        where = f"{table}.{short}"
        own = _table(sub, path, where, nested=False)
        bad = sorted(set(own) - set(PLATFORM_KEYS))
        if bad:
            raise UsageError(f"{_where(path, where, bad[0])}: not a per-platform key",
                             "a platform's table holds " + ", ".join(PLATFORM_KEYS))
        out[platform] = own
    return out


def _table(data: object, path: Path, table: str, nested: bool = True) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise UsageError(f"{path}: [{table}] must be a table", f"write it as [{table}]")
    out: dict[str, Any] = {}
    if nested:
        data = dict(data)
        overrides = _platform_tables(data, path, table)
        for short in PLATFORM_TABLES:
            data.pop(short, None)
        if overrides:
            out["_on"] = overrides
    for key, value in data.items():
        if key not in KEYS:
            import difflib

            close = difflib.get_close_matches(key.replace("-", "_"), sorted(KEYS), n=3,
                                              cutoff=0.6)
            raise UsageError(f"{_where(path, table, shown(key))}: unknown key",
                             "keys are make's long options with - as _ (cuda, torch, python, "
                             "target, pip, apt, ...) and registry", close)
        try:
            if key in FLAGS:
                if not isinstance(value, bool):
                    raise UsageError(f"expected true or false, got {type(value).__name__}",
                                     f"e.g. {key} = true")
                out[key] = value
            elif key in LISTS:
                if not isinstance(value, list):
                    raise UsageError(f"expected a list of strings, got {type(value).__name__}",
                                     f"e.g. {key} = [\"...\"]")
                if len(value) > MAX_LIST:
                    raise UsageError(f"{len(value)} entries (limit {MAX_LIST})",
                                     "split the image, or check what was pasted")
                items = [_string(v, path, table, key) for v in value]
                for v in items:
                    _check_value(key, v)
                out[key] = items
            else:
                s = _string(value, path, table, key)
                _check_value(key, s)
                out[key] = s
        except UsageError as exc:
            if exc.message.startswith(str(path)):
                raise
            raise UsageError(f"{_where(path, table, key)}: {exc.message}", exc.hint,
                             exc.alternatives) from None
    return out


def _dedup(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def merge(defaults: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """Lists merge (defaults first, no duplicates), scalars override; a platform's table merges
    key by key; `platforms` is the image's own when it has one. Pure."""
    out = dict(defaults)
    for k, v in own.items():
        if k == "_on":
            on = {p: dict(t) for p, t in defaults.get("_on", {}).items()}
            for p, t in v.items():
                on.setdefault(p, {}).update(t)
            out[k] = on
        elif k in LISTS and k != "platforms":
            out[k] = _dedup([*defaults.get(k, []), *v])
        else:
            out[k] = v
    return out


def _path(value: str | None, base: Path) -> Path | None:
    if value is None:
        return None
    p = Path(value).expanduser()
    return p if p.is_absolute() else base / p


def image_of(name: str, defaults: dict[str, Any], own: dict[str, Any], base: Path) -> TeamImage:
    v = merge(defaults, own)
    team_pip = _dedup(defaults.get("pip", []))
    own_pip = [p for p in _dedup(own.get("pip", [])) if p not in team_pip]
    left_out = set(v.get("without", ()))
    plats = tuple(_dedup([platform_name(p) for p in v.get("platforms", ())]))
    if plats and "platform" in v:
        raise UsageError(f"[image.{name}]: both platform and platforms",
                         "platforms = [...] makes one image per platform under one tag; "
                         "platform = \"...\" one image: keep one")
    req = Request(target=v.get("target"), cuda=v.get("cuda"), rocm=v.get("rocm"),
                  torch=v.get("torch"), python=v.get("python"), driver=v.get("driver"),
                  gpus=tuple(v.get("gpu", ())), os=v.get("os"), flavor=v.get("flavor"),
                  components=tuple(c for c in COMPONENTS if c not in left_out),
                  platform=platform_name(v["platform"]) if "platform" in v else None,
                  extensions=tuple(v.get("with", ())),
                  # the defaults' flag applies to the images that name an extension
                  build_extensions=v.get("build_extensions") is True and bool(v.get("with")))
    ci = ContextInputs(
        pip=tuple(own_pip), team_pip=tuple(team_pip), apt=tuple(v.get("apt", ())),
        conda=tuple(v.get("conda", ())), user=v.get("user", "envbuild"),
        pip_index_url=v.get("pip_index_url"),
        pip_extra_index_urls=tuple(v.get("pip_extra_index_url", ())),
        torch_index_url=v.get("torch_index_url"), ca_cert=_path(v.get("ca_cert"), base),
        wheelhouse=_path(v.get("wheelhouse"), base), base_image=v.get("base_image"),
        build_base_image=v.get("build_base_image"), python_source=v.get("python_source"))
    on = v.pop("_on", {})
    unused = sorted(set(on) - set(plats)) if plats else sorted(on)
    if unused:
        raise UsageError(f"[image.{name}]: a table for {unused[0]}, which is not in its "
                         "platforms", f"add it: platforms = [\"linux/amd64\", \"{unused[0]}\"]"
                         if plats else f"add platforms = [\"{unused[0]}\", ...] to the image")
    return TeamImage(name, req, ci, v.get("registry"), v,
                     push_requires_gpu=v.get("push_requires") == "gpu", platforms=plats,
                     overrides=on, directory=base, engine=v.get("engine"))


def parse(text: str, path: Path) -> TeamFile:
    """The team file's text -> its images, every value checked. Pure (paths are not read)."""
    try:
        data = boundedio.parse_toml(text)
    except boundedio.TooDeep as exc:
        raise UsageError(f"{path}: {exc}; a team file is read up to {boundedio.MAX_DEPTH} levels",
                         "a team file has [defaults] and [image.NAME] tables of strings and "
                         "lists of strings") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML ({exc})",
                         "a team file is TOML: an optional [defaults] table, then one [image.NAME] "
                         "table per image, e.g. [image.cpu] with target = \"cpu\" "
                         "(`envbuild team --help`)") from None
    for key in data:
        if key not in ("defaults", "image"):
            raise UsageError(f"{path}: unknown top-level key or table {shown(key)}",
                             "a team file has [defaults] and [image.NAME] tables")
    defaults = _table(data.get("defaults", {}), path, "defaults")
    images = data.get("image", {})
    if not isinstance(images, dict) or not images:
        raise UsageError(f"{path}: no [image.NAME] tables", "add one, e.g. [image.cpu]")
    if len(images) > MAX_IMAGES:
        raise UsageError(f"{path}: {len(images)} images (limit {MAX_IMAGES})",
                         "split the family into several team files (--file)")
    out = []
    for name, table in images.items():
        if len(name) > 64 or not _NAME.fullmatch(name):
            raise UsageError(f"{path}: [image.{shown(name)}]: not an image name",
                             "lower-case letters, digits and . _ - (it becomes the repository "
                             "name), e.g. [image.h100]")
        own = _table(table, path, f"image.{name}")
        out.append(image_of(name, defaults, own, path.parent))
    return TeamFile(path, tuple(out))


def load(path: Path | None = None) -> TeamFile:
    """Read through the bounded reader: a regular UTF-8 file of at most CONFIG_BYTES."""
    p = path or Path(DEFAULT_FILE)
    try:
        text = boundedio.read_text(p, "team file")
    except FileNotFoundError:
        raise UsageError(f"{boundedio.path_text(p)}: no such team file",
                         "write an envbuild.toml ([image.cpu] with target = \"cpu\" is the "
                         "smallest) or pass --file; `envbuild team --help`") from None
    return parse(text, p)
