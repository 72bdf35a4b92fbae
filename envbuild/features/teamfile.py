"""The team file (`envbuild.toml`): a family of images with shared defaults. Pure apart from
reading the file.

    [defaults]                 # applies to every image; an image's own keys win
    registry = "registry.example.com/ml"
    pip = ["numpy>=1.26"]      # the team's packages: their own layer, shared by the family

    [image.cpu]
    target = "cpu"
    pip = ["einops"]           # adds to defaults.pip (in the image's own layer)

Keys are `envbuild make`'s long options with `-` as `_`, plus `registry`. Lists merge (defaults
first), scalars override. Every value is checked here, before anything resolves, and a bad one is
refused naming the file, the table and the key (UsageError, exit 2).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envbuild.common import boundedio
from envbuild.common.echo import shown
from envbuild.common.errors import UsageError
from envbuild.common.record import record
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
           "registry", "push_requires")
LISTS = ("gpu", "pip", "apt", "conda", "without", "pip_extra_index_url")
KEYS = frozenset(SCALARS + LISTS)
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


def _table(data: object, path: Path, table: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise UsageError(f"{path}: [{table}] must be a table", f"write it as [{table}]")
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key not in KEYS:
            import difflib

            close = difflib.get_close_matches(key.replace("-", "_"), sorted(KEYS), n=3,
                                              cutoff=0.6)
            raise UsageError(f"{_where(path, table, shown(key))}: unknown key",
                             "keys are make's long options with - as _ (cuda, torch, python, "
                             "target, pip, apt, ...) and registry", close)
        try:
            if key in LISTS:
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
    """Lists merge (defaults first, no duplicates), scalars override. Pure."""
    out = dict(defaults)
    for k, v in own.items():
        out[k] = _dedup([*defaults.get(k, []), *v]) if k in LISTS else v
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
    req = Request(target=v.get("target"), cuda=v.get("cuda"), rocm=v.get("rocm"),
                  torch=v.get("torch"), python=v.get("python"), driver=v.get("driver"),
                  gpus=tuple(v.get("gpu", ())), os=v.get("os"), flavor=v.get("flavor"),
                  components=tuple(c for c in COMPONENTS if c not in left_out))
    ci = ContextInputs(
        pip=tuple(own_pip), team_pip=tuple(team_pip), apt=tuple(v.get("apt", ())),
        conda=tuple(v.get("conda", ())), user=v.get("user", "envbuild"),
        pip_index_url=v.get("pip_index_url"),
        pip_extra_index_urls=tuple(v.get("pip_extra_index_url", ())),
        torch_index_url=v.get("torch_index_url"), ca_cert=_path(v.get("ca_cert"), base),
        wheelhouse=_path(v.get("wheelhouse"), base), base_image=v.get("base_image"),
        python_source=v.get("python_source"))
    return TeamImage(name, req, ci, v.get("registry"), v,
                     push_requires_gpu=v.get("push_requires") == "gpu")


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
