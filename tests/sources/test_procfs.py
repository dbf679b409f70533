"""/proc parsing on recorded text; the process source on fixture trees and on the real /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import pytest

from gputop.core.model import GpuProcess, GpuReport, GpuSample, ProcessSample, TrainerGroup
from gputop.frames.derive import Derivation
from gputop.sources import procfs
from gputop.sources.processes import (
    FOREIGN_STATE,
    QUIET_TICKS,
    REFRESH_TICKS,
    ProcProcessSource,
    display_name,
    gpu_usage,
)
from tests.helpers.fakeproc import FakeProc, stat_line
from tests.helpers.processes import open_fd_targets


@pytest.mark.parametrize(
    "comm",
    ["python", "my prog", "a) b (c", "((", "))", ") S 1 2 3", "tmux: server", "", "x" * 15],
)
def test_comm_with_spaces_and_parentheses(comm: str):
    st = procfs.parse_stat(stat_line(42, comm, ppid=7, ut=5, st=6, thr=3, start=900,
                                     rss=2).encode())
    assert st is not None
    assert (st.pid, st.comm, st.state, st.ppid) == (42, comm, "S", 7)
    assert (st.utime, st.stime, st.num_threads, st.starttime, st.rss_pages) == (5, 6, 3, 900, 2)


def test_kernel_thread_and_zombie_stat():
    kthread = b"2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 14 0 0 " \
              b"18446744073709551615 0 0 0 0 0 0 0 2147483647 0 1 0 0 0 1 0 0 0 0 0 0 0 0 0 0 0 0 0"
    st = procfs.parse_stat(kthread)
    assert st is not None
    assert (st.comm, st.ppid, st.rss_pages, st.starttime) == ("kthreadd", 0, 0, 14)
    zombie = procfs.parse_stat(stat_line(9, "sleep", state="Z", rss=0).encode())
    assert zombie is not None and zombie.state == "Z"


@pytest.mark.parametrize("data", [b"", b"12 (x", b"12 (x) S 1 2", b"abc (x) " + b"1 " * 30,
                                  b"12 x) S", b"\xff\xfe"])
def test_bad_stat_is_none(data: bytes):
    assert procfs.parse_stat(data) is None


def test_non_utf8_comm_is_replaced():
    st = procfs.parse_stat(stat_line(5, "x").replace("(x)", "(\udcff)", 1).encode(
        "utf-8", "surrogateescape"))
    assert st is not None and st.comm == "\ufffd"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", ()),
        (b"python\0train.py\0--lr\0\0\0", ("python", "train.py", "--lr", "", "")),
        (b"python\0-c\0import a; b()\0", ("python", "-c", "import a; b()")),
        (b"nginx: worker process", ("nginx:", "worker", "process")),
    ],
)
def test_cmdline(data: bytes, expected: tuple[str, ...]):
    assert procfs.parse_cmdline(data) == expected


def test_meminfo_and_fallback_without_memavailable():
    text = "MemTotal: 1000 kB\nMemFree: 100 kB\nMemAvailable: 600 kB\nSwapTotal: 50 kB\n" \
           "SwapFree: 20 kB\nHugePages_Total: 0\n"
    assert procfs.parse_meminfo(text) == procfs.MemInfo(1024000, 614400, 51200, 20480)
    old = "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 10 kB\nSwapCached: 7 kB\nCached: 200 kB\n"
    assert procfs.parse_meminfo(old) == procfs.MemInfo(1024000, 310 * 1024, 0, 0)
    assert procfs.parse_meminfo("garbage") is None


def test_loadavg_and_uptime():
    assert procfs.parse_loadavg("0.22 0.26 0.13 2/83 3444\n") == ((0.22, 0.26, 0.13), 3444)
    assert procfs.parse_loadavg("") == ((0.0, 0.0, 0.0), None)
    assert procfs.parse_uptime("598.34 1100.2\n") == 598.34
    assert procfs.parse_uptime("") is None


def test_display_name_uses_argv0_when_comm_is_cut():
    assert display_name("gputop-benchmar", ("/x/gputop-benchmark", "-q")) == "gputop-benchmark"
    assert display_name("python", ("/usr/bin/python3",)) == "python"
    assert display_name("pt_data_worker", ("python",)) == "pt_data_worker"


def test_gpu_usage_sums_devices():
    def dev(i: int, *procs: GpuProcess) -> GpuSample:
        return GpuSample(i, "g", f"u{i}", None, None, None, None, None, None, None, None, None,
                         None, None, processes=procs)

    report = GpuReport("simulated", (dev(0, GpuProcess(7, 100), GpuProcess(8, None)),
                                     dev(1, GpuProcess(7, 50))))
    assert gpu_usage(report) == {7: (150, (0, 1)), 8: (None, (0,))}


GPU_NONE = GpuReport("none")
_DERIVATIONS: weakref.WeakKeyDictionary[ProcProcessSource, Derivation] = (
    weakref.WeakKeyDictionary())


def _sample(
    source: ProcProcessSource, gpu: GpuReport = GPU_NONE, probe: frozenset[int] = frozenset()
) -> tuple[tuple[ProcessSample, ...], tuple[TrainerGroup, ...]]:
    """The source's scan with roles derived, as the sampler does each tick."""
    derivation = _DERIVATIONS.setdefault(source, Derivation())
    return derivation.processes(source.sample(gpu), probe, source)


