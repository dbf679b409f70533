"""What a hardware meter reports per interval, and wraparound-safe counter arithmetic."""

from __future__ import annotations

from typing import NamedTuple, Protocol

from gputop.model import MemoryConsumer

COUNTER_MODULUS = 1 << 64


class Traffic(NamedTuple):
    """DRAM traffic over the last interval in bytes/s; a side the meter cannot split is None.

    `top` names the processes that made the most of it, where the meter can tell.
    """

    read_bytes_per_s: float | None
    write_bytes_per_s: float | None
    total_bytes_per_s: float | None
    note: str | None = None
    top: tuple[MemoryConsumer, ...] = ()


class TrafficMeter(Protocol):
    """A hardware source of DRAM bytes: resctrl MBM, perf uncore or core PMU counters."""

    source: str
    confidence: str  # "measured" (memory-controller bytes) or "approximate" (cache misses)
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
