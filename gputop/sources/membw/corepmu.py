"""The core-PMU rung: cache misses x 64 bytes a line, on all CPUs or on one's own processes.

Many cloud VMs expose the cores' counters while hiding uncore ones. Where CPU-wide events
are allowed, a sampling counter per CPU gives the total and who made it; where the kernel
lets a user count only their own processes, counters on those processes' threads do.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gputop.core.model import MemoryConsumer
from gputop.core.printable import printable
from gputop.sources.membw.hardware import (
    CACHE_LINE,
    NO_CORE_PMU,
    Traffic,
    is_core_pmu,
    parse_cpulist,
    pmu_names,
    read_cpu_id,
)
from gputop.sources.membw.perf_event import (
    DENIED_ERRNOS,
    PERF_COUNT_HW_CACHE_MISSES,
    PERF_SAMPLE_PERIOD,
    PERF_SAMPLE_TID,
    PERF_TYPE_HARDWARE,
    PERF_TYPE_HW_CACHE,
    Counter,
    CounterValue,
    Opener,
    PerfCounter,
    Ring,
    RingFactory,
    SampleRing,
    cpu_wide_refusal,
    paranoid_level,
    scaled_delta,
)

# PERF_COUNT_HW_CACHE_LL | PERF_COUNT_HW_CACHE_OP_READ << 8 | PERF_COUNT_HW_CACHE_RESULT_MISS << 16
LLC_READ_MISS = 2 | (0 << 8) | (1 << 16)
SAMPLE_HZ = 50  # per CPU: enough samples a second to name the top few processes
TOP = 3
OWN_THREAD_BUDGET = 256  # counters (fds) at most
RESCAN_EVERY = 5  # reads between looks for new threads and processes
UNSUPPORTED_ERRNOS = frozenset({errno.ENOENT, errno.EOPNOTSUPP, errno.EINVAL, errno.ENODEV})
GONE_ERRNOS = frozenset({errno.ESRCH, *DENIED_ERRNOS})


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


def process_name(proc_root: Path, pid: int) -> str | None:
    """The process's comm (made printable: it is another user's text), or None if it is gone."""
    try:
        return printable((proc_root / str(pid) / "comm").read_text().strip())
    except (OSError, UnicodeDecodeError):
        return None


def why_not(exc: BaseException) -> str:
    """An open's failure in words: 'not supported by this PMU' or the errno's text."""
    code = getattr(exc, "errno", None)
    if code in UNSUPPORTED_ERRNOS:
        return "not supported by this PMU"
    return os.strerror(code) if code else str(exc)


def denied(event: CoreEvent, exc: BaseException) -> str | None:
    """'not permitted (<event>: <why>)' when the kernel refused the event, else None."""
    code = getattr(exc, "errno", None)
    return f"not permitted ({event.name}: {os.strerror(code or 0)})" \
        if code in DENIED_ERRNOS else None


class SystemCoreMeter:
    """A counter per CPU: the total from the counts, who made it from the samples (if any)."""

    source = "perf-core"
    confidence = "approximate"

    def __init__(
        self,
        event: CoreEvent,
        counters: list[tuple[Counter, Ring | None]],
        proc_root: Path | str = "/proc",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.event = event
        self.sampling = all(ring is not None for _, ring in counters)
        self.detail = f"{event.meaning}, {event.name} on all {len(counters)} CPUs" + (
            "" if self.sampling else " (this PMU cannot sample: no process named)")
        self._counters = counters
        self._proc_root = Path(proc_root)
        self._clock = clock
        self._last: list[CounterValue] | None = None
        self._last_time = 0.0

    def read(self) -> Traffic | None:
        """Bytes/s and the top processes since the last read; None on the first read."""
        now = self._clock()
        values = [counter.read() for counter, _ in self._counters]
        drained = [ring.drain() for _, ring in self._counters if ring is not None]
        last, last_time = self._last, self._last_time
        self._last, self._last_time = values, now
        if last is None or now <= last_time:
            return None
        deltas = [scaled_delta(b, a) for b, a in zip(last, values, strict=True)]
        unseen = sum(d is None for d in deltas)
        total = sum(d for d in deltas if d is not None) * CACHE_LINE / (now - last_time)
        periods: dict[int, float] = {}
        for samples in drained:
            for pid, n in samples.periods.items():
                periods[pid] = periods.get(pid, 0) + n
        lost = sum(s.lost for s in drained)
        notes = (f"{unseen} CPU counter(s) not scheduled" if unseen else None,
                 f"{lost} sample(s) lost" if lost else None)
        return Traffic(None, None, total, "; ".join(n for n in notes if n) or None,
                       top_consumers(periods, total, self._proc_root))

    def close(self) -> None:
        """Unmap every ring and close every counter."""
        for counter, ring in self._counters:
            if ring is not None:
                ring.close()
            counter.close()
        self._counters = []


def open_system_meter(
    events: tuple[CoreEvent, ...],
    cpus: tuple[int, ...],
    proc_root: Path | str,
    opener: Opener,
    ring: RingFactory,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[SystemCoreMeter | None, str]:
    """A counter per CPU with the first event the PMU supports, sampling where it can."""
    reasons = []
    for event in events:
        for sampling in (True, False):  # some hypervisors count but cannot interrupt
            try:
                opened = _open_on_cpus(event, cpus, opener, ring if sampling else None)
            except (OSError, ValueError) as exc:
                refused = denied(event, exc)
                if refused:
                    return None, refused
                if sampling and getattr(exc, "errno", None) == errno.EOPNOTSUPP:
                    continue
                reasons.append(f"{event.name}: {why_not(exc)}")
                break
            meter = SystemCoreMeter(event, opened, proc_root, clock)
            meter.read()
            return meter, meter.detail
    return None, "no usable event (" + "; ".join(reasons) + ")"


def _open_on_cpus(
    event: CoreEvent, cpus: tuple[int, ...], opener: Opener, ring: RingFactory | None
) -> list[tuple[Counter, Ring | None]]:
    """Open, map (when `ring`) and enable the event on every CPU; all or nothing."""
    sampling = {} if ring is None else {"sample_freq": SAMPLE_HZ,
                                         "sample_type": PERF_SAMPLE_TID | PERF_SAMPLE_PERIOD}
    opened: list[tuple[Counter, Ring | None]] = []
    try:
        for cpu in cpus:
            counter = opener(event.type_, event.config, cpu=cpu, **sampling)
            opened.append((counter, None))
            if ring is not None:
                opened[-1] = (counter, ring(counter.fd))
            counter.enable()
    except (OSError, ValueError):
        for counter, samples in opened:
            if samples is not None:
                samples.close()
            counter.close()
        raise
    return opened


@dataclass
class _Watched:
    """One thread's counter and its last reading."""

    tgid: int
    counter: Counter
    last: CounterValue | None = None


