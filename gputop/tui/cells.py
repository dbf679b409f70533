"""Bars, sparklines, cut text and load levels for terminal cells; pure, tested without one.

Numbers are worded by gputop.core.fmt (its short_ forms for cells).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sized
from itertools import islice

_BLOCKS = " ▁▂▃▄▅▆▇█"
_EIGHTHS = " ▏▎▍▌▋▊▉█"

# One ASCII character for each glyph gputop (or Textual) draws, so a line keeps its width.
_ASCII_GLYPHS = {
    **dict(zip("▁▂▃▄▅▆▇", "_.-=+*%", strict=True)),  # sparkline levels, low to high
    **dict.fromkeys("█▉▊▋▌▐▀", "#"), **dict.fromkeys("▍▎▏▕", "|"), "▔": "-",  # bars, ends
    "·": ".", "—": "-", "\u2013": "-", "…": "~", "µ": "u", "°": " ", "\u00d7": "x", "\u00a0": " ",
    "↑": "^", "↓": "v", "→": ">", "←": "<", "↔": "-", "≈": "~", "≥": ">", "≤": "<",
    "▲": "^", "▼": "v", "▸": ">", "▾": "v", "◀": "<", "▶": ">", "◆": "*", "●": "o", "✖": "x",
    "├": "|", "└": "`",  # tree lines, as `tree --charset=ascii` draws them
}


def bar(fraction: float | None, width: int) -> str:
    """A horizontal bar of `width` cells with eighth-cell resolution; blank when unknown."""
    if width <= 0:
        return ""
    if fraction is None:
        return " " * width
    eighths = round(max(0.0, min(1.0, fraction)) * width * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full + (_EIGHTHS[part] if part and full < width else "")
    return text.ljust(width)


def bar_parts(fraction: float | None, width: int) -> tuple[str, str]:
    """A bar split into its filled cells and its empty track ('·'), `width` cells together."""
    text = bar(fraction, width).rstrip(" ")
    return text, "·" * (width - len(text))


def sparkline(values: Iterable[float | None], width: int, top: float = 100.0) -> str:
    """The last `width` values as block characters scaled to `top`; blank where unknown."""
    if width <= 0:
        return ""
    if not isinstance(values, Sized):
        values = list(values)
    recent = islice(values, max(0, len(values) - width), None)
    return "".join(map(_spark_cells(top).__getitem__, recent)).rjust(width)


class _SparkCells(dict[float | None, str]):
    """A value's sparkline cell at one `top`; it learns each value on first sight (a GPU's
    util is a whole percent: the same hundred values again and again)."""

    def __init__(self, top: float) -> None:
        super().__init__()
        self.top = top

    def __missing__(self, value: float | None) -> str:
        cell = _spark_cell(value, self.top)
        if len(self) < _SPARK_VALUES_KEPT and value == value:  # NaN never finds itself
            self[value] = cell
        return cell


def _spark_cell(value: float | None, top: float) -> str:
    """One value's cell: zero is a floor line, unknown stays blank."""
    if value is None:
        return " "
    level = 0 if top <= 0 else round(max(0.0, min(1.0, value / top)) * 8)
    return _BLOCKS[max(1, level)]


def _spark_cells(top: float) -> _SparkCells:
    cells = _SPARK_CELLS.get(top)
    if cells is None:
        cells = _SPARK_CELLS[top] = _SparkCells(top)
    return cells


_SPARK_VALUES_KEPT = 4096  # per top: values seen beyond these are worked out each time
_SPARK_CELLS: dict[float, _SparkCells] = {}


def fit(text: str, width: int) -> str:
    """Cut or pad `text` to exactly `width` cells, marking a cut with '…'."""
    if width <= 0:
        return ""
    if len(text) > width:
        return text[: width - 1] + "…"
    return text.ljust(width)


def ascii_cells(text: str) -> str:
    """`text` in ASCII, cell for cell: gputop's glyphs get look-alikes, box lines become
    - | +, a wide character '??', anything else '?'."""
    return text if text.isascii() else text.translate(_ASCII_CELLS)


class _AsciiCells(dict[int, str]):
    """str.translate's table for ascii_cells; it learns each character on first sight."""

    def __missing__(self, code: int) -> str:
        self[code] = sub = _ascii_cell(chr(code))
        return sub


def _ascii_cell(char: str) -> str:
    if char.isascii():
        return char
    if char in _ASCII_GLYPHS:
        return _ASCII_GLYPHS[char]
    if unicodedata.combining(char):
        return ""  # drawn on the cell before it
    base = unicodedata.normalize("NFD", char)[0]
    if base.isascii() and base.isprintable():
        return base  # é -> e
    name = unicodedata.name(char, "")
    if name.startswith("BOX DRAWINGS"):
        across, down = "HORIZONTAL" in name, "VERTICAL" in name
        return "-" if across and not down else "|" if down and not across else "+"
    return "??" if unicodedata.east_asian_width(char) in ("W", "F") else "?"


_ASCII_CELLS = _AsciiCells()


def level(fraction: float | None, warn: float = 0.75, crit: float = 0.9) -> str:
    """The style word for a load fraction: 'ok', 'warn', 'crit' or 'dim' when unknown."""
    if fraction is None:
        return "dim"
    if fraction >= crit:
        return "crit"
    if fraction >= warn:
        return "warn"
    return "ok"
