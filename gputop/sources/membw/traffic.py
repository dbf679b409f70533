"""What a hardware meter reports per interval, and wraparound-safe counter arithmetic."""

from __future__ import annotations

from typing import NamedTuple, Protocol

COUNTER_MODULUS = 1 << 64


class Traffic(NamedTuple):
    """DRAM traffic over the last interval in bytes/s; a side the meter cannot split is None."""

    read_bytes_per_s: float | None
    write_bytes_per_s: float | None
    total_bytes_per_s: float | None
    note: str | None = None


class TrafficMeter(Protocol):
    """A hardware source of DRAM bytes: resctrl MBM or perf uncore counters."""

    source: str
    detail: str

    def read(self) -> Traffic | None: ...

    def close(self) -> None: ...


def counter_delta(old: int, new: int, modulus: int = COUNTER_MODULUS) -> int | None:
    """new - old for a monotonic counter; a wrap past `modulus` is undone, a reset gives None."""
    if new >= old:
        return new - old
    if old >= modulus // 2 and new < modulus // 2:
        return new + modulus - old
    return None
