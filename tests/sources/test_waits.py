"""What kept a process from running: run-queue wait per thread, block-I/O wait, storage reads.

Parsers on recorded text; the process source on real processes (two spinners sharing one
CPU each wait about half the time; a sleeper does not); the sampler's derive step asks for
trainers and their workers only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from gputop.core.model import GpuReport
from gputop.frames.derive import Derivation
from gputop.sources import procfs
from gputop.sources.base import ProcessScan, ProcessWaits
from gputop.sources.processes import ProcProcessSource
from tests.helpers.builders import process
from tests.helpers.scheduling import favoured
from tests.helpers.spy import spy

pytestmark = pytest.mark.alone

NONE = GpuReport("none")
SPIN_ON_CPU0 = "import os\nos.sched_setaffinity(0, {0})\nwhile True: pass"
# Two threads hashing (hashlib drops the GIL for big buffers) on one CPU; the main thread sleeps.
TWO_THREADS_ON_CPU0 = """
import hashlib, os, threading, time
os.sched_setaffinity(0, {0})
data = b"x" * (1 << 22)
def hash_forever():
    while True:
        hashlib.sha256(data).digest()
for _ in range(2):
    threading.Thread(target=hash_forever, daemon=True).start()
time.sleep(600)
"""
SLEEPER = "import time\nwhile True: time.sleep(0.01)"
READER = """
import os, sys
path = sys.argv[1]
fd = os.open(path, os.O_RDONLY)
while True:
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # every pass reads the disk again
    while os.read(fd, 1 << 20):
        pass
    os.lseek(fd, 0, os.SEEK_SET)
"""


def test_parse_schedstat() -> None:
    assert procfs.parse_schedstat(b"903222105 33334928 93\n") == (903222105, 33334928)
    for bad in (b"", b"0", b"x y z", b"-1 2 3"):
        assert procfs.parse_schedstat(bad) is None


def test_parse_io_read_bytes() -> None:
    text = (b"rchar: 6976\nwchar: 0\nsyscr: 10\nsyscw: 0\nread_bytes: 8388608\n"
            b"write_bytes: 0\ncancelled_write_bytes: 0\n")
    assert procfs.parse_io_read_bytes(text) == 8388608
    assert procfs.parse_io_read_bytes(b"rchar: 1\n") is None
    assert procfs.parse_io_read_bytes(b"read_bytes: many\n") is None


def test_parse_blkio_ticks_is_field_42() -> None:
    fields = [str(i) for i in range(3, 53)]  # fields 3..52 after "pid (comm)"
    line = f"7 (a) b) c) {' '.join(fields)}".encode()
    assert procfs.parse_blkio_ticks(line) == 42
    assert procfs.parse_blkio_ticks(b"7 (a) S 1 2 3") is None


@contextmanager
def children(*scripts: str | list[str]) -> Iterator[list[int]]:
    """Start each script under this Python, favoured (own session, nice -10: other work on
    a shared box waits behind them, not they behind it); kill them all afterwards."""
    procs = [subprocess.Popen([sys.executable, "-c", *([s] if isinstance(s, str) else s)],
                              start_new_session=True, preexec_fn=favoured())
             for s in scripts]
    try:
        time.sleep(0.5)  # past interpreter start-up
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=30)


def measured(pids: list[int], seconds: float = 1.0) -> dict[int, ProcessWaits]:
    """Each process's waits over about `seconds`."""
    source = ProcProcessSource()
    try:
        source.sample(NONE)
        first = source.waits(pids)
        assert all(w == ProcessWaits(None, None, None) for w in first.values())  # no rate yet
        time.sleep(seconds)
        source.sample(NONE)
        return source.waits(pids)
    finally:
        source.close()


def _counts_waits() -> bool:
    return procfs.schedstat_counts()


needs_schedstat = pytest.mark.skipif(not _counts_waits(),
                                     reason="this kernel's schedstat counts nothing")


@pytest.mark.slow
@needs_schedstat
def test_processes_sharing_one_cpu_wait_for_it_and_a_sleeper_does_not() -> None:
    with children(SPIN_ON_CPU0, SPIN_ON_CPU0, SLEEPER) as (one, two, sleeper):
        waits = measured([one, two, sleeper])
    for spinner in (one, two):
        wait = waits[spinner].runqueue_wait_percent
        assert wait is not None and wait >= 25  # half the time, less what other work takes
    asleep = waits[sleeper].runqueue_wait_percent
    assert asleep is not None
    assert asleep * 3 < min(waits[one].runqueue_wait_percent or 0.0,
                            waits[two].runqueue_wait_percent or 0.0)


