"""The core-PMU rung: cache misses x 64 bytes a line, on all CPUs (a sampling counter per CPU
says who) or, where the kernel allows no more, on the threads of one's own processes."""

from __future__ import annotations

import errno
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from gputop.core.model import MemoryConsumer
from gputop.core.printable import printable
from gputop.sources.membw import hardware as hw
from gputop.sources.membw import perf_event as pe

# PERF_COUNT_HW_CACHE_LL | PERF_COUNT_HW_CACHE_OP_READ << 8 | PERF_COUNT_HW_CACHE_RESULT_MISS << 16
LLC_READ_MISS = 2 | (0 << 8) | (1 << 16)
SAMPLE_HZ = 50  # per CPU: enough samples a second to name the top few processes
TOP = 3
OWN_THREAD_BUDGET = 256  # counters (fds) at most
RESCAN_EVERY = 5  # reads between looks for new threads and processes
UNSUPPORTED_ERRNOS = frozenset({errno.ENOENT, errno.EOPNOTSUPP, errno.EINVAL, errno.ENODEV})
GONE_ERRNOS = frozenset({errno.ESRCH, *pe.DENIED_ERRNOS})
M = TypeVar("M", "SystemCoreMeter", "ProcessCoreMeter")


@dataclass(frozen=True)
class CoreEvent:
    """A generic perf event that counts cache lines from beyond a cache, and what it means here."""

    name: str
    type_: int
    config: int
    meaning: str


INTEL_CACHE_MISSES = CoreEvent(
    "cache-misses", pe.PERF_TYPE_HARDWARE, pe.PERF_COUNT_HW_CACHE_MISSES,
    "last-level-cache misses x 64 B (lines the cores fetched from beyond L3; "
    "writebacks not counted)")
LLC_LOAD_MISSES = CoreEvent(
    "LLC-load-misses", pe.PERF_TYPE_HW_CACHE, LLC_READ_MISS,
    "last-level-cache load misses x 64 B (demand reads only; prefetches and writebacks "
    "not counted)")
AMD_CACHE_MISSES = CoreEvent(
    "cache-misses", pe.PERF_TYPE_HARDWARE, pe.PERF_COUNT_HW_CACHE_MISSES,
    "L2 misses x 64 B (AMD's cache-misses event counts L3 hits too: above DRAM traffic)")
# The events worth trying per vendor, best first (ARM's cache-misses is L1: never used).
VENDOR_EVENTS = {"GenuineIntel": (INTEL_CACHE_MISSES, LLC_LOAD_MISSES),
                 "AuthenticAMD": (LLC_LOAD_MISSES, AMD_CACHE_MISSES)}


def core_events(cpu: tuple[str, int, int] | None) -> tuple[CoreEvent, ...]:
    """The events worth trying on this CPU, best first."""
    return VENDOR_EVENTS.get(cpu[0] if cpu else "", (LLC_LOAD_MISSES,))


def core_pmus(sys_root: Path | str = "/sys") -> list[str]:
    """Core PMUs the kernel lists: 'cpu' (x86), 'cpu_core'/'cpu_atom' (hybrid), 'armv8_*'."""
    return [n for n in hw.pmu_names(sys_root) if hw.is_core_pmu(n)]


def top_consumers(events_by_pid: Mapping[int, float], total_bytes_per_s: float, proc_root: Path,
                  keep: int = TOP) -> tuple[MemoryConsumer, ...]:
    """The `keep` pids with most events, each with its share of the total (pid 0, idle, not),
    named by their comm (made printable: another user's text; None when gone)."""
    counted = sum(events_by_pid.values())
    if counted <= 0:
        return ()
    top = []
    for n, pid in sorted(((n, pid) for pid, n in events_by_pid.items() if pid > 0 and n > 0),
                         reverse=True)[:keep]:
        try:
            name: str | None = printable((proc_root / str(pid) / "comm").read_text().strip())
        except (OSError, UnicodeDecodeError):
            name = None
        top.append(MemoryConsumer(pid, name, total_bytes_per_s * n / counted))
    return tuple(top)