def test_source_on_fixture_tree(tmp_path: Path):
    proc = FakeProc(tmp_path)
    proc.add(10, "python", "python train.py", ut=100, st=0, thr=9, start=50, rss=3)
    proc.add(11, "pt_data_worker", "python train.py", ppid=10, ut=10, start=60)
    proc.add(12, "sh", "sh", state="Z", rss=0)
    source = ProcProcessSource(str(tmp_path), max_fds=0)
    rows, trainers = _sample(source)
    by = {r.pid: r for r in rows}
    assert by[10].cpu_percent is None  # first sample: no interval yet
    assert (by[10].num_threads, by[10].rss_bytes, by[10].cmdline) == (
        9, 3 * procfs.PAGE_SIZE, ("python", "train.py"))
    assert by[10].cpu_time_s == pytest.approx(100 / procfs.CLOCK_TICKS)
    assert by[12].state == "Z"
    assert (by[11].role, by[11].trainer_pid, by[10].role) == ("worker", 10, "trainer")
    assert [(t.pid, t.worker_pids) for t in trainers] == [(10, (11,))]
    assert by[10].username == by[11].username is not None

    proc.add(10, "python", "python train.py", ut=100 + procfs.CLOCK_TICKS, thr=9, start=50)
    rows, _ = _sample(source, probe=frozenset({10}))
    by = {r.pid: r for r in rows}
    assert by[10].cpu_percent is not None and by[10].cpu_percent > 0
    assert by[11].cpu_percent == 0.0
    assert by[10].has_probe and not by[11].has_probe


def test_exec_rereads_cmdline_and_reused_pid_is_a_new_process(tmp_path: Path):
    proc = FakeProc(tmp_path)
    proc.add(20, "bash", "bash -c x", start=10)
    source = ProcProcessSource(str(tmp_path), max_fds=0)
    _sample(source)
    proc.add(20, "python", "python -m thing", start=10)  # exec: same pid and start, new comm
    (row,) = _sample(source)[0]
    assert (row.name, row.cmdline) == ("python", ("python", "-m", "thing"))
    proc.add(20, "sleep", "sleep 5", start=99, ut=3)  # pid reused by another process
    (row,) = _sample(source)[0]
    assert (row.name, row.start_ticks, row.cmdline) == ("sleep", 99, ("sleep", "5"))


def test_listing_skipped_until_a_pid_is_allocated(tmp_path: Path):
    proc = FakeProc(tmp_path)
    proc.add(30, "a")
    source = ProcProcessSource(str(tmp_path), max_fds=0)
    _sample(source)
    (tmp_path / "31").mkdir()
    (tmp_path / "31/stat").write_text(stat_line(31, "b"))
    assert [r.pid for r in _sample(source)[0]] == [30]
    proc.last_pid = 31
    proc.bump()
    assert [r.pid for r in _sample(source)[0]] == [30, 31]
    proc.remove(30)  # vanishing needs no listing: its read fails
    assert [r.pid for r in _sample(source)[0]] == [31]
    assert source.listings == 1  # nor does a birth: only PIDs past the last one can be new


