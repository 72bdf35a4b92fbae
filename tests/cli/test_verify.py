"""`envbuild verify` on generated hostile input, with no registry up: any IMAGE text is a
one-line error with a hint and a documented code (2 not an image reference or a digest, 3 the
registry cannot be reached), never a traceback, never a request anywhere but the address given
(an image on Docker Hub is never tried: every reference that parses is pointed at a closed
local port)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.core import refs
from tests.support import run_cli
from tests.support.registry import free_port

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\x00"),
               max_size=60)  # NUL cannot be in an argv
NAMES = st.from_regex(r"[a-z0-9]{1,10}(/[a-z0-9]{1,10}){0,2}(:[a-z0-9]{1,10})?", fullmatch=True)


def _one_clean_error(r_stderr: str) -> None:
    assert "Traceback" not in r_stderr
    lines = r_stderr.strip().splitlines()
    assert 1 <= len(lines) <= 2 and lines[0].startswith("error: "), r_stderr
    assert "\x1b" not in r_stderr
    # the hint's example must survive the redaction (the quoted input may be masked: a
    # host:port/... before an @ reads like a login)
    assert "***" not in "".join(x for x in lines if x.startswith("hint: "))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(TEXT, NAMES), digest=st.one_of(st.just(""), TEXT.map(lambda t: "@" + t),
                                   st.text("0123456789abcdef", min_size=64, max_size=64)
                                   .map(lambda h: "@sha256:" + h)))
def test_any_image_text_is_one_clean_error(text: str, digest: str) -> None:
    image = f"127.0.0.1:{free_port()}/{text}{digest}"
    try:
        refs.parse(image)
        code = 3  # an image reference: its (closed) registry cannot be reached
    except refs.RefError:
        code = 2
    r = run_cli("verify", image, timeout=60)
    assert r.returncode == code, (image, r.returncode, r.stderr)
    _one_clean_error(r.stderr)
    if code == 3:
        assert "cannot reach the registry" in r.stderr
    assert r.stdout == ""
