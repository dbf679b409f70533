"""Values read back from a recording, checked: a file someone hands you is input like a ring.

The one reader (gputop/recording/reader.py) takes every row and every `texts` JSON value of
a recording through here: a value of a type the model does not hold there, JSON nested
deeper than MAX_JSON_DEPTH, a number beyond SQLite's, are a `RecordingError` (one line), and
every string comes out through `printable`, as live data does. `refusing` turns what a
damaged file raises while it is read into one line naming it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
import sqlite3
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal, TypeVar, Union

from gputop.core.printable import printable

MAX_JSON_DEPTH = 32  # the recorder's deepest JSON (an error list, layout checks) is 3
INT_RANGE = range(-(1 << 63), 1 << 64)  # SQLite's integers (and a BLOB's unsigned 8 bytes)
# What SQLite raises over a damaged file (its message quotes the file, maybe not as UTF-8).
READ_ERRORS = (sqlite3.Error, UnicodeDecodeError)
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_T = TypeVar("_T")
_Row = TypeVar("_Row", bound=tuple[Any, ...])
Check = Callable[[object, str], Any]


class RecordingError(Exception):
    """What is wrong with a recording's contents, in one line (without the file's name)."""


@contextmanager
def refusing(path: str, fail: type[Exception]) -> Iterator[None]:
    """Raise what a damaged or hostile recording at `path` raises while it is read as one
    line of `fail`."""
    try:
        yield
    except (*READ_ERRORS, RecordingError) as exc:
        raise fail(f"cannot read {path}: {reason(exc)}") from None


def reason(exc: Exception) -> str:
    """An exception's first line, printable and short (SQLite's messages may quote the file)."""
    return printable(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)[:300]


def checked(row: Sequence[object] | None, hints: Sequence[Any], where: str) -> tuple[Any, ...]:
    """`row` (columns of `where`) with each value as its hint in `hints` (the model's types:
    int, float, str, bytes, bool, Literal, `| None`) holds it; a wrong one is refused."""
    if row is None or len(row) != len(hints):
        raise RecordingError(f"{where} lacks columns")
    return tuple(_check(hint)(value, where) for value, hint in zip(row, hints, strict=True))


def checked_rows(rows: Iterable[Sequence[object]], hints: Sequence[Any],
                 where: str) -> list[tuple[Any, ...]]:
    """Each of `rows` `checked`."""
    return [checked(row, hints, where) for row in rows]


def typed_rows(rows: Iterable[Sequence[object]], row: type[_Row], where: str) -> list[_Row]:
    """Each of `rows` (columns of `where`) as a `row` (a NamedTuple whose annotations are the
    hints of `checked`)."""
    hints = _row_hints(row)
    return [row(*checked(values, hints, where)) for values in rows]


def conforming(value: object, hint: Any, where: str) -> Any:
    """`value` as `hint` holds it (text printable, an int where a float goes); else refused."""
    return _check(hint)(value, where)


def field(values: dict[str, Any], key: str, hint: Any, where: str, default: Any = None) -> Any:
    """`values[key]` as `hint` holds it; `default` where it is absent or null."""
    value = values.get(key)
    return default if value is None else conforming(value, hint, f"{where}.{key}")


def built(cls: type[_T], values: dict[str, Any], where: str, **given: Any) -> _T:
    """A `cls` (a model dataclass) from a JSON object: each of its fields found there checked
    against the field's type, other keys ignored; `given` fields as they are."""
    hints = _field_hints(cls)  # type: ignore[arg-type]
    found = {name: conforming(value, hints[name], f"{where}.{name}")
             for name, value in values.items() if name in hints and name not in given}
    missing = [f.name for f in dataclasses.fields(cls)  # type: ignore[arg-type]
               if f.name not in found and f.name not in given
               and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise RecordingError(f"{where} lacks {missing[0]}")
    return cls(**found, **given)


class Texts:
    """The `texts` table's JSON values by id, each read, checked and made printable once."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self._cache: dict[int, Any] = {}

    def __call__(self, text_id: object, hint: Any) -> Any:
        """Text `text_id` as `hint` (dict, list, str...) holds it; None for NULL or an id
        the table lacks."""
        if text_id is None:
            return None
        key = conforming(text_id, int, "a text id")
        if key not in self._cache:
            row = self.db.execute("SELECT text FROM texts WHERE id = ?", (key,)).fetchone()
            self._cache[key] = None if row is None else loaded_json(row[0], "texts.text")
        value = self._cache[key]
        return None if value is None else conforming(value, hint, f"text {key}")


def loaded_json(text: object, where: str) -> Any:
    """The JSON `text` (from `where`): refused unless it is text, valid, nested at most
    MAX_JSON_DEPTH deep and its numbers finite; every string in it printable."""
    if type(text) is not str:  # the JSON's own strings are made printable once parsed
        raise _refused(text, str, where)
    source = text
    if source.count("[") + source.count("{") > MAX_JSON_DEPTH and _depth(source) > MAX_JSON_DEPTH:
        raise RecordingError(f"{where} nests deeper than {MAX_JSON_DEPTH}")
    try:
        return json.loads(source, parse_float=_finite_float, parse_constant=_not_finite)
    except ValueError as exc:  # JSONDecodeError, or an integer of thousands of digits
        raise RecordingError(f"{where} is not JSON ({str(exc).splitlines()[0][:80]})") from None


def _depth(text: str) -> int:
    """How deep the arrays and objects of JSON `text` nest (its strings left out)."""
    deepest = depth = 0
    for char in _STRINGS.sub("", text):
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise RecordingError("a JSON number is not finite")
    return value


def _not_finite(text: str) -> float:
    raise RecordingError(f"a JSON number is {text}")


@functools.cache
def _field_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.cache
def _row_hints(row: type[tuple[Any, ...]]) -> tuple[Any, ...]:
    hints = typing.get_type_hints(row)
    return tuple(hints[name] for name in row._fields)  # type: ignore[attr-defined]


@functools.cache
def _check(hint: Any) -> Check:
    """The function checking a value against `hint`."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return _union([_check(option) for option in typing.get_args(hint)], hint)
    if origin is Literal:
        return _literal(typing.get_args(hint), hint)
    if origin is tuple:
        return _tuple(typing.get_args(hint), hint)
    simple = {type(None): _none, int: _int, float: _float, bool: _bool, str: _str,
              bytes: _bytes, dict: _dict, list: _list}
    return simple[hint]


def _refused(value: object, hint: Any, where: str) -> RecordingError:
    names = {int: "an integer", float: "a real", str: "text", bytes: "a blob",
             type(None): "null", bool: "a boolean", dict: "an object", list: "an array"}
    found = names.get(type(value), "a tuple" if isinstance(value, tuple) else "a value")
    wanted = names.get(hint) or printable(str(hint).replace("typing.", ""))
    return RecordingError(f"{where} is {found}, not {wanted}")


def _none(value: object, where: str) -> None:
    if value is not None:
        raise _refused(value, type(None), where)


def _int(value: object, where: str) -> int:
    if type(value) is not int or value not in INT_RANGE:
        raise _refused(value, int, where)
    return value


def _float(value: object, where: str) -> float:
    if type(value) is int and value in INT_RANGE:
        return float(value)
    if type(value) is not float or not math.isfinite(value):
        raise _refused(value, float, where)
    return value


def _bool(value: object, where: str) -> bool:
    if type(value) not in (bool, int):
        raise _refused(value, bool, where)
    return bool(value)


def _str(value: object, where: str) -> str:
    if type(value) is not str:
        raise _refused(value, str, where)
    return printable(value)


def _bytes(value: object, where: str) -> bytes:
    if type(value) is not bytes:
        raise _refused(value, bytes, where)
    return value


def _dict(value: object, where: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise _refused(value, dict, where)
    return value


def _list(value: object, where: str) -> list[Any]:
    if type(value) is not list:
        raise _refused(value, list, where)
    return value


def _union(options: list[Check], hint: Any) -> Check:
    def check(value: object, where: str) -> Any:
        for option in options:
            try:
                return option(value, where)
            except RecordingError:
                continue
        raise _refused(value, hint, where)
    return check


def _literal(words: tuple[Any, ...], hint: Any) -> Check:
    def check(value: object, where: str) -> Any:
        if type(value) is not str or value not in words:
            raise _refused(value, hint, where)
        return value
    return check


def _tuple(parts: tuple[Any, ...], hint: Any) -> Check:
    each = [_check(part) for part in parts if part is not Ellipsis]

    def check(value: object, where: str) -> tuple[Any, ...]:
        if type(value) not in (list, tuple):
            raise _refused(value, hint, where)
        items: Sequence[object] = value  # type: ignore[assignment]
        if parts[-1] is Ellipsis:
            return tuple(each[0](item, where) for item in items)
        if len(items) != len(each):
            raise _refused(value, hint, where)
        return tuple(part(item, where) for part, item in zip(each, items, strict=True))
    return check
