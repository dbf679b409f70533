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
import time
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING

from gputop.core.model import GpuReport, ProcessSample
from gputop.core.printable import printable
from gputop.sources import procfs
from gputop.sources.base import ProcessScan, ProcessWaits
from gputop.sources.containers import ContainerReader
from gputop.sources.named_threads import NamedThreads
from gputop.sources.torch_version import TorchVersions
from gputop.sources.tracked_process import TrackedProcess
from gputop.sources.waits import WaitMeter

if TYPE_CHECKING:
    from gputop.sources.first_sample import FirstSample

FOREIGN_NAME = "?"
FOREIGN_STATE = "?"  # an NVML PID with no /proc entry: another PID namespace
YOUNG_S = 1.0  # re-read cmdline while this young: a fork may not have exec'd yet
MIN_LIFE_S = 0.05  # a process younger than this has no meaningful %CPU yet
REFRESH_TICKS = 8  # a quiet process still gets a full stat read every this many ticks
QUIET_TICKS = 8  # a process that has not run for this many ticks is looked at every other
QUIET_REFRESH_TICKS = 32  # and its stat (RSS under reclaim) is read every this many ticks
DEEP_QUIET_TICKS = 64  # a process that has not run for this many ticks is looked at ...
DEEP_LOOK_EVERY = 4  # ... every this many ticks (QUIET_REFRESH_TICKS is a multiple)
MAX_PROBED = 256  # more new PIDs than this since the last look: list /proc instead
RELIST_TICKS = 16  # /proc is listed at least this often while PIDs are being allocated
_NO_GPU: tuple[None, tuple[int, ...]] = (None, ())


class _Scan:
    """What one tick's scan has found so far, and how it looks at the quiet."""

    __slots__ = ("born_gone", "deep_mask", "dt", "gate", "last", "moved", "now", "probed",
                 "quiet_mask", "replaced", "skipped", "ticks", "touched", "tracked")

    def __init__(self, now: float, last: float | None, ticks: int, gate: bool, probed: range,
                 deep_mask: int) -> None:
        self.now = now
        self.last = last
        self.dt = None if last is None else now - last
        self.ticks = ticks
        self.gate = gate and self.dt is not None
        self.probed = probed  # PIDs born since the last look, read unlisted
        self.quiet_mask = 1
        self.deep_mask = deep_mask
        self.tracked: dict[int, TrackedProcess] = {}  # every live process
        self.touched: list[TrackedProcess] = []  # those whose row may have changed
        self.moved: list[TrackedProcess] = []  # those that appeared or changed parent or name
        self.replaced: set[int] = set()  # PIDs that went to a new process
        self.skipped: list[int] = []  # PIDs of the quiet, not looked at
        self.born_gone = 0  # PIDs born since the last look and already gone

    def look_again(self) -> list[int]:
        """The skipped PIDs, taken back to be looked at now, every one."""
        pids, self.skipped = self.skipped, []
        self.quiet_mask = self.deep_mask = 0
        for pid in pids:
            del self.tracked[pid]
        return pids


