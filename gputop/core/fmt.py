"""Human-readable numbers for the text export and the TUI; None always prints as n/a.

Each quantity has one wording: `size`, `rate`, `duration_ns` spell units out for text,
their `short_` forms fit a terminal cell (at most 6 characters).
"""

from __future__ import annotations

from collections.abc import Sequence

from gputop.core.model import GpuReport

NA = "n/a"
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_Ladder = tuple[tuple[float, float, int, str], ...]  # from ns, ns per unit, digits, unit
_DURATION: _Ladder = ((1e9, 1e9, 2, "s"), (1e6, 1e6, 1, "ms"), (0, 1e3, 0, "µs"))
_SHORT_DURATION: _Ladder = (
    (1e10, 1e9, 0, "s"), (1e9, 1e9, 2, "s"), (1e8, 1e6, 0, "ms"), (1e6, 1e6, 1, "ms"),
    (0, 1e3, 0, "µs"),
)


def scaled(value: float, base: float, units: Sequence[str], limit: float) -> tuple[float, str]:
    """Divide by `base` until the amount is under `limit` (or the units run out)."""
    amount = float(value)
    for unit in units[:-1]:
        if abs(amount) < limit:
            return amount, unit
        amount /= base
    return amount, units[-1]


def size(value: float | None) -> str:
    """Bytes in binary units: 1536 -> '1.5 KiB'."""
    if value is None:
        return NA
    amount, unit = scaled(value, 1024, _UNITS, 1024)
    return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"


def short_size(value: float | None) -> str:
    """Bytes in at most 6 cells, binary units: 1536 -> '1.5K', 3e10 -> '27.9G'."""
    if value is None:
        return NA
    amount, unit = scaled(value, 1024, "BKMGTP", 1000)
    return f"{amount:.0f}B" if unit == "B" else _short(amount, unit)


def rate(value: float | None) -> str:
    """Bytes per second in decimal units, as bandwidth is quoted: 2.5e9 -> '2.5 GB/s'."""
    if value is None:
        return NA
    amount, unit = scaled(value, 1000, ("B/s", "kB/s", "MB/s", "GB/s", "TB/s"), 1000)
    return f"{amount:.0f} {unit}" if unit == "B/s" else f"{amount:.1f} {unit}"


def short_rate(value: float | None) -> str:
    """Bytes per second in a few cells, decimal units: 2.5e9 -> '2.5G/s'."""
    if value is None:
        return NA
    amount, unit = scaled(value, 1000, "BkMGT", 1000)
    return f"{amount:.0f}B/s" if unit == "B" else _short(amount, unit) + "/s"


def _short(amount: float, unit: str) -> str:
    return f"{amount:.1f}{unit}" if amount < 100 else f"{amount:.0f}{unit}"


def percent(value: float | None, digits: int = 0) -> str:
    """A percentage: 42.4 -> '42%'."""
    return NA if value is None else f"{value:.{digits}f}%"


def duration_ns(value: int | None) -> str:
    """A step-scale duration: 1_500_000 -> '1.5 ms'."""
    return _duration(value, _DURATION, " ")


def short_duration_ns(value: int | None) -> str:
    """A step-scale duration in at most 5 cells: 1_500_000 -> '1.5ms'."""
    return _duration(value, _SHORT_DURATION, "")


def _duration(value: int | None, ladder: _Ladder, gap: str) -> str:
    """`value` ns in the unit of the first rung it reaches (the last rung catches the rest)."""
    if value is None:
        return NA
    for rung in ladder:  # the last rung stays when none is reached
        if value >= rung[0]:
            break
    _, unit_ns, digits, unit = rung
    return f"{value / unit_ns:.{digits}f}{gap}{unit}"


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


def gpu_banner(gpu: GpuReport) -> str | None:
    """The line nobody may miss when GPU data is absent or not real; None for real GPUs."""
    if gpu.source == "none":
        return f"CPU-only mode — {gpu.note or 'NVML could not be loaded'}"
    if gpu.source == "simulated":
        return f"SIMULATED GPUs — scenario {gpu.scenario or 'default'} — not real hardware"
    return None
