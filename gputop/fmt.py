"""Human-readable numbers shared by the text export and the TUI; None always prints as n/a."""

from __future__ import annotations

from collections.abc import Sequence

NA = "n/a"
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def scaled(value: float, base: float, units: Sequence[str], limit: float) -> tuple[float, str]:
    """Divide by `base` until the amount is under `limit` (or the units run out)."""
    amount = float(value)
    for unit in units[:-1]:
        if abs(amount) < limit:
            return amount, unit
        amount /= base
    return amount, units[-1]


def size(value: float | None, digits: int = 1) -> str:
    """Bytes in binary units: 1536 -> '1.5 KiB'."""
    if value is None:
        return NA
    amount, unit = scaled(value, 1024, _UNITS, 1024)
    return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.{digits}f} {unit}"


def rate(value: float | None) -> str:
    """Bytes per second in decimal units, as bandwidth is quoted: 2.5e9 -> '2.5 GB/s'."""
    if value is None:
        return NA
    amount, unit = scaled(value, 1000, ("B/s", "kB/s", "MB/s", "GB/s", "TB/s"), 1000)
    return f"{amount:.0f} {unit}" if unit == "B/s" else f"{amount:.1f} {unit}"


def percent(value: float | None, digits: int = 0) -> str:
    """A percentage: 42.4 -> '42%'."""
    return NA if value is None else f"{value:.{digits}f}%"


def duration_ns(value: int | None) -> str:
    """A step-scale duration: 1_500_000 -> '1.5 ms'."""
    if value is None:
        return NA
    if value >= 1_000_000_000:
        return f"{value / 1e9:.2f} s"
    if value >= 1_000_000:
        return f"{value / 1e6:.1f} ms"
    return f"{value / 1e3:.0f} µs"


def cpu_time(seconds: float | None) -> str:
    """Cumulative CPU time in at most 8 cells, like top's TIME+: '12:03.45', '3:25:07', '41d02h'."""
    if seconds is None:
        return NA
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours >= 100:
        days, hours = divmod(hours, 24)
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}.{int((seconds - whole) * 100):02d}"


def uptime(seconds: float) -> str:
    """Uptime as days, hours, minutes: 93784 -> '1d 2h03m'."""
    minutes = int(seconds) // 60
    days, minutes = divmod(minutes, 1440)
    hours, minutes = divmod(minutes, 60)
    return f"{days}d {hours}h{minutes:02d}m" if days else f"{hours}h{minutes:02d}m"
