"""Process source: every process from direct /proc reads, GPU memory joined, workers grouped.

The per-tick path is one pread per process through fds kept open between ticks: of
/proc/PID/schedstat for a single-threaded process that did not run, else of its stat; a
process that has not run for QUIET_TICKS is looked at every other tick, one that has not run
for DEEP_QUIET_TICKS every DEEP_LOOK_EVERY ticks, and every one the same tick when a process
or thread ended that the tick did not see end (the kernel's thread count tells). A
PID born since the last tick is past the last one seen and is read directly; /proc is
listed on a PID wrap-around, after many births, and every 16 ticks while PIDs are
allocated. cmdline and username are read once per process (again after an exec).
"""

from __future__ import annotations

import os
import pwd
import re
import time
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from gputop.model import GpuReport, ProcessSample
from gputop.printable import printable
from gputop.sources import procfs
from gputop.sources.base import ProcessScan, ProcessWaits

if TYPE_CHECKING:
    from gputop.sources.first_look import FirstLook

FOREIGN_NAME = "?"
FOREIGN_STATE = "?"  # an NVML PID with no /proc entry: another PID namespace
YOUNG_S = 1.0  # re-read cmdline while this young: a fork may not have exec'd yet
MIN_LIFE_S = 0.05  # a process younger than this has no meaningful %CPU yet
PIN_RESCAN_S = 2.0
REFRESH_TICKS = 8  # a quiet process still gets a full stat read every this many ticks
QUIET_TICKS = 8  # a process that has not run for this many ticks is looked at every other
QUIET_REFRESH_TICKS = 32  # and its stat (RSS under reclaim) is read every this many ticks
DEEP_QUIET_TICKS = 64  # a process that has not run for this many ticks is looked at ...
DEEP_LOOK_EVERY = 4  # ... every this many ticks (QUIET_REFRESH_TICKS is a multiple)
MAX_PROBED = 256  # more new PIDs than this since the last look: list /proc instead
RELIST_TICKS = 16  # /proc is listed at least this often while PIDs are being allocated
_NO_GPU: tuple[None, tuple[int, ...]] = (None, ())
_UNKNOWN_WAITS = ProcessWaits(None, None, None)
MAPS_LIMIT = 16 << 20
VERSION_LIMIT = 1 << 16  # torch's version.py is a few hundred bytes
TORCH_LIB = b"/torch/lib/libtorch"
_VERSION_RE = re.compile(rb"""__version__\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""")


class _Tracked:
    """What the source remembers about one process between ticks."""

    __slots__ = (
        "cmdline", "cmdline_age", "comm", "cpu_percent", "cpu_ticks", "gpu_indices",
        "gpu_memory_bytes", "name", "num_threads", "pid", "ppid", "ran_at", "raw", "rss_bytes",
        "sample", "sched", "seen_at", "start", "state", "username",
    )

    def __init__(self, pid: int, st: procfs.ProcStat, raw: bytes) -> None:
        self.pid = pid
        self.start = st.starttime
        self.raw = raw
        self.comm = st.comm
        self.name = st.comm
        self.ppid: int | None = st.ppid
        self.state = st.state
        self.num_threads: int | None = st.num_threads
        self.rss_bytes = st.rss_pages * procfs.PAGE_SIZE
        self.cpu_ticks = st.utime + st.stime
        self.cpu_percent: float | None = None
        self.cmdline: tuple[str, ...] = ()
        self.cmdline_age = 0.0
        self.username: str | None = None
        self.gpu_memory_bytes: int | None = None
        self.gpu_indices: tuple[int, ...] = ()
        self.sample: ProcessSample | None = None
        self.sched: bytes | int | None = None  # its CPU clock (ns), else its schedstat
        self.ran_at = 0  # the last tick that moved (or it was first seen)
        self.seen_at = 0  # the last tick it was looked at (a quiet one is not, every tick)


