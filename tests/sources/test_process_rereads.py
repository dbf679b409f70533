"""The process source reads nothing again for a process that did not run: counted by the
kernel (inotify) on a /proc tree in a folder, so a regression shows without timing."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from gputop.core.model import GpuReport, ProcessSample
from gputop.sources.processes import (
    DEEP_LOOK_EVERY,
    DEEP_QUIET_TICKS,
    QUIET_REFRESH_TICKS,
    QUIET_TICKS,
    REFRESH_TICKS,
    YOUNG_S,
    ProcProcessSource,
)
from gputop.sources.procfs import CLOCK_TICKS, PF_KTHREAD
from tests.helpers.fakeproc import IN_OPEN, FakeProc, ReadWatch, stat_line

GPU_NONE = GpuReport("none")
QUIET = range(100, 116)  # single-threaded, asleep throughout
ORPHAN = 300  # child of the first process to vanish, re-parented while asleep
THREADED = 400  # schedstat shows only its main thread: its stat is read every tick
BIRTH_TICKS = 10  # ticks with births, fewer than the source's periodic relisting (16)


def _tree(tmp_path: Path) -> tuple[FakeProc, range]:
    """Quiet processes, one parent to vanish per tick over a refresh period, an orphan-to-be
    and a multi-threaded process; schedstat counting on (the gate)."""
    proc = FakeProc(tmp_path)
    (tmp_path / "self").mkdir()
    (tmp_path / "self/schedstat").write_text("5000 0 1\n")
    parents = range(200, 200 + REFRESH_TICKS)
    for pid in [*QUIET, *parents]:
        _put(proc, pid)
    _put(proc, ORPHAN, ppid=parents[0])
    _put(proc, THREADED, thr=4)
    return proc, parents


def _put(proc: FakeProc, pid: int, ppid: int = 1, thr: int = 1) -> None:
    proc.add(pid, "sleep", "sleep 9", ppid=ppid, thr=thr)
    (proc.root / str(pid) / "schedstat").write_text("10 0 1\n")


def test_quiet_processes_are_not_reread_while_others_vanish(tmp_path: Path) -> None:
    proc, parents = _tree(tmp_path)
    source = ProcProcessSource(str(tmp_path), max_fds=0)  # kept fds of a folder outlive rmdir
    watch = ReadWatch({pid: tmp_path / str(pid) for pid in [*QUIET, ORPHAN, THREADED]})
    try:
        for _ in range(REFRESH_TICKS + 2):  # until every process's schedstat was read once
            source.sample(GPU_NONE)
        watch.take()
        ticks = []
        for parent in parents:  # a process vanishes every tick, as on a busy machine
            proc.remove(parent)
            if parent == parents[0]:
                _put(proc, ORPHAN, ppid=1)  # the kernel re-parents it; it does not run
            rows = {row.pid: row for row in source.sample(GPU_NONE).rows}
            ticks.append(watch.take())
        stat_reads = Counter(pid for tick in ticks for pid, name in tick if name == "stat")
        window = range(REFRESH_TICKS + 3, 2 * REFRESH_TICKS + 3)  # the source's tick numbers
        assert {pid: stat_reads[pid] for pid in QUIET} == {  # only the refresh, long quiet now
            pid: sum((pid + tick) % QUIET_REFRESH_TICKS == 0 for tick in window) for pid in QUIET}
        assert not {name for tick in ticks for pid, name in tick if pid in QUIET} - {
            "stat", "schedstat"}  # no cmdline, status or io again
        assert stat_reads[THREADED] == REFRESH_TICKS
        # the tick after its (long-quiet) parent was seen gone: one tick, or two
        assert (ORPHAN, "stat") in ticks[1] | ticks[2]
        assert rows[ORPHAN].ppid == 1
    finally:
        watch.close()
        source.close()


def test_children_of_a_reused_pid_are_read_again(tmp_path: Path) -> None:
    proc, parents = _tree(tmp_path)
    warm = REFRESH_TICKS + 2
    # a child whose periodic refresh falls on no tick below, so only the re-read shows it
    child = next(pid for pid in range(500, 520)
                 if all((pid + tick) % REFRESH_TICKS for tick in range(warm + 1, warm + 4)))
    _put(proc, child, ppid=parents[0])
    source = ProcProcessSource(str(tmp_path), max_fds=0)
    try:
        for _ in range(warm):
            source.sample(GPU_NONE)
        proc.remove(parents[0])
        proc.add(parents[0], "sh", "sh", start=999)  # its pid went to a new process at once
        (tmp_path / str(parents[0]) / "schedstat").write_text("77 0 1\n")
        _put(proc, child, ppid=1)  # re-parented while asleep
        # the long-quiet parent's PID is looked at within two ticks, its children the next
        for _ in range(3):
            rows = {row.pid: row for row in source.sample(GPU_NONE).rows}
        assert rows[parents[0]].start_ticks == 999
        assert rows[child].ppid == 1
    finally:
        source.close()


def test_births_are_found_without_listing_proc_and_threads_are_not_processes(
    tmp_path: Path,
) -> None:
    """A PID allocated since the last look is past the last one seen: those few are read,
    /proc is not listed (the kernel's listing costs more than reading a thousand files),
    and a thread's TID among them is not taken for a process."""
    proc, _parents = _tree(tmp_path)
    source = ProcProcessSource(str(tmp_path), max_fds=0)
    watch = ReadWatch({"proc": tmp_path})
    try:
        source.sample(GPU_NONE)
        assert ("proc", "") in watch.take()  # the first look lists /proc
        born = []
        for tick in range(BIRTH_TICKS):
            child, thread = proc.last_pid + 1, proc.last_pid + 2
            _put(proc, child)
            (tmp_path / str(thread)).mkdir()  # readable as /proc/TID, not listed by /proc
            (tmp_path / str(thread) / "stat").write_text(
                stat_line(thread, "worker", ppid=child, exit_signal=-1))
            proc.last_pid = thread
            proc.bump()
            born.append(child)
            pids = {row.pid for row in source.sample(GPU_NONE).rows}
            assert ("proc", "") not in watch.take(), tick
            assert born[-1] in pids and thread not in pids, tick
        assert set(born) <= pids
    finally:
        watch.close()
        source.close()


def _sampled_at(source: ProcProcessSource) -> tuple[float, float, dict[int, ProcessSample]]:
    """One sample, bracketed by the clock the source reads: (before, after, rows by PID)."""
    before = time.clock_gettime(time.CLOCK_BOOTTIME)
    rows = {row.pid: row for row in source.sample(GPU_NONE).rows}
    return before, time.clock_gettime(time.CLOCK_BOOTTIME), rows


def test_long_quiet_processes_are_looked_at_every_other_tick(tmp_path: Path) -> None:
    """A process that has not run for QUIET_TICKS is looked at every other tick, by its
    schedstat, and by its stat only every QUIET_REFRESH_TICKS; one that wakes is seen at the
    next tick it is looked at, its %CPU over the time since it was last seen asleep."""
    proc, _parents = _tree(tmp_path)
    source = ProcProcessSource(str(tmp_path), max_fds=0)
    watch = ReadWatch({pid: tmp_path / str(pid) for pid in QUIET})
    waking = QUIET[0]
    try:
        for _ in range(QUIET_TICKS + REFRESH_TICKS):
            source.sample(GPU_NONE)
        watch.take()
        reads: Counter[tuple[int, str]] = Counter()
        for _ in range(QUIET_REFRESH_TICKS):
            source.sample(GPU_NONE)
            reads.update(watch.take())
        assert reads == {**{(pid, "schedstat"): QUIET_REFRESH_TICKS // 2 - 1 for pid in QUIET},
                         **{(pid, "stat"): 1 for pid in QUIET}}
        asleep = _sampled_at(source)  # the tick it was last seen asleep: this one or the next
        if waking not in {pid for pid, _name in watch.take()}:
            asleep = _sampled_at(source)
            assert waking in {pid for pid, _name in watch.take()}
        time.sleep(0.1)  # ticks apart, so a span of one tick and of two differ
        source.sample(GPU_NONE)
        assert waking not in {pid for pid, _name in watch.take()}  # not looked at
        proc.add(waking, "sleep", "sleep 9", ut=CLOCK_TICKS)  # it ran for a second meanwhile
        (tmp_path / str(waking) / "schedstat").write_text("20 0 2\n")
        time.sleep(0.1)
        woken = _sampled_at(source)
        cpu = woken[2][waking].cpu_percent
        assert cpu is not None
        assert 100 / (woken[1] - asleep[0]) <= cpu <= 100 / (woken[0] - asleep[1])
    finally:
        watch.close()
        source.close()


def _threads(root: Path, count: int) -> None:
    """The kernel's thread count as /proc/loadavg gives it ("running/total")."""
    (root / "loadavg").write_text(f"0.00 0.01 0.05 1/{count} 4000\n")


def test_deep_quiet_processes_are_looked_at_every_fourth_tick_and_never_outstay_their_end(
        tmp_path: Path) -> None:
    """A process that has not run for DEEP_QUIET_TICKS is looked at every DEEP_LOOK_EVERY
    ticks; when more threads ended than the tick saw end (the kernel's thread count against
    the PIDs allocated), every process skipped is looked at the same tick, so one that ended
    leaves at once. One that wakes has its %CPU over the time since it was last looked at."""
    proc, _parents = _tree(tmp_path)
    _threads(tmp_path, 500)
    source = ProcProcessSource(str(tmp_path), max_fds=0)
    watch = ReadWatch({pid: tmp_path / str(pid) for pid in QUIET})
    waking, ending = QUIET[0], QUIET[-1]

    def looks(ticks: int) -> Counter[int]:
        looked: Counter[int] = Counter()
        for _ in range(ticks):
            source.sample(GPU_NONE)
            looked.update({pid for pid, _name in watch.take()})
        return looked

    try:
        for _ in range(DEEP_QUIET_TICKS + REFRESH_TICKS):
            source.sample(GPU_NONE)
        watch.take()
        reads: Counter[tuple[int, str]] = Counter()
        for _ in range(QUIET_REFRESH_TICKS):
            source.sample(GPU_NONE)
            reads.update(watch.take())
        every = QUIET_REFRESH_TICKS // DEEP_LOOK_EVERY
        assert reads == {**{(pid, "schedstat"): every - 1 for pid in QUIET},
                         **{(pid, "stat"): 1 for pid in QUIET}}

        proc.add(THREADED + 1, "sleep", "sleep 9")  # born and counted: nothing ended
        _threads(tmp_path, 501)
        assert looks(2 * DEEP_LOOK_EVERY) == {pid: 2 for pid in QUIET}
        proc.last_pid += 1  # born and already gone: the tick sees that end itself
        proc.bump()
        assert looks(2 * DEEP_LOOK_EVERY) == {pid: 2 for pid in QUIET}

        _threads(tmp_path, 500)  # an end the tick did not see: all of them looked at now
        assert looks(1) == {pid: 1 for pid in QUIET}
        assert looks(DEEP_LOOK_EVERY) == {pid: 1 for pid in QUIET}  # and the cadence is back

        proc.remove(ending)  # a deep-quiet process ends: gone the same tick, whenever it is
        _threads(tmp_path, 499)
        assert ending not in {row.pid for row in source.sample(GPU_NONE).rows}
        watch.take()

        for _ in range(DEEP_LOOK_EVERY):  # the tick it is looked at
            asleep = _sampled_at(source)
            if waking in {pid for pid, _name in watch.take()}:
                break
        for tick in range(DEEP_LOOK_EVERY - 1):
            if tick == DEEP_LOOK_EVERY - 2:  # it runs for a second (no PID allocated)
                proc.add(waking, "sleep", "sleep 9", ut=CLOCK_TICKS)
                (tmp_path / str(waking) / "schedstat").write_text("20 0 2\n")
            time.sleep(0.05)
            source.sample(GPU_NONE)
            assert waking not in {pid for pid, _name in watch.take()}
        time.sleep(0.05)
        woken = _sampled_at(source)
        assert waking in {pid for pid, _name in watch.take()}
        cpu = woken[2][waking].cpu_percent
        assert cpu is not None
        assert 100 / (woken[1] - asleep[0]) <= cpu <= 100 / (woken[0] - asleep[1])
    finally:
        watch.close()
        source.close()


class _Visits(dict[int, Any]):
    """The source's tracked processes, noting each one its scan looks up (once a visit)."""

    def __init__(self, tracked: dict[int, Any]) -> None:
        super().__init__(tracked)
        self.looked_up: list[int] = []

    def get(self, pid: int, default: Any = None) -> Any:
        self.looked_up.append(pid)
        return super().get(pid, default)


def test_a_tick_visits_only_the_long_quiet_processes_it_looks_at(tmp_path: Path) -> None:
    """Three of every four long-quiet processes are carried over whole each tick, not
    visited one by one only to be skipped: beside thousands of idle processes, a tick's loop
    runs for a quarter of them."""
    _tree(tmp_path)
    _threads(tmp_path, 500)
    source = ProcProcessSource(str(tmp_path), max_fds=0)
    try:
        for _ in range(DEEP_QUIET_TICKS + REFRESH_TICKS):
            source.sample(GPU_NONE)
        for _ in range(DEEP_LOOK_EVERY):
            visits = _Visits(source._tracked)
            source._tracked = visits
            rows = source.sample(GPU_NONE).rows
            assert set(QUIET) <= {row.pid for row in rows}  # carried, still listed
            visited = [pid for pid in visits.looked_up if pid in QUIET]
            assert len(visited) == len(QUIET) // DEEP_LOOK_EVERY, visited
    finally:
        source.close()


def test_a_renamed_kernel_thread_has_no_argv_read(tmp_path: Path) -> None:
    """kworkers rename themselves for each work item (on a big server dozens a second): a
    kernel thread's new name is taken from its stat, its cmdline (always empty) is not
    opened; a user process that renames itself has its argv read again."""
    proc = FakeProc(tmp_path)
    kworker, renamer = 50, 60
    proc.add(kworker, "kworker/0:1-events", ppid=2, flags=PF_KTHREAD | 0x8000)
    proc.add(renamer, "python3", "python3 train.py")
    source = ProcProcessSource(str(tmp_path), max_fds=0)
    # opened, not read: reading an empty file is no access to inotify
    watch = ReadWatch({pid: tmp_path / str(pid) for pid in (kworker, renamer)}, mask=IN_OPEN)
    try:
        source.sample(GPU_NONE)
        time.sleep(YOUNG_S)  # past the age at which a new process's argv is read again
        source.sample(GPU_NONE)
        watch.take()
        names = []
        for tick, work in enumerate(("mm_percpu_wq", "events_unbound", "writeback")):
            proc.add(kworker, f"kworker/0:1-{work}", ppid=2, flags=PF_KTHREAD | 0x8000,
                     ut=tick + 1)
            proc.add(renamer, f"step-{tick}", "python3 train.py", ut=tick + 1)
            watch.take()  # the files written above
            rows = {row.pid: row for row in source.sample(GPU_NONE).rows}
            names.append((rows[kworker].name, rows[renamer].name))
            read = watch.take()
            assert (kworker, "cmdline") not in read, tick
            assert (renamer, "cmdline") in read, tick
        assert names == [("kworker/0:1-mm_percpu_wq", "step-0"),
                         ("kworker/0:1-events_unbound", "step-1"),
                         ("kworker/0:1-writeback", "step-2")]
        assert rows[kworker].cmdline == () and rows[renamer].cmdline == ("python3", "train.py")
    finally:
        watch.close()
        source.close()