def test_foreign_gpu_pid_kept_and_unreadable_files_skipped(tmp_path: Path):
    proc = FakeProc(tmp_path)
    proc.add(40, "python", "python t.py")
    (tmp_path / "41").mkdir()  # a dir with no stat: vanished mid-scan
    (tmp_path / "42").mkdir()
    (tmp_path / "42/stat").write_text("garbage")
    gpu = GpuReport("simulated", (GpuSample(0, "g", "u", None, None, None, None, None, None,
                                            None, None, None, None, None,
                                            processes=(GpuProcess(40, 5), GpuProcess(99, 7))),))
    rows, trainers = _sample(ProcProcessSource(str(tmp_path)), gpu)
    by = {r.pid: r for r in rows}
    assert sorted(by) == [40, 99]
    assert by[40].role == "trainer" and by[40].gpu_memory_bytes == 5
    assert (by[99].in_proc, by[99].state, by[99].gpu_memory_bytes) == (False, FOREIGN_STATE, 7)
    assert [t.pid for t in trainers] == [40]


def test_stat_reader_caps_fds_and_falls_back(tmp_path: Path):
    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(4)]
    try:
        reader = procfs.StatReader(max_fds=2)
        data = [reader.read(p.pid) for p in sleepers]
        assert all(d is not None and d.startswith(f"{p.pid} (sleep)".encode())
                   for d, p in zip(data, sleepers, strict=True))
        assert reader.open_fds == 2
        assert reader.read(sleepers[3].pid) is not None  # beyond the cap: open/read/close
        sleepers[0].kill()
        sleepers[0].wait()
        assert reader.read(sleepers[0].pid) is None
        assert reader.open_fds == 1
        reader.close()
        assert reader.open_fds == 0
    finally:
        for p in sleepers:
            p.kill()
            p.wait()


def _proc_stat_fds() -> set[str]:
    """Targets of this process's fds that are some /proc/PID/stat."""
    found = set()
    for target in open_fd_targets():
        parts = target.split("/")
        if len(parts) == 4 and parts[1] == "proc" and parts[2].isdigit() and parts[3] == "stat":
            found.add(target)
    return found


def test_real_proc_zombie_vanish_and_fds_closed():
    source = ProcProcessSource()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    zombie = subprocess.Popen(["true"])
    try:
        _sample(source)
        rows = {r.pid: r for r in _sample(source)[0]}
        assert rows[os.getpid()].cmdline == tuple(sys.orig_argv)  # pytest, or an xdist worker
        assert rows[child.pid].ppid == os.getpid() and rows[child.pid].state in "SR"
        assert f"/proc/{child.pid}/stat" in _proc_stat_fds()
        while zombie.pid not in rows or rows[zombie.pid].state != "Z":
            rows = {r.pid: r for r in _sample(source)[0]}
        kthreads = [r for r in rows.values() if r.ppid == 2 or r.pid == 2]
        assert all(r.cmdline == () and r.rss_bytes == 0 for r in kthreads)
        child.kill()
        child.wait()
        zombie.wait()
        rows = {r.pid: r for r in _sample(source)[0]}
        assert child.pid not in rows and zombie.pid not in rows
        assert f"/proc/{child.pid}/stat" not in _proc_stat_fds()
        assert source.open_fds > 0
    finally:
        child.kill()
        child.wait()
        source.close()
    assert source.open_fds == 0
    assert _proc_stat_fds() == set()


