"""Compact fixed-width text for terminal cells; pure, so it is tested without a terminal."""

from __future__ import annotations

from collections.abc import Iterable

from gputop.fmt import NA, scaled
from gputop.fmt import cpu_time as cpu_time  # the same on screen and in --once
from gputop.fmt import uptime as uptime

_BLOCKS = " ▁▂▃▄▅▆▇█"
_EIGHTHS = " ▏▎▍▌▋▊▉█"


def size(value: float | None) -> str:
    """Bytes in at most 6 cells, binary units: 1536 -> '1.5K', 3e10 -> '27.9G'."""
    if value is None:
        return NA
    amount, unit = scaled(value, 1024, "BKMGTP", 1000)
    return f"{amount:.0f}B" if unit == "B" else _compact(amount, unit)


def rate(value: float | None) -> str:
    """Bytes per second, decimal units as bandwidth is quoted: 2.5e9 -> '2.5G/s'."""
    if value is None:
        return NA
    amount, unit = scaled(value, 1000, "BkMGT", 1000)
    return f"{amount:.0f}B/s" if unit == "B" else _compact(amount, unit) + "/s"


def _compact(amount: float, unit: str) -> str:
    return f"{amount:.1f}{unit}" if amount < 100 else f"{amount:.0f}{unit}"


def percent(value: float | None) -> str:
    """A whole percentage, or n/a."""
    return NA if value is None else f"{value:.0f}%"


def duration_ns(value: int | None) -> str:
    """A step-scale duration: 1_500_000 -> '1.5ms'."""
    if value is None:
        return NA
    if value >= 10_000_000_000:
        return f"{value / 1e9:.0f}s"
    if value >= 1_000_000_000:
        return f"{value / 1e9:.2f}s"
    if value >= 100_000_000:
        return f"{value / 1e6:.0f}ms"
    if value >= 1_000_000:
        return f"{value / 1e6:.1f}ms"
    return f"{value / 1e3:.0f}µs"


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
