"""The core-PMU rung for one user: counters on the threads of their busiest processes.

Where perf_event_paranoid (<= 2) lets a user count only processes they own, one counter
per thread, user space only, gives those processes' traffic by process; other users'
and the kernel's is not seen, and the meter says so.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gputop.sources.membw.coreevents import (
    CACHE_LINE,
    GONE_ERRNOS,
    CoreEvent,
    Opener,
    top_consumers,
    why_not,
)
from gputop.sources.membw.perf_event import (
    DENIED_ERRNOS,
    Counter,
    CounterValue,
    paranoid_level,
    scaled_delta,
)
from gputop.sources.membw.traffic import Traffic

OWN_THREAD_BUDGET = 256  # counters (fds) at most
RESCAN_EVERY = 5  # reads between looks for new threads and processes


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
        level = paranoid_level(proc_root)
        self.detail = (f"{event.meaning}, {event.name} in user space of uid {self.uid}'s "
                       f"processes only (perf_event_paranoid={level}): other users' and "
                       "the kernel's traffic is not seen")
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

    def read(self) -> Traffic | None:
        """Bytes/s per process since the last read; None on the first read."""
        now = self._clock()
        by_pid: dict[int, float] = {}
        for watched in self._watched.values():
            try:
                value = watched.counter.read()
            except OSError:
                continue
            if watched.last is not None:
                delta = scaled_delta(watched.last, value)
                if delta is not None:
                    by_pid[watched.tgid] = by_pid.get(watched.tgid, 0.0) + delta
            watched.last = value
        last_time, self._last_time = self._last_time, now
        self._reads += 1
        if self._reads % RESCAN_EVERY == 0:
            self.rescan()
        if last_time is None or now <= last_time:
            return None
        seconds = now - last_time
        rates = {pid: n * CACHE_LINE / seconds for pid, n in by_pid.items()}
        total = sum(rates.values())
        note = (f"{self.threads} thread(s) counted" + (f", {self.refused} refused"
                                                       if self.refused else ""))
        return Traffic(None, None, total, note, top_consumers(rates, total, self._proc_root))

    @property
    def threads(self) -> int:
        """Threads counted now."""
        return len(self._watched)

    def rescan(self) -> None:
        """Count the threads of the processes that used most CPU since the last look."""
        kept: dict[int, _Watched] = {}
        self.refused = 0
        for tid, tgid in self._ranked_threads():
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

    def _ranked_threads(self) -> list[tuple[int, int]]:
        """(tid, tgid) of every own process, the busiest since the last look first."""
        ticks = own_processes(self._proc_root, self.uid)
        before, self._cpu_ticks = self._cpu_ticks, ticks
        ranked = sorted(ticks, key=lambda pid: (ticks[pid] - before.get(pid, 0), ticks[pid]),
                        reverse=True)
        return [(tid, pid) for pid in ranked for tid in thread_ids(self._proc_root, pid)]

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
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        try:
            out[int(entry)] = int(fields[11]) + int(fields[12])
        except (IndexError, ValueError):
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
        except OSError as exc:
            if exc.errno in DENIED_ERRNOS:
                return None, f"not permitted ({event.name}: {os.strerror(exc.errno or 0)})"
            reasons.append(f"{event.name}: {why_not(exc)}")
            continue
        try:
            meter = ProcessCoreMeter(event, opener, proc_root, clock=clock)
        except OSError as exc:
            reasons.append(f"{event.name}: {why_not(exc)}")
            continue
        meter.read()
        return meter, meter.detail
    return None, "no usable event (" + "; ".join(reasons) + ")"
