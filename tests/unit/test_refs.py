"""envbuild.core.refs, the one image-reference parser: Docker's rules, generated references
round-trip, and every user (registry, size fetch, build, docker, render) agrees with it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.common.errors import UsageError
from envbuild.core import refs

D = "sha256:" + "a" * 64

_label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?", fullmatch=True)
_domain = st.lists(_label, min_size=2, max_size=3).map(".".join)
_ipv6 = st.sampled_from(["[::1]", "[fe80::1]", "[2001:db8::7]"])
_port = st.one_of(st.just(""), st.integers(1, 65535).map(lambda p: f":{p}"))
_host = st.one_of(st.builds(lambda d, p: d + p, _domain, _port),
                  st.builds(lambda h, p: h + p, _ipv6, _port),
                  st.builds(lambda p: "localhost" + p, _port),
                  st.builds(lambda p: "localhost" + p, st.integers(1, 65535).map(str).map(
                      lambda p: f":{p}")))
_part = st.from_regex(r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+){0,2}", fullmatch=True)
_first = st.from_regex(r"[a-z0-9]+((_|__|-+)[a-z0-9]+){0,2}", fullmatch=True)  # no dot: no host
_path = st.builds(lambda a, b: "/".join([a, *b]), _first, st.lists(_part, max_size=2))
_tag = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True)
_digest = st.from_regex(r"sha256:[0-9a-f]{64}", fullmatch=True)


@settings(max_examples=300, deadline=None)
@given(host=st.one_of(st.just(""), _host), path=_path, tag=st.one_of(st.just(""), _tag),
       digest=st.one_of(st.just(""), _digest))
def test_generated_references_parse_into_their_parts(host: str, path: str, tag: str,
                                                     digest: str) -> None:
    text = (f"{host}/" if host else "") + path + (f":{tag}" if tag else "") \
        + (f"@{digest}" if digest else "")
    r = refs.parse(text)
    first = path.split("/")[0]
    if host:
        assert r.host == host and r.repo == path
    elif first == "localhost" and "/" in path:
        assert r.host == first
    elif "/" in path:
        assert r.host == "docker.io" and r.repo == path
    else:
        assert r.host == "docker.io" and r.repo == f"library/{path}"
    assert (r.tag, r.digest) == (tag, digest)
    assert r.reference == (digest or tag or "latest")
    assert refs.registry_of(text) == r.host
    assert refs.parse(str(r)) == r  # the fully qualified form names the same image
    assert refs.pinned_digest(text) == digest
    name, t = refs.split_tag(text)
    assert t == (tag or "latest") and text.startswith(name)


@pytest.mark.parametrize(("text", "want"), [
    ("ubuntu", ("docker.io", "library/ubuntu", "", "")),
    ("docker.io/ubuntu:24.04", ("docker.io", "library/ubuntu", "24.04", "")),
    ("nvidia/cuda:12.8.1-base", ("docker.io", "nvidia/cuda", "12.8.1-base", "")),
    ("localhost/x", ("localhost", "x", "", "")),
    ("localhost:5000/x:1", ("localhost:5000", "x", "1", "")),
    ("reg.example.com:443/a/b/c", ("reg.example.com:443", "a/b/c", "", "")),
    ("[::1]:5000/team/cpu:1", ("[::1]:5000", "team/cpu", "1", "")),
    ("[2001:db8::1]/x@" + D, ("[2001:db8::1]", "x", "", D)),
    ("a__b/c--d", ("docker.io", "a__b/c--d", "", "")),
])
def test_dockers_rules(text: str, want: tuple[str, str, str, str]) -> None:
    r = refs.parse(text)
    assert (r.host, r.repo, r.tag, r.digest) == want


@pytest.mark.parametrize("text", [
    "", "UPPER/case", "ubuntu:22.04 ", " ubuntu", "ubuntu\n", "a/../b", "a//b", "x@sha256:short",
    "x@" + D + "@" + D, "[::1/x", "-host.com/x", "host.com:99999999/x", "x:" + "t" * 129,
    "x:-t", "úbuntu", "x" * 600, "a_/b", "ubuntu:２２.04",
])
def test_not_references(text: str) -> None:
    with pytest.raises(refs.RefError):
        refs.parse(text)


def test_a_bad_digest_is_named() -> None:
    with pytest.raises(refs.RefError) as exc:
        refs.parse("x@md5:abc")
    assert exc.value.bad_digest == "md5:abc"


@pytest.mark.parametrize(("text", "api"), [
    ("ubuntu", "https://registry-1.docker.io/v2"),
    ("nvcr.io/nvidia/cuda:13.0.0", "https://nvcr.io/v2"),
    ("localhost:5000/x", "http://localhost:5000/v2"),
    ("127.0.0.1:5000/x", "http://127.0.0.1:5000/v2"),
    ("[::1]:5000/x", "http://[::1]:5000/v2"),
    ("[2001:db8::1]:5000/x", "https://[2001:db8::1]:5000/v2"),
])
def test_api_base(text: str, api: str) -> None:
    assert refs.api_base(refs.parse(text).host) == api


@pytest.mark.parametrize("text", ["ubuntu:24.04", "[::1]:5000/a/b:c", "reg.io/x@" + D,
                                  "localhost/x", "Not A Ref", "a/../b"])
def test_every_user_reads_a_reference_alike(text: str) -> None:
    """registry.parse_ref, sizefetch.split_reference and render's image_reference accept and
    refuse the same references as refs.parse, and read the same parts."""
    from envbuild.common.http import Unreachable
    from envbuild.engine import registry, sizefetch
    from envbuild.render.context import image_reference

    try:
        want = refs.parse(text)
    except refs.RefError:
        with pytest.raises(UsageError):
            registry.parse_ref(text)
        with pytest.raises(Unreachable):
            sizefetch.split_reference(text)
        with pytest.raises(UsageError):
            image_reference(text)
        return
    assert registry.parse_ref(text) == want
    assert sizefetch.split_reference(text) == (refs.api_base(want.host), want.repo,
                                               want.reference)
    assert image_reference(text) == text


@pytest.mark.parametrize(("ref", "repo", "tag"), [
    ("envbuild/cpu:torch2.9.1-py3.12-0123ab", "envbuild/cpu", "torch2.9.1-py3.12-0123ab"),
    ("localhost:5000/team/cpu", "localhost:5000/team/cpu", "latest"),
    ("[::1]:5000/team/cpu:2", "[::1]:5000/team/cpu", "2"),
])
def test_the_engine_tags_with_the_name_as_written(ref: str, repo: str, tag: str) -> None:
    assert refs.split_tag(ref) == (repo, tag)
