"""Paging advice only from the trainer's own major faults (issue 38).

A real major-fault storm: a process maps a file on storage, drops its pages from its page
table and from the page cache, and touches every page again, readahead off, so each touch
is a major fault (/proc/PID/stat majflt). The real process source measures each process's
own rate; the host's pgmajfault (/proc/vmstat) is measured over the same interval. The
storm from a process that is not the trainer's must not give paging advice, however high
the host's count; the same storm in the trainer's worker must, quoting the trainer's own
rate and the worker; and a host without swap never reads the word swap.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from gputop.advice import evaluate
from gputop.advice.context import Context
from gputop.advice.host_rules import MAJOR_FAULTS_PER_S
from gputop.core.model import Advice, Frame, GpuReport, MemoryBandwidthSample, TrainerGroup
from gputop.sources import procfs
from gputop.sources.membw.estimate import parse_vmstat
from gputop.sources.processes import ProcProcessSource
from tests.helpers.builders import frame, process

pytestmark = pytest.mark.alone  # it loads the host's storage for a second

NONE = GpuReport("none")
FILE_BYTES = 8 << 20
STORM = """
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
m = mmap.mmap(fd, size, prot=mmap.PROT_READ)
m.madvise(mmap.MADV_RANDOM)  # no readahead: every page its own fault
print("ready", flush=True)
while True:
    m.madvise(mmap.MADV_DONTNEED)  # out of this process's page table
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # and out of the page cache
    for at in range(0, size, mmap.PAGESIZE):
        m[at]
"""


@contextmanager
def fault_storm(tmp_path: Path) -> Iterator[int]:
    """A process taking major faults as fast as storage serves them; its PID."""
    kind = subprocess.run(["stat", "-f", "-c", "%T", str(tmp_path)], capture_output=True,
                          text=True, timeout=30, check=True).stdout.strip()
    if kind in ("tmpfs", "ramfs"):
        pytest.skip(f"{tmp_path} is on {kind}: its pages are never read back from storage")
    path = tmp_path / "pages.bin"
    path.write_bytes(os.urandom(FILE_BYTES))
    child = subprocess.Popen([sys.executable, "-c", STORM, str(path)], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        yield child.pid
    finally:
        child.kill()
        child.wait(timeout=30)


def _majflt(pid: int) -> int:
    found = procfs.parse_majflt(Path(f"/proc/{pid}/stat").read_bytes())
    assert found is not None
    return found


def _host_faults() -> int:
    return parse_vmstat(Path("/proc/vmstat").read_text())["pgmajfault"]


def measured(pids: list[int]) -> tuple[dict[int, float], float]:
    """Each PID's own major faults/s as gputop's process source reads them, and the host's
    over the same interval."""
    source = ProcProcessSource()
    try:
        source.sample(NONE)
        source.waits(pids)
        host_at, at = _host_faults(), time.monotonic()
        time.sleep(0.5)
        source.sample(NONE)
        waits = source.waits(pids)
        host = (_host_faults() - host_at) / (time.monotonic() - at)
    finally:
        source.close()
    rates = {pid: waits[pid].major_faults_per_s for pid in pids}
    assert None not in rates.values(), rates
    return {pid: rate or 0.0 for pid, rate in rates.items()}, host


def swapless(f: Frame) -> Frame:
    """`f` on a host with this one's memory and no swap (skipped where this host has swap)."""
    mem = procfs.parse_meminfo(Path("/proc/meminfo").read_text())
    assert mem is not None
    if mem.swap_total:
        pytest.skip("this host has swap")
    return replace(f, host=replace(f.host, swap_total_bytes=0, swap_used_bytes=0,
                                   memory_total_bytes=mem.total,
                                   memory_available_bytes=mem.available))


def paging_advice(f: Frame) -> list[Advice]:
    return [a for a in evaluate(Context(f, {})) if a.id == "swap"]


def test_the_storm_is_real_major_faults(tmp_path: Path) -> None:
    with fault_storm(tmp_path) as pid:
        before = _majflt(pid)
        time.sleep(0.3)
        assert _majflt(pid) - before >= MAJOR_FAULTS_PER_S * 0.3


def test_another_process_paging_gives_no_advice(tmp_path: Path) -> None:
    trainer = os.getpid()
    with fault_storm(tmp_path) as other:
        rates, host = measured([trainer, other])
    assert rates[other] >= MAJOR_FAULTS_PER_S and host >= MAJOR_FAULTS_PER_S, (rates, host)
    rows = [replace(process(trainer, role="trainer"), major_faults_per_s=rates[trainer]),
            replace(process(other), major_faults_per_s=rates[other])]
    group = TrainerGroup(pid=trainer, worker_pids=(), workers_cpu_percent=0.0,
                         num_threads_total=4, pin_memory_thread=False)
    m = MemoryBandwidthSample(source="estimate", confidence="estimated", swap_in_per_s=0.0,
                              major_faults_per_s=host)
    f = swapless(frame(processes=rows, trainers=(group,), membw=m))
    print(f"\nother process {other}: {rates[other]:.0f} major faults/s, trainer "
          f"{rates[trainer]:.0f}/s, host {host:.0f}/s")
    assert paging_advice(f) == []


def test_the_trainers_worker_paging_is_named_with_its_own_rate(tmp_path: Path) -> None:
    trainer = os.getpid()
    with fault_storm(tmp_path) as worker:
        rates, host = measured([trainer, worker])
    assert rates[worker] >= MAJOR_FAULTS_PER_S, rates
    rows = [replace(process(trainer, role="trainer"), major_faults_per_s=rates[trainer]),
            replace(process(worker, ppid=trainer, role="worker", trainer_pid=trainer),
                    major_faults_per_s=rates[worker])]
    group = TrainerGroup(pid=trainer, worker_pids=(worker,), workers_cpu_percent=0.0,
                         num_threads_total=8, pin_memory_thread=False)
    m = MemoryBandwidthSample(source="estimate", confidence="estimated", swap_in_per_s=0.0,
                              major_faults_per_s=host)
    f = swapless(frame(processes=rows, trainers=(group,), membw=m))
    [found] = paging_advice(f)
    print(f"\n{found.title}: {found.evidence}")
    assert "swap" not in f"{found.title} {found.evidence} {found.action}".lower()  # no swap here
    own = rates[trainer] + rates[worker]
    assert found.trainer_pid == trainer
    assert f"take {own:.0f} major page faults/s" in found.evidence
    assert f"worker {worker} {rates[worker]:.0f}/s" in found.evidence
    assert found.title == "Training memory is being paged in from disk"