def first_event(events: tuple[CoreEvent, ...], attempt: Callable[[CoreEvent], M]
                ) -> tuple[M | None, str]:
    """The meter of the first event `attempt` opens, else None and each event's refusal (the
    kernel's 'not permitted' at once; 'not supported by this PMU' or the errno's text)."""
    reasons = []
    for event in events:
        try:
            meter = attempt(event)
        except (OSError, ValueError) as exc:
            code = getattr(exc, "errno", None)
            if code in pe.DENIED_ERRNOS:
                return None, f"not permitted ({event.name}: {os.strerror(code or 0)})"
            reasons.append(f"{event.name}: " + ("not supported by this PMU"
                                                if code in UNSUPPORTED_ERRNOS
                                                else os.strerror(code) if code else str(exc)))
            continue
        meter.read()
        return meter, meter.detail
    return None, "no usable event (" + "; ".join(reasons) + ")"


class SystemCoreMeter(pe.CpuCounters):
    """A counter per CPU: the total from the counts, who made it from the samples (if any)."""

    confidence = "approximate"

    def __init__(self, event: CoreEvent, counters: list[pe.Opened], proc_root: Path | str = "/proc",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.event = event
        self.sampling = all(o.ring is not None for o in counters)
        super().__init__("perf-core", f"{event.meaning}, {event.name} on all {len(counters)} "
                         "CPUs" + ("" if self.sampling else
                                   " (this PMU cannot sample: no process named)"),
                         counters, clock)
        self._proc_root = Path(proc_root)

    def read(self) -> hw.Traffic | None:
        """Bytes/s and the top processes since the last read; None on the first read."""
        delta = self.delta()
        if delta is None:
            return None
        sums, unseen, drained, seconds = delta
        total = sums["total"] / seconds
        periods: Counter[int] = Counter()
        for samples in drained:
            periods.update(samples.periods)
        lost = sum(s.lost for s in drained)
        notes = (f"{unseen} CPU counter(s) not scheduled" if unseen else None,
                 f"{lost} sample(s) lost" if lost else None)
        return hw.Traffic(None, None, total, "; ".join(n for n in notes if n) or None,
                       top_consumers(periods, total, self._proc_root))


def open_system_meter(events: tuple[CoreEvent, ...], cpus: tuple[int, ...],
                      proc_root: Path | str, opener: pe.Opener, ring: pe.RingFactory,
                      clock: Callable[[], float] = time.monotonic
                      ) -> tuple[SystemCoreMeter | None, str]:
    """A counter per CPU with the first event the PMU supports, sampling where it can."""
    sampled = {"sample_freq": SAMPLE_HZ, "sample_type": pe.PERF_SAMPLE_TID | pe.PERF_SAMPLE_PERIOD}

    def attempt(event: CoreEvent) -> SystemCoreMeter:
        def on_cpus(sampling: bool) -> list[pe.Opened]:
            return pe.open_all([(event.type_, event.config, {"cpu": cpu, **(sampled if sampling
                                                                         else {})},
                              "total", hw.CACHE_LINE) for cpu in cpus],
                            opener, ring if sampling else None)

        try:
            opened = on_cpus(True)
        except OSError as exc:  # some hypervisors count but cannot interrupt
            if exc.errno != errno.EOPNOTSUPP:
                raise
            opened = on_cpus(False)
        return SystemCoreMeter(event, opened, proc_root, clock)

    return first_event(events, attempt)


@dataclass
class _Watched:
    """One thread's counter and its last reading."""

    tgid: int
    counter: pe.Counter
    last: pe.CounterValue | None = None


class ProcessCoreMeter:
    """Counters on the threads of this user's busiest processes: their traffic, by process."""

    source = "perf-core-own"
    confidence = "approximate"

    def __init__(self, event: CoreEvent, opener: pe.Opener, proc_root: Path | str = "/proc",
                 uid: int | None = None, clock: Callable[[], float] = time.monotonic,
                 budget: int = OWN_THREAD_BUDGET) -> None:
        self.event = event
        self.uid = os.getuid() if uid is None else uid
        self.detail = (f"{event.meaning}, {event.name} in user space of uid {self.uid}'s "
                       f"processes only (perf_event_paranoid={pe.paranoid_level(proc_root)}): "
                       "other users' and the kernel's traffic is not seen")
        self._opener, self._proc_root, self._clock = opener, Path(proc_root), clock
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

    def read(self) -> hw.Traffic | None:
        """Bytes/s per process since the last read; None on the first read."""
        now = self._clock()
        by_pid: dict[int, float] = {}
        for watched in self._watched.values():
            try:
                value = watched.counter.read()
            except OSError:
                continue
            delta = pe.scaled_delta(watched.last, value) if watched.last is not None else None
            if delta is not None:
                by_pid[watched.tgid] = by_pid.get(watched.tgid, 0.0) + delta
            watched.last = value
        last_time, self._last_time = self._last_time, now
        self._reads += 1
        if self._reads % RESCAN_EVERY == 0:
            self.rescan()
        if last_time is None or now <= last_time:
            return None
        rates = {pid: n * hw.CACHE_LINE / (now - last_time) for pid, n in by_pid.items()}
        total = sum(rates.values())
        note = f"{self.threads} thread(s) counted" + (
            f", {self.refused} refused" if self.refused else "")
        return hw.Traffic(None, None, total, note, top_consumers(rates, total, self._proc_root))

    def rescan(self) -> None:
        """Count the threads of the processes that used most CPU since the last look; a thread
        that has gone or may not be counted is skipped."""
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
                try:
                    counter = self._opener(self.event.type_, self.event.config, pid=tid,
                                           cpu=-1, exclude_kernel=True)
                except OSError as exc:
                    if exc.errno not in GONE_ERRNOS:
                        raise
                    self.refused += exc.errno in pe.DENIED_ERRNOS
                    continue
                counter.enable()
                watched = _Watched(tgid, counter)
            kept[tid] = watched
        for gone in self._watched.values():
            gone.counter.close()
        self._watched = kept

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


def open_process_meter(events: tuple[CoreEvent, ...], proc_root: Path | str, opener: pe.Opener,
                       clock: Callable[[], float] = time.monotonic
                       ) -> tuple[ProcessCoreMeter | None, str]:
    """Per-thread counters on this user's processes with the first event that opens on our own."""
    def attempt(event: CoreEvent) -> ProcessCoreMeter:
        opener(event.type_, event.config, pid=0, cpu=-1, exclude_kernel=True).close()
        return ProcessCoreMeter(event, opener, proc_root, clock=clock)

    return first_event(events, attempt)


def open_core_pmu(sys_root: Path | str = "/sys", proc_root: Path | str = "/proc",
                  opener: pe.Opener = pe.PerfCounter.open, ring: pe.RingFactory = pe.SampleRing,
                  clock: Callable[[], float] = time.monotonic
                  ) -> tuple[SystemCoreMeter | ProcessCoreMeter | None, str]:
    """The core-PMU meter allowed here (all CPUs, else own processes), or None and why not."""
    if not core_pmus(sys_root):
        return None, hw.NO_CORE_PMU
    events = core_events(hw.read_cpu_id(proc_root))
    refusal = pe.cpu_wide_refusal(proc_root)
    if refusal is None:
        cpus = hw.parse_cpulist(hw.read_text(Path(sys_root) / "devices/system/cpu/online") or "")
        if not cpus:
            return None, "perf core: the online CPU list is unreadable"
        meter, why = open_system_meter(events, cpus, proc_root, opener, ring, clock)
        if meter is not None or not why.startswith("not permitted"):
            return meter, why if meter is not None else f"perf core: {why}"
        refusal = why
    level = pe.paranoid_level(proc_root)
    if level is not None and level > 2:
        return None, (f"perf core: not permitted (perf_event_paranoid={level}; counting "
                      "even one's own processes needs <= 2)")
    own, why = open_process_meter(events, proc_root, opener, clock)
    if own is not None:
        return own, why
    return None, f"perf core: all CPUs {refusal}; own processes {why}"