class _PinState:
    """The last look at a trainer's threads for a pt_data_pin thread."""

    __slots__ = ("scanned_at", "start", "threads", "tid")

    def __init__(self, start: int) -> None:
        self.start = start
        self.tid: int | None = None
        self.threads: int | None = None
        self.scanned_at = float("-inf")


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
    """A process's wait counters at one waits() look."""

    __slots__ = ("at", "blkio_ticks", "main_busy_ns", "read_bytes", "run_ns", "start",
                 "thread_waits")

    def __init__(self, start: int, at: float, threads: _ThreadTimes,
                 blkio_ticks: int | None, read_bytes: int | None) -> None:
        self.start = start
        self.at = at
        self.thread_waits = threads.waits  # tid -> run-queue wait ns
        self.main_busy_ns = threads.main_busy_ns  # the main thread's run + run-queue wait
        self.run_ns = threads.run_ns  # every thread's time on a CPU, summed
        self.blkio_ticks = blkio_ticks
        self.read_bytes = read_bytes


def _none_ran(before: _WaitMark, start: int, now: _ThreadTimes) -> bool:
    """Whether no thread of the process ran between two looks: the same threads, none with
    more time on a CPU (a thread born and gone meanwhile was started by one that ran)."""
    return (before.start == start and now.run_ns is not None
            and before.run_ns == now.run_ns and now.waits is not None
            and before.thread_waits is not None and before.thread_waits.keys() == now.waits.keys())


def _wait_rates(old: _WaitMark, new: _WaitMark) -> ProcessWaits:
    """The counters' growth between two looks, per second of the interval."""
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
    return ProcessWaits(runqueue, io, reads, main)


