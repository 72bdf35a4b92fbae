"""HTTP(S) proxies for the build steps. Pure.

apt, dnf, pip and uv inside a build read the lower- and upper-case http_proxy / https_proxy /
no_proxy variables. Docker predefines exactly these names as build arguments: a RUN step sees
them without an ARG line, and BuildKit leaves them out of the image config and history. They are
passed as `--build-arg NAME` with the value in the docker client's environment, so a proxy
password is never on a command line either; anything printed is redacted (envbuild.common.redact).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from envbuild.common.errors import UsageError
from envbuild.common.redact import redact, shown

SCHEMES = ("http", "https", "socks5", "socks5h")
_HINT = "e.g. --proxy http://proxy.example.com:3128 (a login goes in the user:password@ part)"
_BAD = re.compile(r"[\s\x00-\x1f\x7f\"'`\\]")


def proxy_url(value: str, name: str) -> str:
    echo = shown(value, 80, url=True)
    if len(value) > 2000 or _BAD.search(value):
        raise UsageError(f"{name} {echo!r} holds whitespace, quotes or control characters",
                         _HINT)
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 - raises on an invalid port
    except ValueError:
        raise UsageError(f"{name} {echo!r} has an invalid port", _HINT) from None
    if parts.scheme not in SCHEMES or not parts.hostname:
        raise UsageError(f"{name} {echo!r} is not a proxy URL ({', '.join(SCHEMES)} with a "
                         "host)", _HINT)
    if parts.query or parts.fragment:
        raise UsageError(f"{name} {echo!r} has a query or fragment", _HINT)
    return value


def no_proxy(value: str, name: str) -> str:
    if len(value) > 4000 or _BAD.search(value.replace(" ", "")):
        raise UsageError(f"{name} {value[:60]!r} holds quotes or control characters",
                         "a comma-separated list of hosts, domains and CIDRs, e.g. "
                         "localhost,.corp.example.com,10.0.0.0/8")
    return value.replace(" ", "")


def _get(env: Mapping[str, str], name: str) -> tuple[str, str] | None:
    for key in (name.upper(), name.lower()):
        if env.get(key):
            return key, env[key]
    return None


def build_proxy_env(env: Mapping[str, str], proxy: str | None = None) -> dict[str, str]:
    """The proxy variables for the build, both spellings: `--proxy` sets HTTP(S)_PROXY; otherwise
    they come from `env` (upper case first, as curl does). Empty dict: no proxy."""
    out: dict[str, str] = {}
    values: dict[str, str] = {}
    if proxy is not None:
        values["http_proxy"] = values["https_proxy"] = proxy_url(proxy, "--proxy")
    else:
        for name in ("http_proxy", "https_proxy"):
            got = _get(env, name)
            if got:
                values[name] = proxy_url(got[1], got[0])
    if not values:
        return out
    got = _get(env, "no_proxy")
    if got:
        values["no_proxy"] = no_proxy(got[1], got[0])
    for name, value in values.items():
        out[name] = out[name.upper()] = value
    return out


def describe(proxies: Mapping[str, str]) -> str:
    """One line for logs and summaries, credentials masked."""
    parts = [f"{k}={redact(v)}" for k, v in sorted(proxies.items()) if k.isupper()]
    return ", ".join(parts)