class ProcessCoreMeter:
    """Counters on the threads of this user's busiest processes: their traffic, by process."""

    source = "perf-core-own"
    confidence = "approximate"

    def __init__(
        self,
        event: CoreEvent,
        opener: Opener,
        proc_root: Path | str = "/proc",
        uid: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        budget: int = OWN_THREAD_BUDGET,
    ) -> None:
        self.event = event
        self.uid = os.getuid() if uid is None else uid
        self.detail = (f"{event.meaning}, {event.name} in user space of uid {self.uid}'s "
                       f"processes only (perf_event_paranoid={paranoid_level(proc_root)}): "
                       "other users' and the kernel's traffic is not seen")
        self._opener = opener
        self._proc_root = Path(proc_root)
        self._clock = clock
        self._budget = budget
        self._watched: dict[int, _Watched] = {}
        self._cpu_ticks: dict[int, int] = {}
        self._reads = 0
        self._last_time: float | None = None
        self.refused = 0
        self.rescan()

    @property
    def threads(self) -> int:
        """Threads counted now."""
        return len(self._watched)

    def read(self) -> Traffic | None:
        """Bytes/s per process since the last read; None on the first read."""
        now = self._clock()
        by_pid: dict[int, float] = {}
        for watched in self._watched.values():
            try:
                value = watched.counter.read()
            except OSError:
                continue
            delta = scaled_delta(watched.last, value) if watched.last is not None else None
            if delta is not None:
                by_pid[watched.tgid] = by_pid.get(watched.tgid, 0.0) + delta
            watched.last = value
        last_time, self._last_time = self._last_time, now
        self._reads += 1
        if self._reads % RESCAN_EVERY == 0:
            self.rescan()
        if last_time is None or now <= last_time:
            return None
        rates = {pid: n * CACHE_LINE / (now - last_time) for pid, n in by_pid.items()}
        total = sum(rates.values())
        note = f"{self.threads} thread(s) counted" + (
            f", {self.refused} refused" if self.refused else "")
        return Traffic(None, None, total, note, top_consumers(rates, total, self._proc_root))

    def rescan(self) -> None:
        """Count the threads of the processes that used most CPU since the last look."""
        kept: dict[int, _Watched] = {}
        self.refused = 0
        ticks = own_processes(self._proc_root, self.uid)
        before, self._cpu_ticks = self._cpu_ticks, ticks
        busiest = sorted(ticks, key=lambda pid: (ticks[pid] - before.get(pid, 0), ticks[pid]),
                         reverse=True)
        for tid, tgid in ((t, p) for p in busiest for t in thread_ids(self._proc_root, p)):
            if len(kept) >= self._budget:
                break
            watched = self._watched.pop(tid, None)
            if watched is None:
                counter = self._open(tid)
                if counter is None:
                    continue
                watched = _Watched(tgid, counter)
            kept[tid] = watched
        for gone in self._watched.values():
            gone.counter.close()
        self._watched = kept

    def _open(self, tid: int) -> Counter | None:
        """An enabled counter on one thread; None if it has gone or may not be counted."""
        try:
            counter = self._opener(self.event.type_, self.event.config, pid=tid, cpu=-1,
                                   exclude_kernel=True)
        except OSError as exc:
            if exc.errno in GONE_ERRNOS:
                self.refused += exc.errno in DENIED_ERRNOS
                return None
            raise
        counter.enable()
        return counter

    def close(self) -> None:
        """Close every counter."""
        for watched in self._watched.values():
            watched.counter.close()
        self._watched = {}


