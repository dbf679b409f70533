"""`frozen`: `dataclass(frozen=True, slots=True)` with the same equality, hash and repr, made by
shared functions instead of ones compiled for each class.

A dataclass compiles six small functions per class when its module is imported; for
gputop.core.model's two dozen classes that was most of the import, itself the largest part of
the CPU spent before the first frame. `frozen` has dataclasses compile only the frozen
`__setattr__`/`__delattr__`; equality, hash and repr go through `attrgetter`, and
`__init__`, compiled here, stores each field through its slot (see _slot_init).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from operator import attrgetter
from reprlib import recursive_repr
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def frozen(cls: type[T]) -> type[T]:
    """The frozen, slotted dataclass of `cls`: equal, hashed and shown as dataclasses do
    (fields with `compare=False` neither compared nor hashed, `repr=False` not shown)."""
    made = dataclasses.dataclass(frozen=True, slots=True, eq=False, repr=False, init=False)(cls)
    fields = dataclasses.fields(made)  # type: ignore[arg-type]
    made.__init__ = _slot_init(made, fields)  # type: ignore[method-assign]
    compared = _getter([f.name for f in fields if f.compare])
    hashed = _getter([f.name for f in fields if (f.compare if f.hash is None else f.hash)])
    shown = [f.name for f in fields if f.repr]

    def __eq__(self: Any, other: object) -> Any:
        if other is self:  # what comparing each field would say, without the two tuples
            return True
        if other.__class__ is self.__class__:
            return compared(self) == compared(other)
        return NotImplemented

    def __hash__(self: Any) -> int:
        return hash(hashed(self))

    @recursive_repr()
    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
        return f"{self.__class__.__qualname__}({inner})"

    for method in (__eq__, __hash__, __repr__):
        method.__qualname__ = f"{made.__qualname__}.{method.__name__}"
        setattr(made, method.__name__, method)
    return made


class _FactoryMark:
    """An argument left to its field's default_factory (shown as dataclasses show it)."""

    def __repr__(self) -> str:
        return "<factory>"


_MISSING_MARK = _FactoryMark()


def _slot_init(cls: type, fields: Sequence[dataclasses.Field[Any]]) -> Callable[..., None]:
    """The `__init__` dataclasses would write, each field stored through its slot's own
    setter: a frozen dataclass's goes through object.__setattr__ by name for each field,
    which makes a record cost about twice as much to build."""
    params, body = [], []
    scope: dict[str, Any] = {"_MARK": _MISSING_MARK}
    for i, f in enumerate(fields):
        scope[f"_set{i}"] = getattr(cls, f.name).__set__
        factory = f.default_factory is not dataclasses.MISSING
        scope[f"_default{i}"] = _MISSING_MARK if factory else f.default
        scope[f"_factory{i}"] = f.default_factory
        has_default = factory or f.default is not dataclasses.MISSING
        if f.init:
            params.append(f"{f.name}=_default{i}" if has_default else f.name)
        elif has_default:
            body.append(f"    {f.name} = _default{i}")
        else:
            continue  # not an argument and no default: left unset, as dataclasses leave it
        if factory:
            body.append(f"    if {f.name} is _MARK: {f.name} = _factory{i}()")
        body.append(f"    _set{i}(self, {f.name})")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    exec(f"def __init__(self, {', '.join(params)}):\n" + "\n".join(body or ["    pass"]), scope)
    init: Callable[..., None] = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


def _getter(names: Sequence[str]) -> Callable[[Any], tuple[Any, ...]]:
    """A tuple of the named attributes (attrgetter gives a bare value for a single name)."""
    if len(names) == 1:
        name = names[0]
        return lambda obj: (getattr(obj, name),)
    if not names:
        return lambda obj: ()
    return attrgetter(*names)
