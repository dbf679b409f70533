"""Run-queue wait of every thread, block-I/O wait and storage reads of chosen processes."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from gputop.sources import procfs
from gputop.sources.base import ProcessWaits
from gputop.sources.tracked_process import TrackedProcess

_UNKNOWN_WAITS = ProcessWaits(None, None, None)


class _ThreadTimes(NamedTuple):
    """A process's threads at one look: tid -> run-queue wait ns (None where schedstat counts
    nothing), its main thread's run plus run-queue wait ns, and all its threads' run ns."""

    waits: dict[int, int] | None
    main_busy_ns: int | None
    run_ns: int | None = None


_NO_THREAD_TIMES = _ThreadTimes(None, None)


class _TaskList:
    """A multi-threaded process's thread ids as last listed, and its thread count then."""

    __slots__ = ("num_threads", "start", "tids")

    def __init__(self, start: int, num_threads: int | None, tids: list[int]) -> None:
        self.start = start
        self.num_threads = num_threads
        self.tids = tids


class _WaitMark:
    """A process's wait counters at one look."""

    __slots__ = ("at", "blkio_ticks", "main_busy_ns", "majflt", "read_bytes", "run_ns",
                 "start", "thread_waits")

    def __init__(self, start: int, at: float, threads: _ThreadTimes,
                 blkio_ticks: int | None, read_bytes: int | None,
                 majflt: int | None = None) -> None:
        self.start = start
        self.at = at
        self.thread_waits = threads.waits  # tid -> run-queue wait ns
        self.main_busy_ns = threads.main_busy_ns  # the main thread's run + run-queue wait
        self.run_ns = threads.run_ns  # every thread's time on a CPU, summed
        self.blkio_ticks = blkio_ticks
        self.read_bytes = read_bytes
        self.majflt = majflt  # major faults since it started (/proc/PID/stat)


def _none_ran(before: _WaitMark, start: int, now: _ThreadTimes) -> bool:
    """Whether no thread of the process ran between two looks: the same threads, none with
    more time on a CPU (a thread born and gone meanwhile was started by one that ran)."""
    return (before.start == start and now.run_ns is not None
            and before.run_ns == now.run_ns and now.waits is not None
            and before.thread_waits is not None and before.thread_waits.keys() == now.waits.keys())


def _wait_rates(old: _WaitMark, new: _WaitMark, pid: int | None = None) -> ProcessWaits:
    """The counters' growth between two looks, per second of the interval; `pid`'s own
    thread (the main thread) also alone."""
    dt = new.at - old.at
    if dt <= 0:
        return _UNKNOWN_WAITS
    runqueue = None
    if old.thread_waits is not None and new.thread_waits is not None:
        before = old.thread_waits
        # A thread not there last time was born in the interval: all its wait is new.
        waited = sum(max(0, ns - before.get(tid, 0)) for tid, ns in new.thread_waits.items())
        runqueue = 100.0 * waited / 1e9 / dt
    io = None
    if old.blkio_ticks is not None and new.blkio_ticks is not None:
        io = 100.0 * max(0, new.blkio_ticks - old.blkio_ticks) / procfs.CLOCK_TICKS / dt
    reads = None
    if old.read_bytes is not None and new.read_bytes is not None:
        reads = max(0, new.read_bytes - old.read_bytes) / dt
    main = None
    if old.main_busy_ns is not None and new.main_busy_ns is not None:
        main = min(100.0, 100.0 * max(0, new.main_busy_ns - old.main_busy_ns) / 1e9 / dt)
    faults = None
    if old.majflt is not None and new.majflt is not None:
        faults = max(0, new.majflt - old.majflt) / dt
    return ProcessWaits(runqueue, io, reads, main, faults,
                        _main_wait(old.thread_waits, new.thread_waits, pid, dt))


def _main_wait(old: dict[int, int] | None, new: dict[int, int] | None, pid: int | None,
               dt: float) -> float | None:
    """The main thread's run-queue wait as a share of the interval (100 = all of it)."""
    if pid is None or old is None or new is None or pid not in old or pid not in new:
        return None
    return min(100.0, 100.0 * max(0, new[pid] - old[pid]) / 1e9 / dt)


