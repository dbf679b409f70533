"""Human-readable numbers shared by the text export and the TUI; None always prints as n/a."""

from __future__ import annotations

NA = "n/a"
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def size(value: float | None, digits: int = 1) -> str:
    """Bytes in binary units: 1536 -> '1.5 KiB'."""
    if value is None:
        return NA
    amount = float(value)
    for unit in _UNITS:
        if abs(amount) < 1024 or unit == _UNITS[-1]:
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.{digits}f} {unit}"
        amount /= 1024
    raise AssertionError("unreachable")


def rate(value: float | None) -> str:
    """Bytes per second in decimal units, as bandwidth is quoted: 2.5e9 -> '2.5 GB/s'."""
    if value is None:
        return NA
    amount = float(value)
    for unit in ("B/s", "kB/s", "MB/s", "GB/s", "TB/s"):
        if abs(amount) < 1000 or unit == "TB/s":
            return f"{amount:.0f} {unit}" if unit == "B/s" else f"{amount:.1f} {unit}"
        amount /= 1000
    raise AssertionError("unreachable")


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
    """Cumulative CPU time like top's TIME+: 3725.5 -> '1:02:05'."""
    if seconds is None:
        return NA
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}.{int((seconds - whole) * 100):02d}"


def uptime(seconds: float) -> str:
    """Uptime as days and hours: 93784 -> '1d 2h 03m'."""
    minutes = int(seconds) // 60
    days, minutes = divmod(minutes, 1440)
    hours, minutes = divmod(minutes, 60)
    return f"{days}d {hours}h {minutes:02d}m" if days else f"{hours}h {minutes:02d}m"
