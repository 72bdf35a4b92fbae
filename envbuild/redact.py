"""One redaction for every URL envbuild prints or logs: credentials and queries never show.

`redact(text)` rewrites each URL in a text (errors, hints, log lines, reports): its userinfo
(`user:token@`) becomes `***@` and its query (`?token=...`) becomes `?***`. Pure, no imports.
"""

from __future__ import annotations

import re

# scheme://[userinfo@]host...: up to the next whitespace or quote. Any scheme: a user who types
# ftp://bob:SECRET@host by mistake must not see SECRET echoed in the error either.
_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<rest>[^\s'\"<>`]*)")
MASK = "***"


def _one(m: re.Match[str]) -> str:
    rest = m.group("rest")
    # The authority ends at the first / ? or #; userinfo is everything before its last @.
    end = len(rest)
    for sep in "/?#":
        i = rest.find(sep)
        if i != -1:
            end = min(end, i)
    authority, tail = rest[:end], rest[end:]
    if "@" in authority:
        authority = f"{MASK}@{authority.rsplit('@', 1)[1]}"
    elif "@" in tail.split("?", 1)[0].split("#", 1)[0] and ":" in authority:
        # a password holding '/' or '?' (unencoded) fools the split above: hide it all
        authority, tail = MASK, "@" + tail.split("@", 1)[1]
    elif re.search(r":[^:\]]*[^0-9:\]][^:\]]*$", authority):
        authority = MASK  # user:password cut before its @ (a truncated message): not a port
    cut = min((i for i in (tail.find("?"), tail.find("#")) if i != -1), default=-1)
    if cut != -1:  # a query or fragment may carry a token: hide all of it
        tail = tail[:cut] + "?" + MASK
    return m.group("scheme") + authority + tail


def redact(text: str) -> str:
    """`text` with the userinfo and query of every URL in it masked."""
    if "://" not in text:
        return text
    return _URL.sub(_one, text)