def test_schedstat_gate_skips_quiet_processes_but_not_runs(tmp_path: Path):
    proc = FakeProc(tmp_path)
    (tmp_path / "self").mkdir()
    (tmp_path / "self/schedstat").write_text("5000 0 1\n")

    def put(pid: int, runtime: int, ppid: int, rss: int, ut: int = 0) -> None:
        proc.add(pid, "sleep", "sleep 9", ppid=ppid, rss=rss, ut=ut)
        (tmp_path / str(pid) / "schedstat").write_text(f"{runtime} 0 1\n")

    put(8, 10, ppid=7, rss=1)
    put(9, 10, ppid=8, rss=1)
    source = ProcProcessSource(str(tmp_path), max_fds=0)
    for _ in range(2):
        _sample(source)
    put(9, 10, ppid=8, rss=5, ut=3)  # stat moved but the process did not run: gated out
    rows = {r.pid: r for r in _sample(source)[0]}
    assert (rows[9].rss_bytes, rows[9].cpu_percent) == (procfs.PAGE_SIZE, 0.0)
    put(9, 11, ppid=8, rss=5, ut=3)  # it ran: stat is read again
    rows = {r.pid: r for r in _sample(source)[0]}
    assert rows[9].rss_bytes == 5 * procfs.PAGE_SIZE and rows[9].cpu_percent
    proc.remove(8)
    put(9, 11, ppid=1, rss=5, ut=3)  # re-parented while asleep, after its parent vanished
    rows = {r.pid: r for r in _sample(source)[0]}
    assert list(rows) == [9]
    rows = {r.pid: r for r in _sample(source)[0]}
    assert rows[9].ppid == 1


def test_real_single_threaded_busy_process_is_seen_running():
    busy = subprocess.Popen([sys.executable, "-S", "-c", "while True: pass"])
    idle = subprocess.Popen(["sleep", "60"])
    source = ProcProcessSource()
    assert procfs.schedstat_counts()  # so the quiet-process gate is on for this test
    try:
        seen: list[float | None] = []
        for _ in range(200):
            rows = {r.pid: r for r in _sample(source)[0]}
            seen.append(rows[busy.pid].cpu_percent)
            if len(seen) > 3 and (seen[-1] or 0.0) > 0.0:
                break
            time.sleep(0.05)
        assert (seen[-1] or 0.0) > 0.0
        assert rows[idle.pid].cpu_percent == 0.0
    finally:
        for p in (busy, idle):
            p.kill()
            p.wait()
        source.close()


@pytest.mark.slow
def test_real_new_thread_is_not_a_process_and_a_new_child_is():
    import threading

    source = ProcProcessSource()
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    child = None
    try:
        _sample(source)
        thread.start()  # its TID is past the last PID seen, as is the child's
        child = subprocess.Popen(["sleep", "60"])
        rows = {r.pid for r in _sample(source)[0]}
        assert child.pid in rows
        assert thread.native_id not in rows
    finally:
        stop.set()
        thread.join(timeout=10)
        if child is not None:
            child.kill()
            child.wait(timeout=10)
        source.close()


def _proc_files(name: str) -> set[str]:
    """Targets of this process's fds that are some /proc/PID/`name`."""
    return {target for target in open_fd_targets()
            if (parts := target.split("/"))[1:2] == ["proc"] and parts[-1] == name}


def test_a_process_cpu_clock_counts_its_run_time_and_ends_with_it():
    busy = subprocess.Popen([sys.executable, "-S", "-c", "while True: pass"])
    idle = subprocess.Popen(["sleep", "60"])
    try:
        assert procfs.cpu_clocks_answer("/proc")
        time.sleep(0.3)
        ran = [time.clock_gettime_ns(procfs.cpu_clock_id(p.pid)) for p in (busy, idle)]
        time.sleep(0.3)
        now = [time.clock_gettime_ns(procfs.cpu_clock_id(p.pid)) for p in (busy, idle)]
        assert now[0] - ran[0] > 10_000_000 and now[1] == ran[1]
        with open(f"/proc/{busy.pid}/schedstat") as f:  # the same run time schedstat shows
            assert abs(int(f.read().split()[0]) - now[0]) < 1_000_000_000
    finally:
        for p in (busy, idle):
            p.kill()
            p.wait()
    with pytest.raises(OSError):  # reaped: the clock answers for no process
        time.clock_gettime_ns(procfs.cpu_clock_id(busy.pid))


def test_a_folder_is_not_this_processes_proc_so_its_clocks_are_not_asked(tmp_path: Path):
    FakeProc(tmp_path)
    (tmp_path / "self").mkdir()
    assert not procfs.cpu_clocks_answer(str(tmp_path))