class ProcProcessSource:
    """ProcessSource over /proc; keep one instance alive so %CPU covers the last interval."""

    def __init__(self, proc_root: str = "/proc", max_fds: int | None = None) -> None:
        self.proc_root = proc_root
        self._reader = procfs.StatReader(proc_root, max_fds)
        self._sched = procfs.StatReader(proc_root, max_fds, "schedstat")
        self._gate = procfs.schedstat_counts(proc_root)
        self._waits = WaitMeter(proc_root, max_fds, self._sched, self._gate)
        # Whether a process ran: its CPU clock (one system call) where the kernel answers it
        # for this /proc, else its schedstat (a pread through a kept fd)
        self._clocks = procfs.cpu_clocks_answer(proc_root)
        self._watch = procfs.LastPidWatch(proc_root)
        self._thread_count = procfs.ThreadCountWatch(proc_root)
        self._finalizer = weakref.finalize(
            self, _close_all, self._reader, self._sched, self._waits, self._watch,
            self._thread_count,
        )
        self._tracked: dict[int, TrackedProcess] = {}
        self._listed_at: int | None = None  # the last PID allocated when we last looked
        self._relisted_tick = 0
        self._times: tuple[float | None, float | None] = (None, None)  # the last two ticks
        self._tick_times: dict[int, float] = {}  # tick number -> its clock, the last few
        self._threads: int | None = None  # the kernel's thread count at the last tick
        self._ended: int | None = None  # threads ended since the last tick (None: unknown)
        self._threads_ended_seen = 0  # ... of them seen this tick in processes read again
        self._named_threads = NamedThreads(proc_root)
        self._torch_versions = TorchVersions(proc_root)
        self._containers = ContainerReader(proc_root)
        self._users: dict[int, str] = {}
        self._ticks = 0
        self._recheck: set[int] = set()  # read stat next tick: their parent vanished
        # The long-quiet (DEEP_QUIET_TICKS) by look phase, pid % DEEP_LOOK_EVERY: on a tick
        # the loop would skip three of these four, they are carried over whole instead.
        self._asleep: list[dict[int, TrackedProcess]] = [{} for _ in range(DEEP_LOOK_EVERY)]
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
            self._torch_versions.keep_only(tracked)
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

    def _rows_now(self, tracked: dict[int, TrackedProcess], touched: list[TrackedProcess],
                  reordered: bool) -> tuple[list[ProcessSample], dict[int, int]]:
        """The tracked rows in PID order and where each PID's is: the last tick's with the
        touched rows put in their places (no pass over the others), made anew when
        processes came or went."""
        fresh = [(t.pid, t.row()) for t in touched]
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

    def seed(self, look: FirstSample) -> None:
        """Take `look` (gputop.sources.first_sample's, taken before gputop loaded) as the
        previous tick, keeping its stat fds: the first sample's %CPU then covers the time
        since the look. A source that sampled already, or reads another /proc, ignores it."""
        if self._times[0] is not None or look.proc_root != self.proc_root:
            look.close()
            return
        self._ticks += 1
        tracked: dict[int, TrackedProcess] = {}
        for pid, (fd, data) in sorted(look.hand_over().items()):
            st = procfs.parse_stat(data)
            if st is None:
                os.close(fd)
                continue
            self._reader.adopt(pid, fd)
            tracked[pid] = t = self._new(pid, st, data, look.boottime, None)
            t.row()
        self._tracked, self._order = tracked, list(tracked)
        self._positions = {}  # the rows are made at the first sample
        self._times = (look.boottime, None)
        self._tick_times[self._ticks] = look.boottime
        self._listed_at, self._relisted_tick = look.last_pid, self._ticks

    @property
    def open_fds(self) -> int:
        """How many /proc/PID/stat, schedstat and io fds are held between ticks now."""
        return self._reader.open_fds + self._sched.open_fds + self._waits.open_fds

    def close(self) -> None:
        """Close every /proc fd held between ticks."""
        self._finalizer()

    def _scan(
        self, now: float, last: float | None
    ) -> tuple[dict[int, TrackedProcess], list[TrackedProcess], list[TrackedProcess], set[int]]:
        """Every live process, those whose row may have changed, those that appeared or
        changed parent or name, and the PIDs that vanished (or went to a new process). A
        quiet process costs one pread and no object, a long-quiet one nothing on three ticks
        of four: the loop runs for every process but those, which are carried over whole."""
        old = self._tracked
        pids, probed = self._pids_to_read(old)
        scan = self._begin_scan(now, last, probed)
        counts_ends = self._ended is not None
        if scan.gate and counts_ends:
            pids = self._carry_resting(scan, old, pids)
        while True:
            self._look_at(scan, old, pids)
            if not (scan.skipped and counts_ends and self._unseen_ends(old, scan)):
                break
            pids = scan.look_again()
            self.second_looks += 1
        return scan.tracked, scan.touched, scan.moved, self._settle(old, scan)

    def _begin_scan(self, now: float, last: float | None, probed: range) -> _Scan:
        """Count a new tick and start its scan."""
        self._ticks += 1
        ticks = self._ticks
        self._tick_times[ticks] = now
        self._tick_times.pop(ticks - DEEP_LOOK_EVERY - 1, None)
        self._threads_ended_seen = 0
        # Without the kernel's count of ended threads (no /proc/loadavg), as before it: no
        # deeper cadence, and one that ends leaves a tick later at worst.
        deep_mask = DEEP_LOOK_EVERY - 1 if self._ended is not None else 1
        return _Scan(now, last, ticks, self._gate, probed, deep_mask)

    def _carry_resting(self, scan: _Scan, old: dict[int, TrackedProcess],
                       pids: Iterable[int]) -> Iterable[int]:
        """Carry over unlooked the long-quiet the loop would skip this tick; the PIDs left."""
        resting = [b for phase, b in enumerate(self._asleep)
                   if b and (phase + scan.ticks) & scan.deep_mask]
        if not resting:
            return pids
        for bucket in resting:
            scan.tracked.update(bucket)
            scan.skipped.extend(bucket)
        carried = set().union(*resting)
        return old.keys() - carried if pids is old else [pid for pid in pids if pid not in carried]

    def _look_at(self, scan: _Scan, old: dict[int, TrackedProcess], pids: Iterable[int]) -> None:
        """Look at each of `pids` as its cadence says, adding what is found to `scan`."""
        now, last, dt, ticks, gate = scan.now, scan.last, scan.dt, scan.ticks, scan.gate
        probed, quiet_mask, deep_mask = scan.probed, scan.quiet_mask, scan.deep_mask
        tracked, touched, moved = scan.tracked, scan.touched, scan.moved
        replaced, skipped = scan.replaced, scan.skipped
        read = self._reader.read
        sched_read, sched_fds, pread = self._sched.read, self._sched.fds, os.pread
        clock = time.clock_gettime_ns if self._clocks else None
        any_threads = clock is not None  # a clock sums every thread; schedstat shows the main one
        sched_clock = procfs.CPUCLOCK_SCHED
        sched: bytes | int | None
        recheck = self._recheck
        tick_times = self._tick_times
        asleep = self._asleep
        born_gone = 0
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
        scan.born_gone += born_gone

    def _settle(self, old: dict[int, TrackedProcess], scan: _Scan) -> set[int]:
        """Keep the scan's processes and forget the rest; the PIDs that vanished (or went to
        a new process)."""
        tracked = scan.tracked
        gone = scan.replaced
        if tracked.keys() != old.keys():
            gone |= old.keys() - tracked.keys()
            self._reader.keep_only(tracked)
            self._sched.keep_only(tracked)
        # A process that vanished may have left children re-parented while asleep: only
        # theirs is a ppid that can change without running.
        self._recheck = {pid for pid, t in tracked.items() if t.ppid in gone} if gone else set()
        for pid in gone | self._recheck:  # gone, or to be read next tick
            self._asleep[pid % DEEP_LOOK_EVERY].pop(pid, None)
        self._tracked = tracked
        return gone

    def _pids_to_read(self, old: dict[int, TrackedProcess]) -> tuple[Iterable[int], range]:
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

    def _unseen_ends(self, old: dict[int, TrackedProcess], scan: _Scan) -> bool:
        """Whether more threads ended since the last tick than this tick saw end: those of
        the processes gone (or replaced), the new PIDs gone already, and the threads that
        processes read again lost."""
        seen = scan.born_gone + self._threads_ended_seen + sum(
            old[pid].num_threads or 1
            for pid in (old.keys() - scan.tracked.keys()) | scan.replaced)
        return (self._ended or 0) > seen

    def _join_gpus(
        self, tracked: dict[int, TrackedProcess],
        gpu_use: dict[int, tuple[int | None, tuple[int, ...]]],
    ) -> list[TrackedProcess]:
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
    ) -> TrackedProcess:
        """A process first seen (or on a reused PID), with its names, user and %CPU."""
        t = TrackedProcess(pid, st, raw)
        t.ran_at = t.seen_at = self._ticks
        age = now - st.starttime / procfs.CLOCK_TICKS
        self._read_cmdline(t, st, age)
        t.username = self._username(pid)
        if not st.flags & procfs.PF_KTHREAD:  # a kernel thread runs in no container
            t.container = self._containers.container_of(pid)
            t.container_pid = self._containers.inner_pid(pid)
        if last is not None and now - age >= last and age >= MIN_LIFE_S:
            # Born during the interval: its whole life is the interval.
            t.cpu_percent = 100.0 * t.cpu_ticks / procfs.CLOCK_TICKS / age
        return t

    def _update(
        self, t: TrackedProcess, st: procfs.ProcStat, raw: bytes, now: float, dt: float | None
    ) -> bool:
        """Take a process's new stat; whether its parent or name changed."""
        ticks = st.utime + st.stime
        if dt is not None and dt > 0:
            t.cpu_percent = max(0.0, 100.0 * (ticks - t.cpu_ticks) / procfs.CLOCK_TICKS / dt)
        changed = st.ppid != t.ppid
        if st.comm != t.comm or t.cmdline_age < YOUNG_S:
            changed |= st.comm != t.comm
            t.comm = t.name = st.comm
            self._read_cmdline(t, st, now - st.starttime / procfs.CLOCK_TICKS)
            self._reread_container(t, st)
        t.raw, t.ppid, t.state = raw, st.ppid, st.state
        if t.num_threads is not None and st.num_threads is not None:
            self._threads_ended_seen += max(0, t.num_threads - st.num_threads)
        t.num_threads, t.cpu_ticks = st.num_threads, ticks
        t.rss_bytes = st.rss_pages * procfs.PAGE_SIZE
        return changed

    def _read_cmdline(self, t: TrackedProcess, st: procfs.ProcStat, age: float) -> None:
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

    def _reread_container(self, t: TrackedProcess, st: procfs.ProcStat) -> None:
        """Its container again after an exec (a runtime moves its process into the
        container's cgroup before it execs the container's command)."""
        if st.flags & procfs.PF_KTHREAD:
            return
        container = self._containers.container_of(t.pid)
        if container != t.container:
            t.container, t.sample = container, None  # its row is made anew

    def _username(self, pid: int) -> str | None:
        """The name of the user owning `pid`, escaped (a uid with no name: the number)."""
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

    def waits(self, pids: Iterable[int]) -> dict[int, ProcessWaits]:
        """Run-queue wait (every thread), block-I/O wait and storage reads of `pids`, as rates
        over the time since the previous call that included the process (None the first time)."""
        return self._waits.rates(pids, self._tracked)

    def threads_named(self, pids: Iterable[int], comm: str) -> frozenset[int]:
        """Those of `pids` with a thread named `comm`, their threads listed again rarely."""
        return self._named_threads.having(pids, comm, self._tracked)

    def torch_version(self, pid: int) -> str | None:
        """The torch version a process loaded (None: no torch, or unknown); read once."""
        t = self._tracked.get(pid)
        return None if t is None else self._torch_versions.of(pid, t.start)


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
    *closables: procfs.StatReader | procfs.LastPidWatch | procfs.ThreadCountWatch | WaitMeter,
) -> None:
    """Close each of `closables`."""
    for item in closables:
        item.close()