def own_processes(proc_root: Path, uid: int) -> dict[int, int]:
    """pid -> CPU ticks used (utime + stime) for every process `uid` owns."""
    out: dict[int, int] = {}
    try:
        entries = [e for e in os.listdir(proc_root) if e.isdigit()]
    except OSError:
        return out
    for entry in entries:
        try:
            if os.stat(proc_root / entry).st_uid != uid:
                continue
            stat = (proc_root / entry / "stat").read_bytes()
            fields = stat[stat.rfind(b")") + 2:].split()
            out[int(entry)] = int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return out


def thread_ids(proc_root: Path, pid: int) -> list[int]:
    """The process's thread ids, main thread first; [] when it is gone."""
    try:
        return sorted(int(t) for t in os.listdir(proc_root / str(pid) / "task") if t.isdigit())
    except OSError:
        return []


def open_process_meter(
    events: tuple[CoreEvent, ...],
    proc_root: Path | str,
    opener: Opener,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[ProcessCoreMeter | None, str]:
    """Per-thread counters on this user's processes with the first event that opens on our own."""
    reasons = []
    for event in events:
        try:
            opener(event.type_, event.config, pid=0, cpu=-1, exclude_kernel=True).close()
            meter = ProcessCoreMeter(event, opener, proc_root, clock=clock)
        except OSError as exc:
            refused = denied(event, exc)
            if refused:
                return None, refused
            reasons.append(f"{event.name}: {why_not(exc)}")
            continue
        meter.read()
        return meter, meter.detail
    return None, "no usable event (" + "; ".join(reasons) + ")"


def open_core_pmu(
    sys_root: Path | str = "/sys",
    proc_root: Path | str = "/proc",
    opener: Opener = PerfCounter.open,
    ring: RingFactory = SampleRing,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[SystemCoreMeter | ProcessCoreMeter | None, str]:
    """The core-PMU meter allowed here (all CPUs, else own processes), or None and why not."""
    if not core_pmus(sys_root):
        return None, NO_CORE_PMU
    events = core_events(read_cpu_id(proc_root))
    refusal = cpu_wide_refusal(proc_root)
    if refusal is None:
        cpus = online_cpus(sys_root)
        if not cpus:
            return None, "perf core: the online CPU list is unreadable"
        meter, why = open_system_meter(events, cpus, proc_root, opener, ring, clock)
        if meter is not None or not why.startswith("not permitted"):
            return meter, why if meter is not None else f"perf core: {why}"
        refusal = why
    level = paranoid_level(proc_root)
    if level is not None and level > 2:
        return None, (f"perf core: not permitted (perf_event_paranoid={level}; counting "
                      "even one's own processes needs <= 2)")
    own, why = open_process_meter(events, proc_root, opener, clock)
    if own is not None:
        return own, why
    return None, f"perf core: all CPUs {refusal}; own processes {why}"
