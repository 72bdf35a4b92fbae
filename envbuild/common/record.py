"""Records: what `@dataclass(frozen=True)` gives, built without compiling code.

Python 3.11's `dataclass` writes and compiles six functions for every class: about 1.3 ms a
class, 35 ms of `envbuild resolve`'s 130 ms start-up (27 classes). A record instead shares one
set of methods among all records, each reading its class's field table. The table is the one
`dataclasses` keeps (`__dataclass_fields__`), so `dataclasses.fields`, `replace`, `asdict` and
`is_dataclass` work on records as on dataclasses, and `field(default_factory=..., init=False,
repr=False, compare=False)` mean what they mean there. tests/unit/test_record.py holds records
to the dataclass behaviour over generated classes.

Not supported (envbuild does not use them): order=True, slots, InitVar, KW_ONLY markers.
The validator keeps stdlib dataclasses: it must not import the rest of envbuild.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import MISSING, Field, FrozenInstanceError, field
from typing import Any, TypeVar, dataclass_transform

_T = TypeVar("_T", bound=type)
# The marker `dataclasses.fields()` keeps a field by (ClassVar and InitVar pseudo-fields carry
# other markers); private to dataclasses, stable since 3.7.
_FIELD = dataclasses._FIELD  # type: ignore[attr-defined]


class _Shape:
    """What the shared methods read, computed once per class."""

    __slots__ = ("compare", "defaults", "direct", "factories", "fields", "hashed", "init",
                 "init_defaults", "init_factories", "keywords", "late", "name", "positional",
                 "post_init", "shown")

    def __init__(self, cls: type, table: dict[str, Field[Any]]) -> None:
        self.name = cls.__name__
        self.fields = tuple(table)
        init = [f for f in table.values() if f.init]
        self.positional = tuple(f.name for f in init if not f.kw_only)
        self.keywords = frozenset(f.name for f in init)
        self.init = tuple(f.name for f in init)
        self.defaults = {f.name: f.default for f in table.values() if f.default is not MISSING}
        self.factories: dict[str, Callable[[], Any]] = {
            f.name: f.default_factory for f in table.values()
            if f.default_factory is not MISSING}
        self.init_defaults = {n: v for n, v in self.defaults.items() if n in self.keywords}
        self.init_factories = tuple((n, make) for n, make in self.factories.items()
                                    if n in self.keywords)
        # no field is a data descriptor of the class (a property, a slot): set through __dict__
        self.direct = not any(hasattr(type(getattr(cls, n, None)), "__set__") for n in table)
        self.late = tuple(f.name for f in table.values() if not f.init
                          and (f.name in self.defaults or f.name in self.factories))
        self.compare = tuple(f.name for f in table.values() if f.compare)
        self.hashed = tuple(f.name for f in table.values()
                            if (f.compare if f.hash is None else f.hash))
        self.shown = tuple(f.name for f in table.values() if f.repr)
        self.post_init = hasattr(cls, "__post_init__")


def _shape(obj: object) -> _Shape:
    return type(obj).__record__  # type: ignore[attr-defined, no-any-return]


def _bind(shape: _Shape, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Positional arguments into `kwargs`, as a dataclass's __init__ takes them."""
    if len(args) > len(shape.positional):
        raise TypeError(f"{shape.name}.__init__() takes {len(shape.positional) + 1} positional "
                        f"arguments but {len(args) + 1} were given")
    for name, value in zip(shape.positional, args, strict=False):  # fewer: the rest by name
        if name in kwargs:
            raise TypeError(f"{shape.name}.__init__() got multiple values for argument {name!r}")
        kwargs[name] = value


def _refuse(shape: _Shape, given: dict[str, Any]) -> None:
    """The TypeError of a call that names an unknown field or leaves a required one out."""
    for name in given:
        if name not in shape.keywords:
            raise TypeError(f"{shape.name}.__init__() got an unexpected keyword argument "
                            f"{name!r}")
    missing = [n for n in shape.init if n not in given]
    raise TypeError(f"{shape.name}.__init__() missing {len(missing)} required argument"
                    f"{'s' if len(missing) > 1 else ''}: " + ", ".join(repr(n) for n in missing))


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    shape = _shape(self)
    if args:
        _bind(shape, args, kwargs)
    values = {**shape.init_defaults, **kwargs}
    for name, make in shape.init_factories:
        if name not in kwargs:
            values[name] = make()
    if len(values) != len(shape.init) or not shape.keywords.issuperset(kwargs):
        _refuse(shape, {**dict.fromkeys(shape.init_defaults), **dict.fromkeys(
            n for n, _ in shape.init_factories), **kwargs})
    for name in shape.late:
        values[name] = shape.defaults[name] if name in shape.defaults else shape.factories[name]()
    if shape.direct:
        self.__dict__.update(values)  # what object.__setattr__ per field does, in one call
    else:
        for name, value in values.items():
            object.__setattr__(self, name, value)
    if shape.post_init:
        self.__post_init__()