@pytest.mark.slow
@needs_schedstat
def test_run_queue_wait_sums_every_thread() -> None:
    # The main thread only sleeps: its own schedstat shows no wait, its threads' do.
    with children(TWO_THREADS_ON_CPU0) as (pid,):
        schedstat = Path(f"/proc/{pid}/schedstat")
        before = procfs.parse_schedstat(schedstat.read_bytes())
        waits = measured([pid])
        after = procfs.parse_schedstat(schedstat.read_bytes())
    wait = waits[pid].runqueue_wait_percent
    assert before is not None and after is not None
    assert after.wait_ns - before.wait_ns < 50_000_000  # over the measured second
    assert wait is not None and wait >= 50  # two threads, each waiting about half the time


@pytest.mark.slow
@needs_schedstat
def test_the_main_threads_busy_share_counts_its_own_thread_only() -> None:
    """A spinning process's main thread is busy (running or queued) all the time; a process
    whose threads work while its main thread sleeps, and a sleeper, are not."""
    with children(SPIN_ON_CPU0, TWO_THREADS_ON_CPU0, SLEEPER) as (spinner, threads, sleeper):
        waits = measured([spinner, threads, sleeper])
    shares = {pid: waits[pid].main_thread_busy_percent for pid in (spinner, threads, sleeper)}
    busy = {pid: share for pid, share in shares.items() if share is not None}
    assert len(busy) == len(shares), shares  # none is None
    assert busy[spinner] >= 90, busy
    assert busy[threads] < 20 and busy[sleeper] < 20, busy


@pytest.mark.slow
def test_storage_reads_are_a_rate(tmp_path: Path) -> None:
    data = tmp_path / "data.bin"
    with open(data, "wb") as f:
        f.write(os.urandom(8 << 20))
        f.flush()
        os.fsync(f.fileno())
    with children([READER, str(data)], SLEEPER) as (reader, sleeper):
        waits = measured([reader, sleeper])
    reads = waits[reader].read_bytes_per_s
    if reads == 0:
        pytest.skip("this file system reads from no block device (no read_bytes counted)")
    assert reads is not None and reads >= (8 << 20) / 2  # at least one pass in the second
    assert waits[sleeper].read_bytes_per_s == 0


def test_io_wait_is_unknown_without_delay_accounting(tmp_path: Path) -> None:
    (tmp_path / "sys" / "kernel").mkdir(parents=True)
    (tmp_path / "sys" / "kernel" / "task_delayacct").write_text("0\n")
    assert not procfs.delay_accounting_on(str(tmp_path))
    (tmp_path / "sys" / "kernel" / "task_delayacct").write_text("1\n")
    assert procfs.delay_accounting_on(str(tmp_path))


def test_a_new_process_on_a_reused_pid_has_no_rate_yet() -> None:
    with children(SLEEPER) as (pid,):
        source = ProcProcessSource()
        try:
            source.sample(NONE)
            source.waits([pid])
            source._waits.marks[pid].start -= 1  # as if an older process had held this pid
            source.sample(NONE)
            assert source.waits([pid])[pid] == ProcessWaits(None, None, None)
        finally:
            source.close()


class _CountingSource:
    """A process source that records which pids the derive step asked waits for."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def sample(self, gpu: GpuReport) -> ProcessScan:
        raise AssertionError("not sampled here")

    def waits(self, pids: Iterable[int]) -> dict[int, ProcessWaits]:
        self.asked = list(pids)
        return {pid: ProcessWaits(12.5, None, 0.0) for pid in self.asked}

    def threads_named(self, pids: Iterable[int], comm: str) -> frozenset[int]:
        return frozenset()

    def torch_version(self, pid: int) -> str | None:
        return None

    def close(self) -> None:
        pass


def test_derive_reads_waits_for_trainers_and_their_workers_only() -> None:
    trainer = replace(process(100, cpu=90.0), gpu_indices=(0,))
    workers = [replace(process(w, ppid=100), name="pt_data_worker") for w in (101, 102)]
    others = [process(pid) for pid in range(200, 260)]
    source = _CountingSource()
    rows, groups = Derivation().processes(ProcessScan((trainer, *workers, *others), True),
                                          frozenset(), source)
    assert sorted(source.asked) == [100, 101, 102]
    waited = {r.pid: r.runqueue_wait_percent for r in rows}
    assert waited[100] == waited[101] == waited[102] == 12.5
    assert all(waited[p.pid] is None for p in others)
    assert groups[0].worker_pids == (101, 102)


def test_waits_are_in_the_json_snapshot() -> None:
    from gputop.export.snapshot import process_json

    sample = replace(process(7, wait=12.5, io_wait=3.0, reads=4096.0),
                     main_thread_busy_percent=96.0)
    row = process_json(sample)
    assert (row["runqueue_wait_percent"], row["io_wait_percent"], row["read_bytes_per_s"],
            row["main_thread_busy_percent"]) == (12.5, 3.0, 4096.0, 96.0)


# Two threads idle on an Event and the main thread in pause(): nothing runs until a signal.
# SIGUSR1 ends one idle thread and starts another (same count, other tids); SIGUSR2 starts one.
IDLE_THREADS = """
import signal, threading
stops = []
def start(*_):
    stop = threading.Event()
    threading.Thread(target=stop.wait, daemon=True).start()
    stops.append(stop)
