"""Records of fixed-width unsigned integers packed one after another in a SQLite BLOB: a
tick's devices, processes or steps in one row instead of a row each (a row repeats its key and
a header byte per column). Read back in Python, and in SQL by the views built from
`sql_columns` (SQLite has no function from bytes to an integer: hex digits)."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

from gputop.recording.values import conforming

BYTES = "".join(f"{b:02X}|" for b in range(256))  # byte b's hex digits start at 3b + 1
_STRUCT_CODES = {1: "B", 2: "H", 3: "BH", 4: "I", 5: "BI", 8: "Q"}


class Packing:
    """Records of unsigned big-endian integer fields of fixed width, one after another in a
    BLOB; all bits set is NULL, a value beyond its field is clamped into it. A field given a
    `coarse` factor keeps small values exact and, with its top bit set, larger ones divided
    by that factor (a CPU time of years in four bytes, to the second where the screen
    prints seconds)."""

    def __init__(self, fields: Sequence[tuple[str, int] | tuple[str, int, int]]) -> None:
        self.fields = tuple((f[0], f[1], f[2] if len(f) > 2 else 1) for f in fields)
        self.names = tuple(name for name, _, _ in self.fields)
        self.size = sum(size for _, size, _ in self.fields)
        self.nulls = tuple((1 << 8 * size) - 1 for _, size, _ in self.fields)
        self._struct = struct.Struct(">" + "".join(_STRUCT_CODES[s] for _, s, _ in self.fields))

    def pack(self, records: Iterable[Sequence[int | None]]) -> bytes:
        """Each record's values (None for NULL), one record after another."""
        return b"".join(_encoded(v, size, null, coarse).to_bytes(size, "big")
                        for values in records
                        for v, (_, size, coarse), null in zip(values, self.fields, self.nulls,
                                                              strict=True))

    def exact(self, name: str, value: int | None) -> bool:
        """Whether `pack` keeps `value` of field `name` as it is: None, or within the field
        (below where a coarse field starts rounding)."""
        at = self.names.index(name)
        null, coarse = self.nulls[at], self.fields[at][2]
        return value is None or 0 <= value < (null + 1 >> 1 if coarse > 1 else null)

    def unpack(self, blob: bytes) -> list[tuple[int | None, ...]]:
        """`pack` read back: each record's values, None where NULL (a column read from a
        file that holds no BLOB is a RecordingError)."""
        blob = conforming(blob, bytes, "a packed column")
        whole = len(blob) - len(blob) % self.size
        return [self._values(parts) for parts in self._struct.iter_unpack(blob[:whole])]

    def _values(self, parts: tuple[int, ...]) -> tuple[int | None, ...]:
        values: list[int | None] = []
        at = 0
        for (_, size, coarse), null in zip(self.fields, self.nulls, strict=True):
            if size in (3, 5):
                raw = parts[at] << 8 * (size - 1) | parts[at + 1]
                at += 2
            else:
                raw = parts[at]
                at += 1
            values.append(_decoded_value(raw, size, null, coarse))
        return tuple(values)

    def sql_columns(self, blob: str, index: str) -> dict[str, str]:
        """SQL reading each field of record `index` (an SQL expression) of BLOB `blob`, by
        field name (SQLite has no function from bytes to an integer: hex digits)."""
        columns, offset = {}, 0
        for (name, size, coarse), null in zip(self.fields, self.nulls, strict=True):
            start = f"{index} * {self.size} + {offset + 1}"
            part = f"substr({blob}, {start}, {size})"
            raw = _sql_integer(blob, start, size)
            half = null + 1 >> 1
            value = (f"CASE WHEN {raw} >= {half} THEN ({raw} - {half}) * {coarse} ELSE {raw} "
                     "END" if coarse > 1 else raw)
            columns[name] = f"CASE hex({part}) WHEN '{'F' * 2 * size}' THEN NULL ELSE {value} END"
            offset += size
        return columns


def _encoded(value: int | None, size: int, null: int, coarse: int) -> int:
    if value is None:
        return null
    value = max(value, 0)
    if coarse == 1:
        return min(value, null - 1)
    half = null + 1 >> 1
    return value if value < half else half + min(round(value / coarse), half - 2)


def _decoded_value(raw: int, size: int, null: int, coarse: int) -> int | None:
    if raw == null:
        return None
    half = null + 1 >> 1
    return (raw - half) * coarse if coarse > 1 and raw >= half else raw


def _sql_integer(blob: str, start: str, size: int) -> str:
    """SQL for the unsigned big-endian integer of `size` bytes from byte `start` (1-based) of
    BLOB `blob`: a byte at a time, its hex digits found in BYTES (twice as fast as a digit
    at a time)."""
    return "(" + " + ".join(f"instr('{BYTES}', hex(substr({blob}, {start} + {k}, 1)) || '|') / 3"
                            f" * {256 ** (size - 1 - k)}" for k in range(size)) + ")"


def unpacked_view(view: str, table: str, blob: str, packing: Packing, named: Sequence[str],
                  joins: str = "") -> str:
    """CREATE VIEW `view`: a row per record packed in `table`.`blob` (`named` the columns,
    of `t` the table, `d.i` the record's place, and of anything `joins` adds)."""
    return (f"CREATE VIEW IF NOT EXISTS {view} AS WITH RECURSIVE d(i) AS (SELECT 0 UNION ALL "
            f"SELECT i + 1 FROM d WHERE i + 1 < (SELECT max(length({blob})) FROM {table}) / "
            f"{packing.size}) SELECT {', '.join(named)} FROM {table} t CROSS JOIN d{joins} "
            f"WHERE d.i * {packing.size} < length(t.{blob});\n")