def _repr(self: Any) -> str:
    shape = _shape(self)
    inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in shape.shown)
    return f"{type(self).__qualname__}({inner})"


def _eq(self: Any, other: object) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    names = _shape(self).compare
    return tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)


def _hash(self: Any) -> int:
    return hash(tuple(getattr(self, n) for n in _shape(self).hashed))


def _setattr(self: Any, name: str, value: Any) -> None:
    if "__record__" in type(self).__dict__ or name in _shape(self).fields:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")
    object.__setattr__(self, name, value)


def _delattr(self: Any, name: str) -> None:
    if "__record__" in type(self).__dict__ or name in _shape(self).fields:
        raise FrozenInstanceError(f"cannot delete field {name!r}")
    object.__delattr__(self, name)


class _Factory:
    def __repr__(self) -> str:
        return "<factory>"  # as dataclass's signatures show a default_factory


_FACTORY = _Factory()


class _Signature:
    """`inspect.signature(record_class)`: the __init__ a dataclass would have, built when asked
    (inspect is a costly import)."""

    def __get__(self, obj: object, owner: type) -> Any:
        import inspect

        shape = _shape(obj) if obj is not None else owner.__record__  # type: ignore[attr-defined]
        table = owner.__dataclass_fields__  # type: ignore[attr-defined]
        params = []
        keywords = [n for n in shape.init if n not in shape.positional]
        for name in (*shape.positional, *keywords):
            spec = table[name]
            kind = (inspect.Parameter.KEYWORD_ONLY if spec.kw_only
                    else inspect.Parameter.POSITIONAL_OR_KEYWORD)
            default = shape.defaults.get(name, inspect.Parameter.empty)
            if name in shape.factories:
                default = _FACTORY
            params.append(inspect.Parameter(name, kind, default=default, annotation=spec.type))
        return inspect.Signature(params, return_annotation=None)


def _is_classvar(annotation: Any) -> bool:
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return text.startswith(("ClassVar", "typing.ClassVar"))


def _table(cls: type, kw_only: bool) -> dict[str, Field[Any]]:
    table: dict[str, Field[Any]] = {}
    for base in cls.__mro__[-1:0:-1]:
        table.update(getattr(base, "__dataclass_fields__", {}))
    # as dataclasses reads them: this class's own, unevaluated (inspect costs an import)
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():  # noqa: RUF063
        if _is_classvar(annotation):
            continue
        default = cls.__dict__.get(name, MISSING)
        spec = default if isinstance(default, Field) else field(default=default)
        if spec.default is not MISSING and type(spec.default).__hash__ is None:
            raise ValueError(f"mutable default {type(spec.default)} for field {name} is not "
                             "allowed: use default_factory")
        spec.name, spec.type = name, annotation
        spec._field_type = _FIELD  # type: ignore[union-attr]
        if spec.kw_only is MISSING:
            spec.kw_only = kw_only
        if isinstance(default, Field):
            if spec.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, spec.default)
        table.pop(name, None)
        table[name] = spec
    seen_default = False
    for spec in table.values():
        if not spec.init or spec.kw_only:
            continue
        has_default = spec.default is not MISSING or spec.default_factory is not MISSING
        if seen_default and not has_default:
            raise TypeError(f"non-default argument {spec.name!r} follows default argument")
        seen_default = seen_default or has_default
    return table


def _build(cls: _T, kw_only: bool, frozen: bool) -> _T:
    table = _table(cls, kw_only)
    own = cls.__dict__
    explicit_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
    cls.__dataclass_fields__ = table  # type: ignore[attr-defined]
    shape = _Shape(cls, table)
    cls.__record__ = shape  # type: ignore[attr-defined]
    methods: dict[str, Any] = {"__init__": _init, "__repr__": _repr, "__eq__": _eq}
    if frozen:
        methods |= {"__setattr__": _setattr, "__delattr__": _delattr}
    for name, method in methods.items():
        if name not in own:
            setattr(cls, name, method)
    if not explicit_hash:
        cls.__hash__ = _hash if frozen else None  # type: ignore[assignment]
    if "__signature__" not in own:
        cls.__signature__ = _Signature()  # type: ignore[attr-defined]
    if "__match_args__" not in own:
        cls.__match_args__ = shape.positional  # type: ignore[attr-defined, misc]
    return cls


@dataclass_transform(frozen_default=True, field_specifiers=(field, Field))
def record(cls: _T | None = None, /, *, kw_only: bool = False,
           frozen: bool = True) -> Any:
    """`@record` or `@record(kw_only=True)`: a frozen dataclass, as far as envbuild uses them;
    `@record(frozen=False)` a mutable one (eq and no hash, as dataclass)."""
    if cls is None:
        return lambda c: _build(c, kw_only, frozen)
    return _build(cls, kw_only, frozen)