def _sample_until(source: ProcProcessSource, pid: int, done: Callable[[ProcessSample], bool],
                  tries: int, gap_s: float) -> list[ProcessSample]:
    """Process `pid`'s row each tick, a tick every `gap_s`, until `done` says so or `tries`
    ticks have passed."""
    seen: list[ProcessSample] = []
    for _ in range(tries):
        time.sleep(gap_s)
        seen.append({r.pid: r for r in _sample(source)[0]}[pid])
        if done(seen[-1]):
            break
    return seen


def _running(row: ProcessSample) -> bool:
    return (row.cpu_percent or 0.0) > 0.0


def test_real_quiet_processes_are_gated_by_their_clocks_with_no_file_kept():
    """Whether a quiet process ran is its CPU clock: no schedstat fd is kept for each of the
    machine's ordinary processes (one per process before), and one that starts running is
    seen."""
    waker = subprocess.Popen(
        [sys.executable, "-S", "-c", "import sys\nsys.stdin.readline()\nwhile True: pass"],
        stdin=subprocess.PIPE)
    source = ProcProcessSource()
    try:
        quiet = _sample_until(source, waker.pid, lambda row: row.cpu_percent == 0.0,
                              20 * QUIET_TICKS, 0.02)  # started, and waiting for its line
        assert quiet[-1].cpu_percent == 0.0, [row.cpu_percent for row in quiet]
        for _ in range(QUIET_TICKS + 3):  # past the ticks a new process's stat is read in
            rows = {r.pid: r for r in _sample(source)[0]}
            time.sleep(0.02)
        ordinary = {f"/proc/{pid}/schedstat" for pid, row in rows.items() if row.role == "other"}
        assert not ordinary & _proc_files("schedstat")  # (a trainer's waits keep theirs)
        assert waker.stdin is not None
        waker.stdin.write(b"go\n")
        waker.stdin.flush()
        seen = _sample_until(source, waker.pid, _running, 2 * REFRESH_TICKS, 0.05)
        assert _running(seen[-1]), seen
    finally:
        waker.kill()
        waker.wait()
        source.close()


def test_real_quiet_threaded_process_is_gated_and_seen_when_it_runs_or_adds_a_thread():
    """A process's clock sums its threads, so a quiet multi-threaded one (most daemons) is
    gated as a single-threaded one is: its stat is not read every tick (it was), and one
    that starts a thread or runs is seen."""
    code = ("import sys, threading, time\n"
            "def nap(): time.sleep(600)\n"
            "threading.Thread(target=nap, daemon=True).start()\n"
            "sys.stdin.readline()\n"
            "threading.Thread(target=nap, daemon=True).start()\n"
            "sys.stdin.readline()\n"
            "while True: pass\n")
    child = subprocess.Popen([sys.executable, "-S", "-c", code], stdin=subprocess.PIPE)
    source = ProcProcessSource()
    reads: list[int] = []
    real_read = source._reader.read

    def counted(pid: int) -> bytes | None:
        reads.append(pid)
        return real_read(pid)

    source._reader.read = counted  # type: ignore[method-assign]
    try:
        assert child.stdin is not None
        started = _sample_until(source, child.pid, lambda row: row.num_threads == 2 and (
            row.cpu_percent == 0.0), 20 * QUIET_TICKS, 0.02)  # its thread started, both wait
        assert started[-1].num_threads == 2, [row.num_threads for row in started]
        for _ in range(QUIET_TICKS + 4):
            _sample(source)
            time.sleep(0.02)
        reads.clear()
        for _ in range(REFRESH_TICKS):
            _sample(source)
        assert reads.count(child.pid) <= 1  # its refresh at most: it did not run
        child.stdin.write(b"thread\n")
        child.stdin.flush()
        seen = _sample_until(source, child.pid, lambda row: row.num_threads == 3,
                             4 * REFRESH_TICKS, 0.02)
        assert seen[-1].num_threads == 3, [row.num_threads for row in seen]
        child.stdin.write(b"spin\n")
        child.stdin.flush()
        seen = _sample_until(source, child.pid, _running, 4 * REFRESH_TICKS, 0.05)
        assert _running(seen[-1]), [row.cpu_percent for row in seen]
    finally:
        child.kill()
        child.wait()
        source.close()
