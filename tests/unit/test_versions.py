"""common/versions: the sort key is total over any text, and orders real versions as numbers."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.common.versions import version_key

_HUGE = st.tuples(st.integers(4000, 6000), st.sampled_from(["", ".1", ".22.3"])).map(
    lambda t: "7" * t[0] + t[1])


@settings(deadline=None)
@given(st.text(max_size=60) | _HUGE)
def test_version_key_never_raises(text: str) -> None:
    assert isinstance(version_key(text), tuple)


@given(st.lists(st.integers(0, 10**12), min_size=1, max_size=4),
       st.lists(st.integers(0, 10**12), min_size=1, max_size=4))
def test_real_versions_sort_as_their_numbers(a: list[int], b: list[int]) -> None:
    ka, kb = version_key(".".join(map(str, a))), version_key(".".join(map(str, b)))
    assert (ka < kb) == (tuple(a) < tuple(b))


def test_a_part_beyond_any_real_version_sorts_above_them() -> None:
    assert version_key("9" * 5000) > version_key("999999999999.1")
