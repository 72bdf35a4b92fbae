"""One redaction for every URL envbuild prints or logs: a login or a token never shows.

Pure, no imports beyond `re`:

- `mask_url(value)`: a value the user gave as a URL (an index, a conda channel, a direct pip URL),
  whatever its shape: with or without a scheme; a password holding ':' '/' '?' '#' '@', quotes
  or spaces unencoded; a user-only token; an IPv6 host; a port. Everything from the scheme (or
  the start) to the last '@' becomes `***` (all of it when that part holds a '?' or '#': a
  query may go on past the '@'), and the whole authority when it reads user:password with no
  '@' left (a value cut short); a query or fragment becomes `?***`; a conda token path
  (`/t/<token>/`) becomes `/t/***/`. It may hide more than the login (a VCS revision after an
  '@'), never less.
- `shown(value, limit)`: a user's value for a message: masked first, then cut (a value cut
  first could lose the '@' that marks its login).
- `redact(text)`: free text (errors, hints, log lines, reports). A quoted value ('...' or "...",
  as envbuild's messages quote what the user gave) that may hold a URL ('@', '://', a query)
  goes through mask_url whole, so a space or a quote inside a password cannot split it;
  elsewhere every scheme://... URL and every scheme-less user:password@host is masked, and a
  login cut short by a space or a quote is masked through the '@' that ends it.

What no text rule can see: a scheme-less user-only token, or a password with spaces and no
scheme, in unquoted free text ("TOKEN@host" reads as an e-mail address). Messages therefore
quote (or mask_url) the values they echo, and build logs also go through Secrets.redact (the
netrc's own values). Placeholders envbuild's hints show (USER:TOKEN@) stay readable.
"""

from __future__ import annotations

import re

from envbuild.common.lazyre import lazy

MASK = "***"
# The logins envbuild's own hints show as examples: not secrets, and a hint that printed
# https://***@host would not say where the login goes. Also the placeholder repository a hint
# names before a VCS revision (`team ci --install 'envbuild @ git+https://github.com/ORG/
# envbuild@v0.1.0'`): read as a login it would be masked, and the example unusable.
PLACEHOLDERS = frozenset({"USER:TOKEN", "__token__:TOKEN", "USER:PASSWORD",
                          "github.com/ORG/envbuild"})

