"""Helpers shared by the secrets tests (unit and cli)."""

from __future__ import annotations

from hypothesis import strategies as st

# -- generated URL shapes ---------------------------------------------------------------------

_chunk = st.from_regex(r"Zq[A-Za-z0-9]{5,8}", fullmatch=True)
# what a password may hold unencoded (and some percent-escapes of it)
_sep = st.sampled_from([":", "@", "/", "?", "#", " ", "'", '"', "$", "!", "-", ".", "%40", "%2F",
                        "%3A", "%20", "%23", "%3F", "//", "::", "@@"])
_hosts = st.sampled_from(["pypi.example.com", "10.0.0.7", "[::1]", "[2001:db8::7]", "localhost",
                          "mirror-1.corp.example"])
_ports = st.sampled_from(["", ":8443", ":3128", ":1"])
_paths = st.sampled_from(["/simple", "/root/pypi/+simple/", "", "/", "/api/pypi/pypi/simple",
                          "/whl/cu121", "/chan"])
_users = st.sampled_from(["alice", "__token__", "u", "", "oauth2accesstoken"])
SHAPES = ("user:secret", "token", "query", "fragment")


@st.composite
def secrets(draw: st.DrawFn) -> tuple[str, list[str]]:
    """(a password or token, the chunks that make it)."""
    chunks = draw(st.lists(_chunk, min_size=1, max_size=3, unique=True))
    return chunks[0] + "".join(draw(_sep) + c for c in chunks[1:]), chunks


@st.composite
def urls(draw: st.DrawFn, schemes: tuple[str, ...] = ("https://", "http://", "")) -> tuple[
        str, list[str]]:
    """(a URL carrying a secret, the secret's chunks)."""
    secret, chunks = draw(secrets())
    scheme = draw(st.sampled_from(schemes))
    where = draw(_hosts) + draw(_ports) + draw(_paths)
    shape = draw(st.sampled_from(SHAPES))
    if shape == "user:secret":
        url = f"{scheme}{draw(_users)}:{secret}@{where}"
    elif shape == "token":
        url = f"{scheme}{secret}@{where}"
    elif shape == "query":
        key = draw(st.sampled_from(["token=", "private_token=", "x=1&key=", ""]))
        url = f"{scheme}{where}?{key}{secret}"
    else:
        url = f"{scheme}{where}#{secret}"
    return url, chunks


def leaks(chunks: list[str], *texts: str) -> list[str]:
    """The chunks that show in any of texts, in any case."""
    low = [t.lower() for t in texts]
    return [c for c in chunks if any(c.lower() in t for t in low)]
