"""Bars, sparklines, cut text and load levels for terminal cells; pure, tested without one.

Numbers are worded by gputop.fmt (its short_ forms for cells).
"""

from __future__ import annotations

from collections.abc import Iterable

_BLOCKS = " ▁▂▃▄▅▆▇█"
_EIGHTHS = " ▏▎▍▌▋▊▉█"


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
    recent = list(values)[-width:] if width > 0 else []
    cells = []
    for value in recent:
        if value is None:
            cells.append(" ")
            continue
        level = 0 if top <= 0 else round(max(0.0, min(1.0, value / top)) * 8)
        cells.append(_BLOCKS[max(1, level)])  # zero is a floor line; unknown stays blank
    return "".join(cells).rjust(width)


def fit(text: str, width: int) -> str:
    """Cut or pad `text` to exactly `width` cells, marking a cut with '…'."""
    if width <= 0:
        return ""
    if len(text) > width:
        return text[: width - 1] + "…"
    return text.ljust(width)


def level(fraction: float | None, warn: float = 0.75, crit: float = 0.9) -> str:
    """The style word for a load fraction: 'ok', 'warn', 'crit' or 'dim' when unknown."""
    if fraction is None:
        return "dim"
    if fraction >= crit:
        return "crit"
    if fraction >= warn:
        return "warn"
    return "ok"
