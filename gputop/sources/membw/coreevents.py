"""What the core-PMU meters share: the events that count cache lines, and naming processes.

A miss is one 64-byte line from beyond the cache: an estimate of DRAM traffic, labelled
with what the event counts (writebacks never, prefetches depending on the CPU).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gputop.model import MemoryConsumer
from gputop.printable import printable
from gputop.sources.membw.perf_event import (
    DENIED_ERRNOS,
    PERF_COUNT_HW_CACHE_MISSES,
    PERF_TYPE_HARDWARE,
    PERF_TYPE_HW_CACHE,
    Counter,
    Ring,
)
from gputop.sources.membw.pmus import is_core_pmu, pmu_names
from gputop.sources.membw.uncore import parse_cpulist

CACHE_LINE = 64.0
# PERF_COUNT_HW_CACHE_LL | PERF_COUNT_HW_CACHE_OP_READ << 8 | PERF_COUNT_HW_CACHE_RESULT_MISS << 16
LLC_READ_MISS = 2 | (0 << 8) | (1 << 16)
TOP = 3
UNSUPPORTED_ERRNOS = frozenset({errno.ENOENT, errno.EOPNOTSUPP, errno.EINVAL, errno.ENODEV})
GONE_ERRNOS = frozenset({errno.ESRCH, *DENIED_ERRNOS})

Opener = Callable[..., Counter]
RingFactory = Callable[[int], Ring]


@dataclass(frozen=True)
class CoreEvent:
    """A generic perf event that counts cache lines from beyond a cache, and what it means here."""

    name: str
    type_: int
    config: int
    meaning: str


INTEL_CACHE_MISSES = CoreEvent(
    "cache-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES,
    "last-level-cache misses x 64 B (lines the cores fetched from beyond L3; "
    "writebacks not counted)")
LLC_LOAD_MISSES = CoreEvent(
    "LLC-load-misses", PERF_TYPE_HW_CACHE, LLC_READ_MISS,
    "last-level-cache load misses x 64 B (demand reads only; prefetches and writebacks "
    "not counted)")
AMD_CACHE_MISSES = CoreEvent(
    "cache-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES,
    "L2 misses x 64 B (AMD's cache-misses event counts L3 hits too: above DRAM traffic)")


def core_events(cpu: tuple[str, int, int] | None) -> tuple[CoreEvent, ...]:
    """The events worth trying on this CPU, best first (ARM's cache-misses is L1: never used)."""
    vendor = cpu[0] if cpu else None
    if vendor == "GenuineIntel":
        return (INTEL_CACHE_MISSES, LLC_LOAD_MISSES)
    if vendor == "AuthenticAMD":
        return (LLC_LOAD_MISSES, AMD_CACHE_MISSES)
    return (LLC_LOAD_MISSES,)


def core_pmus(sys_root: Path | str = "/sys") -> list[str]:
    """Core PMUs the kernel lists: 'cpu' (x86), 'cpu_core'/'cpu_atom' (hybrid), 'armv8_*'."""
    return [n for n in pmu_names(sys_root) if is_core_pmu(n)]


def online_cpus(sys_root: Path | str = "/sys") -> tuple[int, ...]:
    """/sys/devices/system/cpu/online as CPU numbers; () when unreadable."""
    try:
        return parse_cpulist((Path(sys_root) / "devices/system/cpu/online").read_text())
    except OSError:
        return ()


def process_name(proc_root: Path, pid: int) -> str | None:
    """The process's comm (made printable: it is another user's text), or None if it is gone."""
    try:
        return printable((proc_root / str(pid) / "comm").read_text().strip())
    except (OSError, UnicodeDecodeError):
        return None


def top_consumers(
    events_by_pid: dict[int, float], total_bytes_per_s: float, proc_root: Path, keep: int = TOP
) -> tuple[MemoryConsumer, ...]:
    """The `keep` pids with most events, each with its share of the total (pid 0, idle, not)."""
    counted = sum(events_by_pid.values())
    if counted <= 0:
        return ()
    ranked = sorted(((n, pid) for pid, n in events_by_pid.items() if pid > 0 and n > 0),
                    reverse=True)[:keep]
    return tuple(MemoryConsumer(pid, process_name(proc_root, pid),
                                total_bytes_per_s * n / counted) for n, pid in ranked)


def why_not(exc: BaseException) -> str:
    """An open's failure in words: 'not supported by this PMU' or the errno's text."""
    code = getattr(exc, "errno", None)
    if code in UNSUPPORTED_ERRNOS:
        return "not supported by this PMU"
    return os.strerror(code) if code else str(exc)
