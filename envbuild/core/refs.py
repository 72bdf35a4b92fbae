"""Image references, read once the way Docker reads them (distribution/reference): registry
host, repository, tag and digest.

A first component is a registry host when it has a '.' or a ':' or is `localhost` (an IPv6
host stands in brackets: `[::1]:5000/x`); otherwise the image is on Docker Hub (`docker.io`),
where a one-component name is in `library/`. Pure: callers turn RefError into their own error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from envbuild.common.echo import shown
from envbuild.common.errors import UsageError
from envbuild.common.record import record

DEFAULT_REGISTRY = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
MAX_LENGTH = 512

_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_HOST = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9a-fA-F:]+\])(?::[0-9]{{1,5}})?", re.ASCII)
_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPO = re.compile(rf"{_PART}(?:/{_PART})*", re.ASCII)
_TAG = re.compile(r"[\w][\w.-]{0,127}", re.ASCII)
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}", re.ASCII)


class RefError(ValueError):
    """Not an image reference; `bad_digest` is the part after '@' when that is what is wrong."""

    def __init__(self, text: str, bad_digest: str | None = None) -> None:
        super().__init__(text)
        self.text = text
        self.bad_digest = bad_digest


@record
class ImageRef:
    """registry host, repository and a tag or digest."""

    host: str
    repo: str
    tag: str = ""
    digest: str = ""

    @property
    def reference(self) -> str:
        return self.digest or self.tag or "latest"

    @property
    def name(self) -> str:
        """host/repository, fully qualified (docker.io/library/ubuntu)."""
        return f"{self.host}/{self.repo}"

    def __str__(self) -> str:
        return self.name + (f":{self.tag}" if self.tag else "") + \
            (f"@{self.digest}" if self.digest else "")

    @property
    def familiar(self) -> str:
        """The name as Docker shows it: no docker.io/, and no library/ before a one-component
        repository (ubuntu, not docker.io/library/ubuntu)."""
        if self.host != DEFAULT_REGISTRY:
            return self.name
        rest = self.repo.removeprefix("library/")
        return rest if "/" not in rest else self.repo

    def with_digest(self, digest: str) -> ImageRef:
        return ImageRef(self.host, self.repo, "", digest)


def api_host(host: str) -> str:
    """The host that serves a registry's API (Docker Hub's is not docker.io)."""
    return DOCKER_HUB_API if host == DEFAULT_REGISTRY else host


def api_base(host: str) -> str:
    """The registry API's base URL: plain http only for localhost and loopback addresses, as the
    docker engine does."""
    from envbuild.common.http import loopback

    scheme = "http" if loopback(host_name(host)) else "https"
    return f"{scheme}://{api_host(host)}/v2"


def host_name(host: str) -> str:
    """A registry host without its port ('[::1]' of '[::1]:5000')."""
    if host.startswith("[") and "]" in host:
        return host[:host.index("]") + 1]
    return host.split(":", 1)[0]


def split_host(name: str) -> tuple[str, str]:
    """(registry host as written or '', the rest) of a name: Docker's first-component rule."""
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return "", name


def _split(text: str) -> tuple[str, str, str, str]:
    """(host or '', path as written, tag or '', digest or ''): no checks."""
    value, _, digest = text.partition("@")
    host, path = split_host(value)
    head, slash, last = path.rpartition("/")
    tag = ""
    if ":" in last:
        last, _, tag = last.partition(":")
        path = head + slash + last
    return host, path, tag, digest


def parse(text: str) -> ImageRef:
    """The reference `text` names (docker.io/library/ for bare names); RefError if it is not one
    (nothing is stripped: whitespace is refused like any other stray character)."""
    host, path, tag, digest = _split(text)
    if "@" in text and not _DIGEST.fullmatch(digest):
        raise RefError(text, digest)
    if not host:
        host = DEFAULT_REGISTRY
    if host == DEFAULT_REGISTRY and "/" not in path:
        path = f"library/{path}"
    if len(text) > MAX_LENGTH or not _HOST.fullmatch(host) or not _REPO.fullmatch(path) \
            or (tag and not _TAG.fullmatch(tag)):
        raise RefError(text)
    return ImageRef(host, path, tag, digest)


