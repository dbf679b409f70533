"""`record`: `dataclass(frozen=True, slots=True)` with the same equality, hash and repr, made by
shared functions instead of ones compiled for each class.

A dataclass compiles six small functions per class when its module is imported; for
gputop.model's two dozen classes that was most of the import, itself the largest part of
the CPU spent before the first frame. `record` has dataclasses compile only `__init__` and
the frozen `__setattr__`/`__delattr__`; equality, hash and repr go through `attrgetter`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from operator import attrgetter
from reprlib import recursive_repr
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def record(cls: type[T]) -> type[T]:
    """The frozen, slotted dataclass of `cls`: equal, hashed and shown as dataclasses do
    (fields with `compare=False` neither compared nor hashed, `repr=False` not shown)."""
    made = dataclasses.dataclass(frozen=True, slots=True, eq=False, repr=False)(cls)
    fields = dataclasses.fields(made)  # type: ignore[arg-type]
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


def _getter(names: Sequence[str]) -> Callable[[Any], tuple[Any, ...]]:
    """A tuple of the named attributes (attrgetter gives a bare value for a single name)."""
    if len(names) == 1:
        name = names[0]
        return lambda obj: (getattr(obj, name),)
    if not names:
        return lambda obj: ()
    return attrgetter(*names)
