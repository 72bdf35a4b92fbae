"""User package lists (--pip, --apt, --conda): validated strictly, never placed in a shell string.

Each entry is checked against the rules of its ecosystem and refused (UsageError, exit 2) with the
field and the rule named. Valid entries are written into files in the build context.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envbuild.common.errors import UsageError
from envbuild.common.redact import mask_url, redact, shown
from envbuild.core.request import COMPONENTS

# What envbuild installs itself from the spec. pip: the COMPONENTS wheels (render.torch_pins).
# conda: environment.yml pins the spec's Python from conda-forge and installs the COMPONENTS as
# the spec's pip wheels, which bundle their CUDA/ROCm libraries; a --conda package of one of these
# names would be a second torch, a second Python or a second CUDA runtime beside them.
_TORCH_HINT = ("choose torch with --torch (its variant with --cuda / --rocm / --target, or "
               "--torch 2.5.1+cu121) and leave out a companion with --without")
_CONDA_OWNED = {
    "python": ("a second Python beside the spec's", "choose it with --python 3.X "
               "(environment.yml pins python=3.X itself)"),
    **{n: ("a second torch beside the spec's wheels", _TORCH_HINT)
       for n in (*COMPONENTS, "pytorch", "pytorch-gpu", "pytorch-cpu", "libtorch")},
    **{n: ("a second CUDA runtime beside the one the torch wheel bundles",
           "choose the CUDA with --cuda, or --target cpu for none")
       for n in ("pytorch-cuda", "cudatoolkit", "cpuonly")},
}

MAX_LEN = 200
# Debian policy: package names are lower case a-z 0-9 + - . , at least two characters,
# starting with an alphanumeric. Versions: [epoch:]upstream[-revision].
# A trailing `-` is apt's "remove this package" modifier (`python3-` removes python3), so a name
# may not end with one; a trailing `+` (install) stays allowed: g++ and c++ are real names.
_APT_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]*[a-z0-9+.]$", re.ASCII)


def apt_name(name: str) -> bool:
    """A Debian package name by policy (what `apt-get` may be given as one)."""
    return len(name) <= MAX_LEN and _APT_NAME.match(name) is not None


_APT_VERSION = re.compile(r"^([0-9]+:)?[0-9]([A-Za-z0-9.+~:-]*[A-Za-z0-9.+~])?$", re.ASCII)
# pip's own direct-URL fragments (a hash pin, egg=, subdirectory=); anything else may be a token
_URL_FRAGMENT = re.compile(
    r"(?:(?:egg|subdirectory|sha1|sha224|sha256|sha384|sha512|md5)=[A-Za-z0-9._/-]+&?)+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_EXAMPLE = {"--pip": "'numpy<2'", "--apt": "curl", "--conda": "'numpy>=1.26'"}
_GLUED_HASH = re.compile(r"(?<=\S)#")


def _common(field: str, value: str) -> str:
    if _CONTROL.search(value):
        raise UsageError(f"{field} {shown(value, 40)!r}: control characters (newline, NUL, "
                         "...) are not allowed", f"give one package per {field}")
    if len(value) > MAX_LEN:
        raise UsageError(f"{field} entry is {len(value)} characters long (limit {MAX_LEN})",
                         "package names are short; check what was pasted")
    v = value.strip()
    if not v:
        raise UsageError(f"{field} entry is empty",
                         f"give a package name, e.g. {field} {_EXAMPLE.get(field, 'NAME')}")
    if v.startswith("-"):
        raise UsageError(f"{field} {shown(v, 40)!r}: options are not packages",
                         "index URLs have their own flags (--pip-index-url); "
                         "requirement files are not read")
    return v


def pip_requirement(value: str, allow_url: bool = False) -> str:
    """A PEP 508 requirement; direct URLs only with allow_url."""
    v = _common("--pip", value)
    echo = shown(v, 60)
    try:
        req = Requirement(v)
    except InvalidRequirement as exc:
        reason = redact(str(exc).splitlines()[0])
        raise UsageError(f"--pip {echo!r} is not a PEP 508 requirement: {reason}",
                         "examples: --pip 'numpy<2', --pip 'transformers==4.44.2'") from None
    if req.url and not allow_url:
        raise UsageError(f"--pip {echo!r} installs from a direct URL",
                         "direct URLs bypass the index; pass --allow-url if you mean it")
    if req.url:
        _direct_url(req.url, echo)
    if canonicalize_name(req.name) in COMPONENTS:
        raise UsageError(f"--pip {req.name}: torch and its companions come from the spec",
                         _TORCH_HINT)
    return str(req)


_VCS = ("git+", "hg+", "svn+", "bzr+")
# what follows a VCS URL's '@' when it is a host and path (a misplaced login), not a revision
_HOST_PATH = re.compile(r"^[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+(?::[0-9]+)?/")
_SAFELY = ("serve the package from an index: --pip-index-url https://USER:TOKEN@host/simple "
           "(a build secret, never the image)")


def _direct_url(url: str, echo: str) -> None:
    """Refuse a direct URL that may carry a login or token: user-requirements.txt would keep
    it in the image. A login is refused wherever it stands: before the host, or after a '/',
    '?' or '#' of its own that ended the host early (pip would read that as host and path)."""
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises on a password whose '/' ended the authority early
    except ValueError:
        raise UsageError(f"--pip {echo!r}: the URL's host part is not host[:port] (a login, "
                         "whose '/' '?' '#' ended it early?)", _SAFELY) from None
    path_at = parts.path.count("@")
    vcs = parts.scheme.startswith(_VCS)
    if (not url.startswith(f"{parts.scheme}://") or "@" in parts.netloc or parts.query
            or (parts.fragment and not _URL_FRAGMENT.fullmatch(parts.fragment))
            or (path_at and not vcs) or path_at > 1
            or (vcs and path_at and _HOST_PATH.match(parts.path.rpartition("@")[2]))):
        raise UsageError(f"--pip {echo!r}: a direct URL with a login, a token or a query would "
                         "be stored in the image (user-requirements.txt)", _SAFELY)


def apt_package(value: str) -> str:
    """`name` or `name=version`, full-match Debian package-name rules."""
    v = _common("--apt", value)
    name, sep, version = v.partition("=")
    if name.endswith("-"):
        raise UsageError(f"--apt {shown(v, 40)!r}: a trailing '-' tells apt to remove the package",
                         f"to install it, give --apt {name.rstrip('-')}")
    if not _APT_NAME.fullmatch(name):
        raise UsageError(f"--apt {shown(v, 40)!r}: {shown(name, 40)!r} is not a Debian package "
                         "name",
                         "names are lower-case letters, digits and + - . (at least 2 characters, "
                         "not ending in -)")
    if sep and not _APT_VERSION.fullmatch(version):
        raise UsageError(f"--apt {shown(v, 40)!r}: {shown(version, 40)!r} is not a Debian version",
                         "e.g. --apt curl=7.88.1-10+deb12u5")
    return v


def conda_spec(value: str) -> str:
    """A conda MatchSpec, checked by py-rattler (the conda MatchSpec grammar, offline).

    The value is only ever written, YAML-quoted, into environment.yml: it never reaches a shell.
    """
    from rattler import MatchSpec  # a runtime dependency: the exact conda rules, no regex guess

    v = _common("--conda", value)
    try:
        spec = MatchSpec(v, strict=True)
    except Exception as exc:  # rattler raises its own exception family
        reason = redact(str(exc).splitlines()[0]) if str(exc) else type(exc).__name__
        if "@" in v:  # rattler quotes pieces of the value: a login's may be among them
            reason = "it holds what looks like a login (not echoed)"
        raise UsageError(f"--conda {shown(v, 40)!r} is not a conda MatchSpec: {reason}",
                         "e.g. --conda 'numpy>=1.26', --conda conda-forge::ffmpeg") from None
    channel = str(getattr(spec.channel, "base_url", "") or "")
    # No '@' belongs in a MatchSpec but a URL's login; a '#' glued to the spec is a URL's
    # fragment, not a comment (" #..."); rattler reads a scheme-less channel's query into
    # base_url; conda's /t/<token>/ path is masked too.
    if "@" in v or _GLUED_HASH.search(v) or redact(v) != v or mask_url(channel) != channel:
        raise UsageError(f"--conda {shown(v, 60)!r}: its channel URL holds a login or token "
                         "(a user or password before its host, a query, a fragment or "
                         "/t/<token>/), which environment.yml would keep in plain text",
                         "name the channel without it (--conda 'https://host/channel::numpy') "
                         "and give conda the login in its own configuration (~/.condarc)")
    name = spec.name.normalized if spec.name is not None else ""
    if name in _CONDA_OWNED:
        what, hint = _CONDA_OWNED[name]
        raise UsageError(f"--conda {shown(v, 40)!r}: {name} would be {what}", hint)
    return v


def validate_all(pip: list[str], apt: list[str], conda: list[str],
                 allow_url: bool = False) -> tuple[list[str], list[str], list[str]]:
    return ([pip_requirement(p, allow_url) for p in pip], [apt_package(a) for a in apt],
            [conda_spec(c) for c in conda])