def registry_of(ref: str) -> str:
    """The registry host[:port] of a reference, even of one that does not parse (a Dockerfile's
    FROM with a build argument in it)."""
    return split_host(ref)[0] or DEFAULT_REGISTRY


def split_tag(ref: str) -> tuple[str, str]:
    """(the name as written, its tag: 'latest' when none) of a tag reference, for an engine that
    takes the two apart (docker.io/ is not added)."""
    host, path, tag, _ = _split(ref)
    return (f"{host}/{path}" if host else path), tag or "latest"


def short_name(ref: str) -> str:
    """The last component of the repository with its tag, as written (`bar:1.0` of
    `host:5000/foo/bar:1.0@sha256:...`), even of a reference that does not parse: a label for
    things named after an image."""
    _, path, tag, _ = _split(ref)
    last = path.rsplit("/", 1)[-1]
    return f"{last}:{tag}" if tag else last


def has_tag(ref: str) -> bool:
    return bool(_split(ref)[2])


def is_digest(text: str) -> bool:
    """sha256: and 64 lower-case hex digits."""
    return bool(_DIGEST.fullmatch(text))


def is_sha256(text: str) -> bool:
    """64 lower-case hex digits: a sha256 without its 'sha256:'."""
    return is_digest("sha256:" + text)


def pinned_digest(ref: str) -> str:
    """The digest a reference pins ('' when it names a tag)."""
    return _split(ref)[3]


def base_digest(ref: str, local: dict[str, Any] | None) -> dict[str, Any]:
    """What is known of the image a reference named, from the reference and the local engine's
    view of it (`local`: {"id", "repo_digests"}, None when the engine does not hold it): a digest
    the reference pins; else the local image's registry digest (its RepoDigests, of the same
    repository when it has several); else its image id (a base made or loaded locally has no
    registry digest); `kind` says which. Digest None (kind "unknown") when nothing is known."""
    pinned = pinned_digest(ref)
    if pinned:
        return {"ref": ref, "digest": pinned, "kind": "pinned_in_ref"}
    if local is None:
        return {"ref": ref, "digest": None, "kind": "unknown"}
    chosen = repo_digest_of(ref, local.get("repo_digests") or [])
    if chosen:
        return {"ref": ref, "digest": pinned_digest(chosen), "kind": "repo_digest",
                "repo_digest": chosen}
    return {"ref": ref, "digest": str(local["id"]), "kind": "image_id"}


def repo_digest_of(ref: str, repo_digests: Iterable[object]) -> str:
    """Of an image's RepoDigests (name@sha256:...), the one of ref's repository, else the first;
    '' when there is none."""
    digests = [str(x) for x in repo_digests if "@" in str(x)]
    try:
        want = parse(ref).name
        same = [x for x in digests if parse(x.partition("@")[0]).name == want]
    except RefError:
        same = []
    return (same or digests or [""])[0]


_IMAGE_ID = re.compile(r"(sha256:)?[0-9a-f]{12,64}")
NAME_MAX = 255  # characters of host/repository (distribution/reference's NameTotalLengthMax)


def check_image_ref(ref: str) -> str:
    """A local image's reference or id as Docker takes it; a UsageError otherwise (hostile
    names): what `run` and `fit --image` are given."""
    if _IMAGE_ID.fullmatch(ref):
        return ref
    try:
        name = parse(ref).name
    except RefError:
        name = ""
    if not name or len(name) > NAME_MAX:
        raise UsageError(f"{shown(ref)} is not an image reference",
                         "give NAME[:TAG] or an image id, as `docker images` lists them")
    return ref