def swap(*_):
    start()
    stops.pop(0).set()
signal.signal(signal.SIGUSR1, swap)
signal.signal(signal.SIGUSR2, start)
start()
start()
while True:
    signal.pause()
"""


def _tids(pid: int) -> set[int]:
    return {int(name) for name in os.listdir(f"/proc/{pid}/task")}


def _wait_for_tids(pid: int, done: Callable[[set[int]], bool]) -> set[int]:
    """The process's threads once `done` says they are as asked (at most 10 s)."""
    deadline = time.monotonic() + 10
    while not done(tids := _tids(pid)):
        assert time.monotonic() < deadline, f"threads of {pid} stayed {tids}"
        time.sleep(0.01)
    return tids


def _counted_listings(monkeypatch: pytest.MonkeyPatch, pid: int) -> list[str]:
    """Listings of /proc/`pid`/task from now on."""
    listed: list[str] = []
    real = os.listdir

    def listdir(path: str = ".") -> list[str]:
        if str(path).endswith(f"/{pid}/task"):
            listed.append(str(path))
        return real(path)

    monkeypatch.setattr(os, "listdir", listdir)
    return listed


def _tick(source: ProcProcessSource, pid: int) -> ProcessWaits:
    source.sample(NONE)
    return source.waits([pid])[pid]


@pytest.mark.slow
@needs_schedstat
def test_waits_lists_threads_again_only_when_they_may_have_changed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The thread list is kept while the thread count holds and every kept thread still
    answers; a thread replaced by another (same count) or a new one is still counted."""
    with children(IDLE_THREADS) as (pid,):
        listed = _counted_listings(monkeypatch, pid)
        source = ProcProcessSource()
        try:
            for _ in range(4):
                _tick(source, pid)
            assert len(listed) == 1, f"/proc/{pid}/task listed {len(listed)} times in 4 ticks"
            before = set(source._waits.marks[pid].thread_waits or ())
            os.kill(pid, signal.SIGUSR1)
            now = _wait_for_tids(pid, lambda tids: len(tids) == 3 and tids != before)
            _tick(source, pid)
            assert set(source._waits.marks[pid].thread_waits or ()) == now
            os.kill(pid, signal.SIGUSR2)
            now = _wait_for_tids(pid, lambda tids: len(tids) == 4)
            _tick(source, pid)
            assert set(source._waits.marks[pid].thread_waits or ()) == now
        finally:
            source.close()


@pytest.mark.slow
@needs_schedstat
def test_waits_reads_no_io_of_a_process_none_of_whose_threads_ran(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No thread ran, so no read was made: its /proc/PID/io is not read and its rates are
    those of a read (zero); once a thread runs it is read again."""
    with children(IDLE_THREADS) as (pid,):
        source = ProcProcessSource()
        reads: list[int] = []
        io = source._waits.io
        monkeypatch.setattr(io, "read", spy(io.read, lambda pid: reads.append(pid)))
        try:
            _tick(source, pid)
            idle = [_tick(source, pid) for _ in range(3)]
            assert reads == [pid], f"io read {len(reads)} times in 4 ticks of an idle process"
            assert all(w.read_bytes_per_s == 0.0 and w.runqueue_wait_percent is not None
                       for w in idle), idle
            os.kill(pid, signal.SIGUSR2)
            _wait_for_tids(pid, lambda tids: len(tids) == 4)
            _tick(source, pid)
            assert reads == [pid, pid]
        finally:
            source.close()