_SCHEME = lazy(r"[A-Za-z][A-Za-z0-9+.-]*://")
# An image digest (`image@sha256:<hex>`): the '@' there ends no login.
_DIGEST = lazy(r"@(?:sha256|sha384|sha512):[0-9a-fA-F]{32,}")
_CONDA_TOKEN = lazy(r"(/t/)[^/?#\s'\"]+")
# scheme://... in free text: up to the next whitespace or quote
_URL = lazy(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<rest>[^\s'\"<>`]*)")
# user:password@ without a scheme (after a scheme's :// is no login: that URL was masked first)
_BARE_LOGIN = lazy(r"(?<![^\s'\"(<\[=,;])(?P<login>[^\s'\"<>`@/:]+:(?!//)[^\s'\"<>`@]*)@")
_VCS = lazy(r"(?:git|hg|svn|bzr)\+", re.IGNORECASE)
# a host (name with an alphabetic top label, IPv4, [IPv6], localhost), a port, then a path or end
_HOSTLIKE = lazy(r"(?:(?:[A-Za-z0-9-]+\.)+[A-Za-z][A-Za-z0-9-]*|[0-9]{1,3}(?:\.[0-9]{1,3}){3}"
                 r"|\[[0-9A-Fa-f:.]+\]|localhost)(?::[0-9]*)?(?:[/?#]|$)")
_QUERY = lazy(r"[?#][^\s?#]")
# a quoted value as repr() writes it (backslash escapes), on one line
_QUOTED = lazy(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"")


def _login_end(rest: str) -> int:
    """Index of the last '@' of `rest` that is not an image digest's; -1 if none."""
    i = len(rest)
    while True:
        i = rest.rfind("@", 0, i)
        if i == -1 or not _DIGEST.match(rest, i):
            return i


def _cut_login(authority: str) -> bool:
    """Whether an authority with no '@' reads user:password (a login cut before its '@', or a
    password whose unencoded '/' '?' '#' ended the authority early) rather than host[:port]."""
    if authority.startswith("["):  # [IPv6]:port
        after = authority.partition("]")[2]
        return not re.fullmatch(r"(?::[0-9]*)?", after)
    user, colon, rest = authority.partition(":")
    if not colon or rest.startswith(":"):  # no colon, or conda's channel::package
        return False
    return not re.fullmatch(r"[0-9]*", rest) and bool(user)


def _mask(value: str, whole: bool = True) -> tuple[str, bool]:
    """(value masked, whether a login was cut short there: the text after it may hold the rest
    of the password, up to its '@').

    `whole`: the value is one URL as the user gave it, so every '@' in it may end a login.
    Otherwise (a URL found in free text) so does every '@' but in a VCS URL, where a revision
    follows one (`git+https://host/repo@v1` stays): there only an '@' in the authority, or one
    further on when the authority holds a ':' or a host follows the '@' (a password or token
    whose unencoded '/' '?' or '#' ended the authority early).
    """
    m = _SCHEME.search(value)
    head, rest = (value[:m.end()], value[m.end():]) if m else ("", value)
    end = min((i for i in (rest.find(c) for c in "/?#") if i != -1), default=len(rest))
    authority = rest[:end]
    at = _login_end(rest)
    if not whole and at >= end and _VCS.match(head) and ":" not in authority.rpartition("]")[2]:
        # git+https://host/repo@v1: that '@' is a revision's, unless a host follows it
        at = max((i for i in range(len(rest)) if rest[i] == "@"
                  and (i < end or _HOSTLIKE.match(rest, i + 1))), default=-1)
    if at == -1 and _cut_login(authority):
        return head + MASK, True
    login, tail = ("", rest) if at == -1 else (rest[:at + 1], rest[at + 1:])
    if "?" in login or "#" in login:  # a query or fragment may go on past that '@'
        return head + MASK, False
    if login[:-1] and login[:-1] not in PLACEHOLDERS:  # an '@' alone hides nothing
        login = MASK + "@"
    q = min((i for i in (tail.find("?"), tail.find("#")) if i != -1), default=-1)
    if q != -1:  # a query or fragment may carry a token: hide all of it
        tail = tail[:q] + "?" + MASK
    tail = _CONDA_TOKEN.sub(r"\g<1>" + MASK, tail)
    return head + login + tail, False


def mask_url(value: str) -> str:
    """`value`, one URL as the user gave it, with anything that may be a login or token
    masked (see the module doc)."""
    return _mask(value)[0]


def may_hold_login(value: str) -> bool:
    """Whether a value that is not meant as a URL (a package, a version) may still hold a
    login or token: an '@', a scheme, or a query or fragment (`host/simple?token=...`)."""
    return "@" in value or "://" in value or _QUERY.search(value) is not None


def shown(value: str, limit: int = 80, url: bool = False) -> str:
    """A user's value for a message: masked (always when `url`, else when it may hold a
    login), then cut to `limit` characters."""
    return (mask_url(value) if url or may_hold_login(value) else value)[:limit]


def _through_at(text: str, pos: int) -> int:
    """Where the rest of a cut login ends: just after the next '@' on this line, else pos."""
    line_end = text.find("\n", pos)
    at = text.find("@", pos, len(text) if line_end == -1 else line_end)
    return pos if at == -1 else at + 1


def _free(text: str) -> str:
    """Free text: scheme URLs (a cut login masked through its '@'), then scheme-less logins."""
    out: list[str] = []
    pos = 0
    for m in _URL.finditer(text):
        if m.start() < pos:
            continue
        masked, cut = _mask(m.group(0), whole=False)
        out.append(text[pos:m.start()] + masked)
        pos = m.end()
        if cut:
            end = _through_at(text, pos)
            if end != pos:
                out.append("@")
                pos = end
    out.append(text[pos:])
    return _BARE_LOGIN.sub(_bare, "".join(out))


def _bare(m: re.Match[str]) -> str:
    if m.group("login") in PLACEHOLDERS or _DIGEST.match(m.string, m.end() - 1):
        return m.group(0)
    return MASK + "@"


def redact(text: str) -> str:
    """`text` with every login and query of every URL in it masked (see the module doc)."""
    if not may_hold_login(text):
        return text
    out: list[str] = []
    pos = 0
    skip_to = 0
    for m in _QUOTED.finditer(text):
        if m.start() < skip_to:
            continue
        inner = m.group(0)[1:-1]
        if not may_hold_login(inner):
            continue
        masked, cut = _mask(inner)
        out.append(_free(text[pos:m.start()]) + m.group(0)[0] + masked + m.group(0)[0])
        pos = m.end()
        if cut:  # a quote inside the password closed the quoted value early
            end = _through_at(text, pos)
            if end != pos:
                out.append(MASK + "@")
                pos = skip_to = end
    out.append(_free(text[pos:]))
    return "".join(out)