class ProcProcessSource:
    """ProcessSource over /proc; keep one instance alive so %CPU covers the last interval."""

    def __init__(self, proc_root: str = "/proc", max_fds: int | None = None) -> None:
        self.proc_root = proc_root
        self._reader = procfs.StatReader(proc_root, max_fds)
        self._sched = procfs.StatReader(proc_root, max_fds, "schedstat")
        # waits(): by TID (/proc/TID/schedstat is that thread's), and /proc/PID/io
        self._thread_sched = procfs.StatReader(proc_root, max_fds, "schedstat")
        self._io = procfs.StatReader(proc_root, max_fds, "io")
        self._gate = procfs.schedstat_counts(proc_root)
        # Whether a process ran: its CPU clock (one system call) where the kernel answers it
        # for this /proc, else its schedstat (a pread through a kept fd)
        self._clocks = procfs.cpu_clocks_answer(proc_root)
        self._delayacct = procfs.delay_accounting_on(proc_root)
        self._waits: dict[int, _WaitMark] = {}
        self._task_lists: dict[int, _TaskList] = {}  # waits(): threads as last listed
        self._watch = procfs.LastPidWatch(proc_root)
        self._thread_count = procfs.ThreadCountWatch(proc_root)
        self._finalizer = weakref.finalize(
            self, _close_all, self._reader, self._sched, self._thread_sched, self._io, self._watch,
            self._thread_count,
        )
        self._tracked: dict[int, _Tracked] = {}
        self._listed_at: int | None = None  # the last PID allocated when we last looked
        self._relisted_tick = 0
        self._last_time: float | None = None
        self._times: tuple[float | None, float | None] = (None, None)  # the last two ticks
        self._tick_times: dict[int, float] = {}  # tick number -> its clock, the last few
        self._threads: int | None = None  # the kernel's thread count at the last tick
        self._ended: int | None = None  # threads ended since the last tick (None: unknown)
        self._threads_ended_seen = 0  # ... of them seen this tick in processes read again
        self._pins: dict[int, _PinState] = {}
        self._torch_versions: dict[tuple[int, int], str | None] = {}
        self._users: dict[int, str] = {}
        self._ticks = 0
        self._recheck: set[int] = set()  # read stat next tick: their parent vanished
        # The long-quiet (DEEP_QUIET_TICKS) by look phase, pid % DEEP_LOOK_EVERY: on a tick
        # the loop would skip three of these four, they are carried over whole instead.
        self._asleep: list[dict[int, _Tracked]] = [{} for _ in range(DEEP_LOOK_EVERY)]
        self._order: list[int] = []  # tracked pids, sorted, as of the last change
        self._rows: list[ProcessSample] = []  # their rows, in that order
        self._positions: dict[int, int] = {}  # pid -> its row's place (made anew, not changed)
        self._on_gpu: set[int] = set()  # pids NVML listed last tick
        self.listings = 0
        self.second_looks = 0  # ticks that looked at the skipped again (an end unseen)

    def sample(self, gpu: GpuReport) -> ProcessScan:
        """All processes now, with %CPU over the time since the previous call."""
        now = time.clock_gettime(time.CLOCK_BOOTTIME)
        last, self._times = self._times[0], (now, self._times[0])
        gpu_use = gpu_usage(gpu)
        tracked, touched, moved, gone = self._scan(now, last)
        changed = bool(moved or gone)
        touched += self._join_gpus(tracked, gpu_use)
        reordered = bool(gone) or len(tracked) != len(self._order)  # not for a rename
        if reordered:
            self._order = sorted(tracked)
            if self._torch_versions:
                self._torch_versions = {k: v for k, v in self._torch_versions.items()
                                        if k[0] in tracked}
        rows, positions = self._rows_now(tracked, touched, reordered)
        foreign = [_foreign(pid, mem, idx) for pid, (mem, idx) in sorted(gpu_use.items())
                   if pid not in tracked]
        if foreign:
            positions = {**positions, **{row.pid: len(rows) + i for i, row in enumerate(foreign)}}
            rows = [*rows, *foreign]
        moved_rows = tuple(s for t in moved if (s := t.sample) is not None)
        # Every pid NVML lists has a row (its own, or a foreign one), with its devices.
        return ProcessScan(tuple(rows), changed, moved_rows, frozenset(gone), frozenset(gpu_use),
                           positions)

    def _rows_now(self, tracked: dict[int, _Tracked], touched: list[_Tracked],
                  reordered: bool) -> tuple[list[ProcessSample], dict[int, int]]:
        """The tracked rows in PID order and where each PID's is: the last tick's with the
        touched rows put in their places (no pass over the others), made anew when
        processes came or went."""
        fresh = [(t.pid, self._row(t)) for t in touched]
        rows, positions = self._rows, self._positions
        if (not reordered and len(positions) == len(self._order)
                and all(pid in positions for pid, _ in fresh)):
            for pid, row in fresh:
                rows[positions[pid]] = row
            return rows, positions
        rows = [s for pid in self._order if (s := tracked[pid].sample) is not None]
        self._rows = rows
        self._positions = positions = {row.pid: i for i, row in enumerate(rows)}
        return rows, positions

    def seed(self, look: FirstLook) -> None:
        """Take `look` (gputop.sources.first_look's, taken before gputop loaded) as the
        previous tick, keeping its stat fds: the first sample's %CPU then covers the time
        since the look. A source that sampled already, or reads another /proc, ignores it."""
        if self._times[0] is not None or look.proc_root != self.proc_root:
            look.close()
            return
        self._ticks += 1
        tracked: dict[int, _Tracked] = {}
        for pid, (fd, data) in sorted(look.hand_over().items()):
            st = procfs.parse_stat(data)
            if st is None:
                os.close(fd)
                continue
            self._reader.adopt(pid, fd)
            tracked[pid] = t = self._new(pid, st, data, look.boottime, None)
            self._row(t)
        self._tracked, self._order = tracked, list(tracked)
        self._positions = {}  # the rows are made at the first sample
        self._times = (look.boottime, None)
        self._tick_times[self._ticks] = look.boottime
        self._listed_at, self._relisted_tick = look.last_pid, self._ticks

    @property
    def open_fds(self) -> int:
        """How many /proc/PID/stat, schedstat and io fds are held between ticks now."""
        return (self._reader.open_fds + self._sched.open_fds + self._thread_sched.open_fds
                + self._io.open_fds)

    def close(self) -> None:
        """Close every /proc fd held between ticks."""
        self._finalizer()

    def _scan(
        self, now: float, last: float | None
    ) -> tuple[dict[int, _Tracked], list[_Tracked], list[_Tracked], set[int]]:
        """Every live process, those whose row may have changed, those that appeared or
        changed parent or name, and the PIDs that vanished (or went to a new process). A
        quiet process costs one pread and no object, a long-quiet one nothing on three ticks
        of four: the loop runs for every process but those, which are carried over whole."""
        old = self._tracked
        pids, probed = self._pids_to_read(old)
        dt = None if last is None else now - last
        read = self._reader.read
        sched_read, sched_fds, pread = self._sched.read, self._sched.fds, os.pread
        clock = time.clock_gettime_ns if self._clocks else None
        any_threads = clock is not None  # a clock sums every thread; schedstat shows the main one
        sched_clock = procfs.CPUCLOCK_SCHED
        sched: bytes | int | None
        gate = self._gate and dt is not None
        recheck = self._recheck
        self._ticks += 1
        ticks = self._ticks
        tick_times = self._tick_times
        tick_times[ticks] = now
        tick_times.pop(ticks - DEEP_LOOK_EVERY - 1, None)
        # Without the kernel's count of ended threads (no /proc/loadavg), as before it: no
        # deeper cadence, and one that ends leaves a tick later at worst.
        counts_ends = self._ended is not None
        quiet_mask, deep_mask = 1, DEEP_LOOK_EVERY - 1 if counts_ends else 1
        self._threads_ended_seen = 0
        born_gone = 0  # PIDs born since the last look and already gone
        skipped: list[int] = []
        tracked: dict[int, _Tracked] = {}
        asleep = self._asleep
        if gate and counts_ends:  # the long-quiet the loop would skip, carried over unlooped
            resting = [b for phase, b in enumerate(asleep) if b and (phase + ticks) & deep_mask]
            if resting:
                carried = set().union(*resting)
                pids = (old.keys() - carried if pids is old
                        else [pid for pid in pids if pid not in carried])
                for bucket in resting:
                    tracked.update(bucket)
                    skipped.extend(bucket)
        touched: list[_Tracked] = []
        moved: list[_Tracked] = []
        replaced: set[int] = set()
        while True:
            for pid in pids:
                t = old.get(pid)
                # The gate: a process whose run time did not move did not run (its CPU clock,
                # a system call, a third of a stat read's cost, summed over its threads; else
                # the schedstat of a single-threaded one: it shows the main thread only),
                # and without running it changes no field we show but RSS under reclaim (its stat
                # is read every REFRESH_TICKS anyway) and ppid (read on the tick after its parent
                # vanished). The run time is read before stat, so a run in between shows on the
                # next tick. Inlined: this runs for every process.
                # A process that has not run for QUIET_TICKS is looked at every other tick (on
                # the refresh's parity) and its stat read every QUIET_REFRESH_TICKS (a stat read
                # costs five schedstat reads): one that wakes shows a tick later at worst, its
                # %CPU over the two ticks; one that has not run for DEEP_QUIET_TICKS every
                # DEEP_LOOK_EVERY ticks (it wakes into view up to 3 ticks late). Those skipped
                # are looked at in a second pass when the tick saw fewer ends than the kernel
                # counted (_unseen_ends): one that ends never outstays its end.
                if gate and t is not None and (any_threads or t.num_threads == 1) and (
                        pid not in recheck):
                    phase = pid + ticks
                    idle = ticks - t.ran_at
                    if idle <= QUIET_TICKS:
                        due = not phase % REFRESH_TICKS
                    elif phase & (deep_mask if idle > DEEP_QUIET_TICKS else quiet_mask):
                        skipped.append(pid)
                        tracked[pid] = t
                        continue
                    else:
                        due = not phase % QUIET_REFRESH_TICKS
                    if not due:
                        try:
                            if clock is not None:  # procfs.cpu_clock_id, inlined
                                sched = clock(((~pid) << 3) | sched_clock)
                            else:
                                fd = sched_fds.get(pid)
                                sched = pread(fd, 256, 0) if fd is not None else sched_read(pid)
                        except OSError:  # gone, or its pid reused: the reader tells which
                            sched = sched_read(pid)
                        if sched is None:
                            continue
                        if sched == t.sched:
                            if t.cpu_percent != 0.0:
                                t.cpu_percent = 0.0
                                touched.append(t)
                            t.seen_at = ticks
                            tracked[pid] = t
                            if idle > DEEP_QUIET_TICKS:
                                asleep[pid % DEEP_LOOK_EVERY][pid] = t
                            continue
                        t.sched, t.ran_at = sched, ticks
                data = read(pid)
                if data is None:
                    born_gone += t is None
                    continue
                if t is None and pid in probed and procfs.is_thread(data):
                    self._reader.forget(pid)  # a thread's TID: its process is tracked already
                    continue
                if t is not None and data == t.raw:
                    if dt is not None and t.cpu_percent != 0.0:
                        t.cpu_percent = 0.0
                        touched.append(t)
                else:
                    st = procfs.parse_stat(data)
                    if st is None:
                        continue
                    if t is None or t.start != st.starttime:
                        if t is not None:
                            replaced.add(pid)
                        t = self._new(pid, st, data, now, last)
                        moved.append(t)
                    elif self._update(t, st, data, now, dt if t.seen_at == ticks - 1 else (
                            now - tick_times[t.seen_at] if t.seen_at in tick_times else None)):
                        moved.append(t)
                    touched.append(t)
                t.seen_at = ticks
                tracked[pid] = t
                if gate and ticks - t.ran_at > DEEP_QUIET_TICKS and (
                        any_threads or t.num_threads == 1) and (
                        pid not in recheck):  # without the gate none is carried: none kept
                    asleep[pid % DEEP_LOOK_EVERY][pid] = t
                else:
                    asleep[pid % DEEP_LOOK_EVERY].pop(pid, None)
            if not (skipped and counts_ends and self._unseen_ends(old, tracked, replaced,
                                                                  born_gone)):
                break
            pids, skipped, quiet_mask, deep_mask = skipped, [], 0, 0  # look at them now
            self.second_looks += 1
            for pid in pids:
                del tracked[pid]
        gone = replaced
        if tracked.keys() != old.keys():
            gone |= old.keys() - tracked.keys()
            self._reader.keep_only(tracked)
            self._sched.keep_only(tracked)
        # A process that vanished may have left children re-parented while asleep: only
        # theirs is a ppid that can change without running.
        self._recheck = {pid for pid, t in tracked.items() if t.ppid in gone} if gone else set()
        for pid in gone | self._recheck:  # gone, or to be read next tick
            asleep[pid % DEEP_LOOK_EVERY].pop(pid, None)
        self._tracked = tracked
        return tracked, touched, moved, gone

    def _pids_to_read(self, old: dict[int, _Tracked]) -> tuple[Iterable[int], range]:
        """The PIDs to read this tick, and the range of PIDs born since the last look that
        were added to them unlisted (a TID among them is a thread's, not a process's).

        Only PIDs past the last one seen can be new, so /proc (whose listing costs more
        than reading a thousand schedstat files) is listed only on a wrap-around, after
        many allocations, and every RELIST_TICKS while PIDs are being allocated.
        """
        last_pid = self._watch.read()
        since, self._listed_at = self._listed_at, last_pid
        threads, counted = self._thread_count.read(), self._threads
        self._threads = threads
        # Threads ended since the last tick: PIDs allocated (each birth takes one) less
        # the growth of the kernel's thread count. From inside a PID namespace, births
        # outside it hide as many ends: there one may be seen DEEP_LOOK_EVERY - 1 late.
        if last_pid is None or since is None or last_pid < since or None in (threads, counted):
            self._ended = None
        else:
            self._ended = (last_pid - since) - ((threads or 0) - (counted or 0))
        if last_pid is not None and old and last_pid == since:
            return old, range(0)  # no PID allocated: read only those known (a new dict is built)
        if (last_pid is not None and old and since is not None
                and since < last_pid <= since + MAX_PROBED
                and self._ticks - self._relisted_tick < RELIST_TICKS):
            born = range(since + 1, last_pid + 1)
            return [*old, *(pid for pid in born if pid not in old)], born
        self._relisted_tick = self._ticks
        self.listings += 1
        return procfs.list_pids(self.proc_root), range(0)

    def _unseen_ends(self, old: dict[int, _Tracked], tracked: dict[int, _Tracked],
                     replaced: set[int], born_gone: int) -> bool:
        """Whether more threads ended since the last tick than this tick saw end: those of
        the processes gone (or replaced), the new PIDs gone already, and the threads that
        processes read again lost."""
        seen = born_gone + self._threads_ended_seen + sum(
            old[pid].num_threads or 1 for pid in (old.keys() - tracked.keys()) | replaced)
        return (self._ended or 0) > seen

    def _join_gpus(
        self, tracked: dict[int, _Tracked], gpu_use: dict[int, tuple[int | None, tuple[int, ...]]]
    ) -> list[_Tracked]:
        """Set GPU memory and devices on the processes NVML lists now or listed last tick;
        those whose values moved."""
        moved = []
        for pid in self._on_gpu | gpu_use.keys():
            t = tracked.get(pid)
            if t is None:
                continue
            memory, indices = gpu_use.get(pid, _NO_GPU)
            if t.gpu_memory_bytes != memory or t.gpu_indices != indices:
                t.gpu_memory_bytes, t.gpu_indices = memory, indices
                moved.append(t)
        self._on_gpu = set(gpu_use)
        return moved

    def _new(
        self, pid: int, st: procfs.ProcStat, raw: bytes, now: float, last: float | None
    ) -> _Tracked:
        t = _Tracked(pid, st, raw)
        t.ran_at = t.seen_at = self._ticks
        age = now - st.starttime / procfs.CLOCK_TICKS
        self._read_cmdline(t, st, age)
        t.username = self._username(pid)
        if last is not None and now - age >= last and age >= MIN_LIFE_S:
            # Born during the interval: its whole life is the interval.
            t.cpu_percent = 100.0 * t.cpu_ticks / procfs.CLOCK_TICKS / age
        return t

    def _update(
        self, t: _Tracked, st: procfs.ProcStat, raw: bytes, now: float, dt: float | None
    ) -> bool:
        ticks = st.utime + st.stime
        if dt is not None and dt > 0:
            t.cpu_percent = max(0.0, 100.0 * (ticks - t.cpu_ticks) / procfs.CLOCK_TICKS / dt)
        changed = st.ppid != t.ppid
        if st.comm != t.comm or t.cmdline_age < YOUNG_S:
            changed |= st.comm != t.comm
            t.comm = t.name = st.comm
            self._read_cmdline(t, st, now - st.starttime / procfs.CLOCK_TICKS)
        t.raw, t.ppid, t.state = raw, st.ppid, st.state
        if t.num_threads is not None and st.num_threads is not None:
            self._threads_ended_seen += max(0, t.num_threads - st.num_threads)
        t.num_threads, t.cpu_ticks = st.num_threads, ticks
        t.rss_bytes = st.rss_pages * procfs.PAGE_SIZE
        return changed

    def _read_cmdline(self, t: _Tracked, st: procfs.ProcStat, age: float) -> None:
        """argv (escaped: another user chose it) and the name shown from it and comm. A
        kernel thread has no argv: its file is not read (kworkers rename themselves for
        each work item, on a big server dozens a second)."""
        t.cmdline_age = age
        if st.flags & procfs.PF_KTHREAD:
            t.cmdline, t.name = (), display_name(st.comm, ())
            return
        data = procfs.read_bytes(f"{self.proc_root}/{t.pid}/cmdline")
        if data is None:
            t.name = display_name(t.comm, ())
            return
        t.cmdline = tuple(map(printable, procfs.parse_cmdline(data)))
        t.name = display_name(t.comm, t.cmdline)

    def _username(self, pid: int) -> str | None:
        try:
            uid = os.stat(f"{self.proc_root}/{pid}").st_uid
        except OSError:
            return None
        name = self._users.get(uid)
        if name is None:
            try:
                name = printable(pwd.getpwuid(uid).pw_name)
            except KeyError:
                name = str(uid)
            self._users[uid] = name
        return name

    def _row(self, t: _Tracked) -> ProcessSample:
        """The process as a sample; the same object while nothing shown changed."""
        s = t.sample
        if (
            s is not None
            and s.cpu_percent == t.cpu_percent
            and s.gpu_memory_bytes == t.gpu_memory_bytes
            and s.gpu_indices == t.gpu_indices
            and s.num_threads == t.num_threads
            and s.rss_bytes == t.rss_bytes
            and s.state == t.state
            and s.name == t.name
            and s.ppid == t.ppid
        ):
            return s
        s = ProcessSample(
            pid=t.pid,
            ppid=t.ppid,
            name=t.name,
            cmdline=t.cmdline,
            username=t.username,
            state=t.state,
            num_threads=t.num_threads,
            cpu_percent=t.cpu_percent,
            rss_bytes=t.rss_bytes,
            cpu_time_s=t.cpu_ticks / procfs.CLOCK_TICKS,
            start_ticks=t.start,
            gpu_memory_bytes=t.gpu_memory_bytes,
            gpu_indices=t.gpu_indices,
        )
        t.sample = s
        return s

    def waits(self, pids: Iterable[int]) -> dict[int, ProcessWaits]:
        """Run-queue wait (every thread), block-I/O wait and storage reads of `pids`, as rates
        over the time since the previous call that included the process (None the first time).

        The sampler asks for trainers and their workers only, so the cost stays flat in the
        number of processes: a schedstat pread per thread and an io pread per process,
        through fds kept open between calls.
        """
        now = time.clock_gettime(time.CLOCK_BOOTTIME)
        old = self._waits
        marks: dict[int, _WaitMark] = {}
        out: dict[int, ProcessWaits] = {}
        for pid in pids:
            t = self._tracked.get(pid)
            if t is None or pid in marks:
                continue
            blkio = procfs.parse_blkio_ticks(t.raw) if self._delayacct else None
            threads = self._thread_times(t)
            before = old.get(pid)
            if before is not None and _none_ran(before, t.start, threads):
                # A process reads storage only by running: its io cannot have moved.
                read_bytes = before.read_bytes
            else:
                io = self._io.read(pid)
                read_bytes = None if io is None else procfs.parse_io_read_bytes(io)
            mark = _WaitMark(t.start, now, threads, blkio, read_bytes)
            marks[pid] = mark
            if before is None or before.start != t.start:
                out[pid] = _UNKNOWN_WAITS  # the first look, or a new process on a reused pid
            else:
                out[pid] = _wait_rates(before, mark)
        self._waits = marks
        if self._task_lists.keys() - marks.keys():
            self._task_lists = {p: k for p, k in self._task_lists.items() if p in marks}
        self._io.keep_only(marks)
        self._thread_sched.keep_only(
            {tid for mark in marks.values() for tid in mark.thread_waits or ()})
        return out

    def _thread_times(self, t: _Tracked) -> _ThreadTimes:
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

    def threads_named(self, pids: Iterable[int], comm: str) -> frozenset[int]:
        """Those of `pids` with a thread named `comm`; a process's threads are listed again
        only when its thread count changed (or every PIN_RESCAN_S while none was found)."""
        now = time.clock_gettime(time.CLOCK_BOOTTIME)
        tracked = self._tracked
        pins: set[int] = set()
        states: dict[int, _PinState] = {}
        for pid in pids:
            t = tracked.get(pid)
            if t is None:
                continue
            state = self._pins.get(pid)
            if state is None or state.start != t.start:
                state = _PinState(t.start)
            states[pid] = state
            if state.tid is not None and self._thread_comm(pid, state.tid) != comm:
                state.tid, state.threads = None, None
            if state.tid is None and (
                state.threads != t.num_threads or now - state.scanned_at > PIN_RESCAN_S
            ):
                state.tid = self._find_thread(pid, comm)
                state.threads, state.scanned_at = t.num_threads, now
            if state.tid is not None:
                pins.add(pid)
        self._pins = states
        return frozenset(pins)

    def _thread_comm(self, pid: int, tid: int) -> str | None:
        data = procfs.read_bytes(f"{self.proc_root}/{pid}/task/{tid}/comm", 256)
        return None if data is None else printable(data.rstrip(b"\n").decode("utf-8", "replace"))

    def _find_thread(self, pid: int, comm: str) -> int | None:
        try:
            tids = os.listdir(f"{self.proc_root}/{pid}/task")
        except OSError:
            return None
        for tid in tids:
            if tid.isdigit() and self._thread_comm(pid, int(tid)) == comm:
                return int(tid)
        return None

    def torch_version(self, pid: int) -> str | None:
        """The torch version a process loaded (None: no torch, or unknown); read once."""
        t = self._tracked.get(pid)
        if t is None:
            return None
        key = (pid, t.start)
        if key not in self._torch_versions:
            self._torch_versions[key] = self._read_torch_version(pid)
        return self._torch_versions[key]

    def _read_torch_version(self, pid: int) -> str | None:
        """torch.__version__ of `pid`, from the version.py beside its libtorch.

        That file lies under a path the process's owner controls, so it is read only when
        every uid of the process (real, effective, saved, fs, from status; an owner of /proc
        files shows one uid, and root's once a process makes itself non-dumpable) is our
        effective uid: no privilege is crossed. Even then no component may be a symlink and
        the file is read only once seen regular and small. Another user's trainer is never
        proven old, not even for root: nothing else in /proc tells torch's version (< 2.5
        names no thread), so its unnamed workers stay rows of their own rather than root
        open a path that user named. The /proc/PID fd held throughout keeps a reused pid
        from answering for this one.
        """
        try:
            proc_dir = os.open(f"{self.proc_root}/{pid}", os.O_PATH | os.O_DIRECTORY)
        except OSError:
            return None
        try:
            return _own_torch_version(proc_dir)
        finally:
            os.close(proc_dir)