class WaitMeter:
    """Wait rates over the time between looks, from schedstat by thread and io by process."""

    def __init__(self, proc_root: str, max_fds: int | None, sched: procfs.StatReader,
                 gate: bool) -> None:
        self.proc_root = proc_root
        self._sched = sched  # the scan's, by PID: a single-threaded process's is its thread's
        self._thread_sched = procfs.StatReader(proc_root, max_fds, "schedstat")  # by TID
        self.io = procfs.StatReader(proc_root, max_fds, "io")
        self._gate = gate  # schedstat counts
        self._delayacct = procfs.delay_accounting_on(proc_root)
        self.marks: dict[int, _WaitMark] = {}
        self._task_lists: dict[int, _TaskList] = {}  # threads as last listed

    @property
    def open_fds(self) -> int:
        """How many thread schedstat and process io fds are held between looks now."""
        return self._thread_sched.open_fds + self.io.open_fds

    def close(self) -> None:
        """Close the fds held between looks."""
        self._thread_sched.close()
        self.io.close()

    def rates(self, pids: Iterable[int],
              tracked: Mapping[int, TrackedProcess]) -> dict[int, ProcessWaits]:
        """Run-queue wait (every thread), block-I/O wait and storage reads of those of `pids`
        tracked, as rates over the time since the previous call that included the process
        (None the first time).

        The sampler asks for trainers and their workers only, so the cost stays flat in the
        number of processes: a schedstat pread per thread and an io pread per process,
        through fds kept open between calls.
        """
        now = time.clock_gettime(time.CLOCK_BOOTTIME)
        old = self.marks
        marks: dict[int, _WaitMark] = {}
        out: dict[int, ProcessWaits] = {}
        for pid in pids:
            t = tracked.get(pid)
            if t is None or pid in marks:
                continue
            blkio = procfs.parse_blkio_ticks(t.raw) if self._delayacct else None
            threads = self._thread_times(t)
            before = old.get(pid)
            if before is not None and _none_ran(before, t.start, threads):
                # A process reads storage only by running: its io cannot have moved.
                read_bytes = before.read_bytes
            else:
                io = self.io.read(pid)
                read_bytes = None if io is None else procfs.parse_io_read_bytes(io)
            # majflt is in the stat line the scan read this tick: no read of its own
            mark = _WaitMark(t.start, now, threads, blkio, read_bytes, procfs.parse_majflt(t.raw))
            marks[pid] = mark
            if before is None or before.start != t.start:
                out[pid] = _UNKNOWN_WAITS  # the first look, or a new process on a reused pid
            else:
                out[pid] = _wait_rates(before, mark, pid)
        self.marks = marks
        if self._task_lists.keys() - marks.keys():
            self._task_lists = {p: k for p, k in self._task_lists.items() if p in marks}
        self.io.keep_only(marks)
        self._thread_sched.keep_only(
            {tid for mark in marks.values() for tid in mark.thread_waits or ()})
        return out

    def _thread_times(self, t: TrackedProcess) -> _ThreadTimes:
        """Every thread's run-queue wait and the main thread's busy time, from schedstat."""
        if not self._gate:
            return _NO_THREAD_TIMES
        if t.num_threads == 1:
            sched = procfs.parse_schedstat(self._sched.read(t.pid) or b"")
            return _NO_THREAD_TIMES if sched is None else _ThreadTimes(
                {t.pid: sched.wait_ns}, sched.run_ns + sched.wait_ns, sched.run_ns)
        listed = self._task_lists.get(t.pid)
        if listed is not None and listed.start == t.start and listed.num_threads == t.num_threads:
            kept = self._kept_thread_times(t.pid, listed.tids)
            if kept is not None:
                return kept
        try:
            tids = [int(name) for name in os.listdir(f"{self.proc_root}/{t.pid}/task")
                    if name.isdigit()]
        except OSError:
            return _NO_THREAD_TIMES
        self._task_lists[t.pid] = _TaskList(t.start, t.num_threads, tids)
        waits, main, run = {}, None, 0
        for tid in tids:
            sched = procfs.parse_schedstat(self._thread_sched.read(tid) or b"")
            if sched is not None:  # a thread that ended meanwhile is simply not counted
                waits[tid] = sched.wait_ns
                run += sched.run_ns
                if tid == t.pid:
                    main = sched.run_ns + sched.wait_ns
        return _ThreadTimes(waits or None, main, run)

    def _kept_thread_times(self, pid: int, tids: list[int]) -> _ThreadTimes | None:
        """The times of the threads listed before, through their kept fds; None (list them
        again) when one has no fd or no longer answers: it ended, and with the thread count
        unchanged another was born. A kept fd answers for its own thread only, never for a
        later one given the same tid."""
        fds = self._thread_sched.fds
        waits, main, run = {}, None, 0
        for tid in tids:
            fd = fds.get(tid)
            if fd is None:
                return None
            try:
                sched = procfs.parse_schedstat(os.pread(fd, 1024, 0))
            except OSError:
                return None
            if sched is None:
                return None
            waits[tid] = sched.wait_ns
            run += sched.run_ns
            if tid == pid:
                main = sched.run_ns + sched.wait_ns
        return _ThreadTimes(waits or None, main, run)
