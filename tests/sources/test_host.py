"""Host source: /proc/stat deltas, meminfo, load and uptime, on fixture trees and the real /proc."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pytest

from gputop.sources import procfs
from gputop.sources.host import ProcHostSource
from gputop.sources.membw import MemoryBandwidthMonitor
from tests.helpers.fakeproc import IN_OPEN, ReadWatch

STAT = """cpu  {u} 0 {s} {i} {w} 0 0 0 {g} 0
cpu0 {u0} 0 0 {i0} 0 0 0 0 0 0
cpu1 {u1} 0 0 {i1} 0 0 0 0 0 0
intr 1 2 3
ctxt 99
"""
MEMINFO = "MemTotal: 1000 kB\nMemFree: 100 kB\nMemAvailable: 600 kB\nSwapTotal: 400 kB\n" \
          "SwapFree: 100 kB\n"


def write_tree(root: Path, **stat: int) -> None:
    (root / "stat").write_text(STAT.format(**stat))
    (root / "meminfo").write_text(MEMINFO)
    (root / "loadavg").write_text("1.50 0.75 0.25 3/400 12345\n")
    (root / "uptime").write_text("3600.5 7000.0\n")


def test_cpu_percent_from_deltas(tmp_path: Path):
    write_tree(tmp_path, u=100, s=100, i=800, w=0, g=50, u0=100, i0=400, u1=100, i1=400)
    host = ProcHostSource(str(tmp_path))
    first = host.sample()
    assert first.cpu_percent is None and first.per_cpu_percent == ()
    # +60 user +20 system +100 idle +20 iowait: 80 busy of 200 ticks; guest is inside user.
    write_tree(tmp_path, u=160, s=120, i=900, w=20, g=90, u0=200, i0=400, u1=100, i1=500)
    second = host.sample()
    assert second.cpu_percent == pytest.approx(40.0)
    assert second.per_cpu_percent == pytest.approx((100.0, 0.0))
    assert second.memory_total_bytes == 1000 * 1024
    assert second.memory_available_bytes == 600 * 1024
    assert (second.swap_total_bytes, second.swap_used_bytes) == (400 * 1024, 300 * 1024)
    assert second.load_average == (1.5, 0.75, 0.25)
    assert second.uptime_s == 3600.5


def test_no_tick_and_hotplugged_cpus(tmp_path: Path):
    write_tree(tmp_path, u=1, s=1, i=1, w=0, g=0, u0=1, i0=1, u1=1, i1=1)
    host = ProcHostSource(str(tmp_path))
    host.sample()
    assert host.sample().cpu_percent == 0.0
    (tmp_path / "stat").write_text("cpu  2 0 1 1 0 0 0 0 0 0\ncpu0 2 0 0 1 0 0 0 0 0 0\n")
    sample = host.sample()
    assert sample.per_cpu_percent == ()  # a CPU went offline: no pairing, no made-up numbers
    assert sample.cpu_percent == pytest.approx(100.0)


def test_missing_files_never_raise(tmp_path: Path):
    sample = ProcHostSource(str(tmp_path)).sample()
    assert sample.cpu_percent is None
    assert sample.memory_total_bytes == 0 and sample.load_average == (0.0, 0.0, 0.0)


def test_cpu_lines_parse():
    total, per = procfs.parse_cpu_lines("cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 5 0 5 40 0\nbogus\n")
    assert total == procfs.CpuTimes(busy=20, total=100)
    assert per == (procfs.CpuTimes(busy=10, total=50),)


def test_real_host():
    host = ProcHostSource()
    host.sample()
    sample = host.sample()
    assert sample.cpu_count == os.cpu_count()
    assert sample.cpu_percent is not None and 0.0 <= sample.cpu_percent <= 100.0
    assert 1 <= len(sample.per_cpu_percent) <= sample.cpu_count
    assert all(0.0 <= p <= 100.0 for p in sample.per_cpu_percent)
    assert 0 < sample.memory_available_bytes <= sample.memory_total_bytes
    assert 0 <= sample.swap_used_bytes <= sample.swap_total_bytes
    assert sample.uptime_s > 0 and sample.hostname


def test_each_tick_reads_the_host_files_through_fds_kept_open(tmp_path: Path):
    """A tick of the host and memory-pressure sources costs one read of each file: no open
    (counted by the kernel), where reading a file afresh took open, fstat, reads and close."""
    write_tree(tmp_path, u=1, s=1, i=1, w=0, g=0, u0=1, i0=1, u1=1, i1=1)
    (tmp_path / "vmstat").write_text("nr_free_pages 5\npswpin 7\npgmajfault 9\n")
    (tmp_path / "pressure").mkdir()
    (tmp_path / "pressure/memory").write_text("some avg10=1.00 avg60=0 avg300=0 total=1\n"
                                              "full avg10=0.50 avg60=0 avg300=0 total=1\n")
    host = ProcHostSource(str(tmp_path))
    membw = MemoryBandwidthMonitor(None, None, tmp_path, None)
    opens = ReadWatch({"proc": tmp_path, "pressure": tmp_path / "pressure"}, mask=IN_OPEN)
    reads = ReadWatch({"proc": tmp_path, "pressure": tmp_path / "pressure"})
    try:
        host.sample()
        membw.sample()
        assert len(opens.take()) == 6
        reads.take()
        for _ in range(3):
            sample, pressure = host.sample(), membw.sample()
            assert opens.take() == set()
            assert reads.take() == {("proc", name) for name in (
                "stat", "meminfo", "loadavg", "uptime", "vmstat")} | {("pressure", "memory")}
        assert sample.memory_available_bytes == 600 * 1024 and sample.uptime_s == 3600.5
        assert (pressure.psi_some_avg10, pressure.psi_full_avg10) == (1.0, 0.5)
    finally:
        opens.close()
        reads.close()


def test_each_cpu_line_is_summed_once(monkeypatch: pytest.MonkeyPatch):
    """A line's ticks are added up once (busy is the total less idle and iowait): on a
    many-core host this parse is most of the host source's tick."""
    import builtins

    sums: list[int] = []

    def counting_sum(ticks: Iterable[int]) -> int:
        sums.append(1)
        return builtins.sum(ticks)

    monkeypatch.setattr(procfs, "sum", counting_sum, raising=False)
    total, per = procfs.parse_cpu_lines(STAT.format(u=7, s=3, i=80, w=10, g=2, u0=4, i0=40,
                                                    u1=3, i1=40))
    assert (total, per) == (procfs.CpuTimes(10, 100),
                            (procfs.CpuTimes(4, 44), procfs.CpuTimes(3, 43)))
    assert len(sums) == 3
