"""envbuild.common.record against the stdlib dataclass it stands in for: generated classes (a
base and a subclass, fields with and without defaults, factories, init/repr/compare/kw_only
flags) built both ways must construct, compare, hash, print, replace and refuse assignment
alike."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.common.record import record

FieldSpec = tuple[str, str, bool, bool, bool, bool]  # name, default kind, init, repr, compare, kw


def _fields(prefix: str) -> st.SearchStrategy[list[FieldSpec]]:
    one = st.tuples(st.sampled_from(["none", "value", "factory"]), st.booleans(), st.booleans(),
                    st.booleans(), st.booleans())
    # init=False without a default leaves the attribute unset on both (no repr, no asdict)
    one = one.filter(lambda spec: spec[1] or spec[0] != "none")
    return st.lists(one, max_size=4).map(
        lambda specs: [(f"{prefix}{i}", *spec) for i, spec in enumerate(specs)])


def _namespace(specs: list[FieldSpec]) -> dict[str, Any]:
    ns: dict[str, Any] = {"__annotations__": {}}
    for name, kind, init, shown, compare, kw in specs:
        ns["__annotations__"][name] = "int"
        options: dict[str, Any] = {"init": init, "repr": shown, "compare": compare,
                                   "kw_only": kw}
        if kind == "value":
            options["default"] = len(name)
        elif kind == "factory":
            options["default_factory"] = lambda: [7]
        ns[name] = dataclasses.field(**options)
    return ns


def _build(maker: Any, base_specs: list[FieldSpec], own_specs: list[FieldSpec],
           base_kw: bool) -> Any:
    """Base and Sub both ways; either the class or the TypeError/ValueError that refused it."""
    try:
        base = maker(type("Base", (), _namespace(base_specs)), kw_only=base_kw)
        return maker(type("Sub", (base,), _namespace(own_specs)), kw_only=False)
    except (TypeError, ValueError) as exc:
        return type(exc)


def _dataclass(cls: type, kw_only: bool) -> Any:
    return dataclasses.dataclass(frozen=True, kw_only=kw_only)(cls)


def _record(cls: type, kw_only: bool) -> Any:
    return record(kw_only=kw_only)(cls)


def _outcome(cls: Any, args: tuple[int, ...], kwargs: dict[str, int]) -> Any:
    try:
        obj = cls(*args, **kwargs)
    except TypeError:
        return TypeError
    return obj


@settings(max_examples=300, deadline=None)
@given(_fields("a"), _fields("b"), st.booleans(), st.lists(st.integers(0, 9), max_size=6),
       st.dictionaries(st.sampled_from(["a0", "a1", "b0", "b2", "zz"]), st.integers(0, 9),
                       max_size=4))
def test_records_behave_as_frozen_dataclasses(base_specs: list[FieldSpec],
                                              own_specs: list[FieldSpec], base_kw: bool,
                                              args: list[int], kwargs: dict[str, int]) -> None:
    expected = _build(_dataclass, base_specs, own_specs, base_kw)
    got = _build(_record, base_specs, own_specs, base_kw)
    if isinstance(expected, type) and issubclass(expected, Exception):
        assert got is expected
        return
    assert [f.name for f in dataclasses.fields(got)] == \
        [f.name for f in dataclasses.fields(expected)]
    assert str(inspect.signature(got)) == str(inspect.signature(expected))
    assert got.__match_args__ == expected.__match_args__
    want = _outcome(expected, tuple(args), kwargs)
    have = _outcome(got, tuple(args), kwargs)
    if want is TypeError:
        assert have is TypeError
        return
    assert repr(have) == repr(want)
    assert dataclasses.asdict(have) == dataclasses.asdict(want)
    twin = got(*args, **kwargs)
    assert have == twin
    assert (have == twin) == (want == expected(*args, **kwargs))
    if all(f.compare or not f.hash for f in dataclasses.fields(got)) and \
            not any(isinstance(v, list) for v in dataclasses.asdict(have).values()):
        assert hash(have) == hash(twin)
    for f in dataclasses.fields(got):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(have, f.name, 1)
        if f.init:
            changed = dataclasses.replace(have, **{f.name: 5})
            want_changed = dataclasses.replace(want, **{f.name: 5})
            assert repr(changed) == repr(want_changed)
            assert (changed == have) == (want_changed == want)


def test_mutable_record_has_no_hash_and_takes_assignment() -> None:
    @record(frozen=False)
    class Box:
        size: int
        tags: list[str] = dataclasses.field(default_factory=list)

    box = Box(3)
    box.size = 4
    assert box == Box(4) and box.tags == [] and box.tags is not Box(4).tags
    assert Box.__hash__ is None


def test_post_init_runs_after_the_fields_are_set() -> None:
    seen: list[int] = []

    @record
    class Late:
        size: int
        double: int = dataclasses.field(init=False, default=0)

        def __post_init__(self) -> None:
            seen.append(self.size)
            object.__setattr__(self, "double", self.size * 2)

    assert Late(4).double == 8 and seen == [4]


def test_a_mutable_default_is_refused_as_dataclass_refuses_it() -> None:
    with pytest.raises(ValueError, match="mutable default"):
        @record
        class Bad:
            items: list[int] = []  # noqa: RUF012


def test_methods_the_class_defines_are_kept() -> None:
    @record
    class Named:
        name: str

        def __repr__(self) -> str:
            return f"<{self.name}>"

    assert repr(Named("x")) == "<x>" and Named("x") == Named("x")
    assert hash(Named("x")) == hash(Named("x"))