def _own_torch_version(proc_dir: int) -> str | None:
    """torch.__version__ of the process whose /proc dir is open, if all its uids are ours."""
    uids = procfs.parse_status_uids(procfs.read_bytes("status", dir_fd=proc_dir) or b"")
    if uids is None or set(uids) != {os.geteuid()}:
        return None
    torch_dir = _torch_dir(procfs.read_bytes("maps", MAPS_LIMIT, dir_fd=proc_dir) or b"")
    if torch_dir is None:
        return None
    source = procfs.read_regular_beneath(
        "root", f"{torch_dir}/version.py", VERSION_LIMIT, dir_fd=proc_dir
    )
    match = _VERSION_RE.search(source or b"")
    return None if match is None else match.group(1).decode("ascii", "replace")


def _torch_dir(maps: bytes) -> str | None:
    """The torch package directory of the first libtorch named in /proc/PID/maps text."""
    at = maps.find(TORCH_LIB)
    if at < 0:
        return None
    line_start = maps.rfind(b"\n", 0, at) + 1
    fields = maps[line_start : at + len(b"/torch")].split(maxsplit=5)  # the path may hold spaces
    if len(fields) < 6 or not fields[5].startswith(b"/"):
        return None
    return os.fsdecode(fields[5])


def gpu_usage(gpu: GpuReport) -> dict[int, tuple[int | None, tuple[int, ...]]]:
    """pid -> (GPU memory summed over devices, or None if unknown; device indices)."""
    memory: dict[int, int | None] = {}
    devices: dict[int, list[int]] = {}
    for device in gpu.gpus:
        for proc in device.processes:
            devices.setdefault(proc.pid, []).append(device.index)
            used = proc.memory_used_bytes
            if proc.pid not in memory:
                memory[proc.pid] = used
            elif used is not None:
                memory[proc.pid] = (memory[proc.pid] or 0) + used
    return {pid: (memory[pid], tuple(sorted(set(devices[pid])))) for pid in devices}


def display_name(comm: str, cmdline: tuple[str, ...]) -> str:
    """comm, or argv[0]'s basename when the kernel cut comm at 15 characters; escaped."""
    if len(comm) == 15 and cmdline:
        base = os.path.basename(cmdline[0])
        if base.startswith(comm):
            return printable(base)
    return printable(comm)


def _foreign(pid: int, memory: int | None, indices: tuple[int, ...]) -> ProcessSample:
    """An NVML process /proc does not show (another PID namespace): kept, marked."""
    return ProcessSample(
        pid=pid, ppid=None, name=FOREIGN_NAME, cmdline=(), username=None,
        state=FOREIGN_STATE, num_threads=None, cpu_percent=None, rss_bytes=None,
        cpu_time_s=None, start_ticks=0, gpu_memory_bytes=memory, gpu_indices=indices,
        in_proc=False,
    )


def _close_all(
    *closables: procfs.StatReader | procfs.LastPidWatch | procfs.ThreadCountWatch,
) -> None:
    for item in closables:
        item.close()
