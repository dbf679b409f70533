"""Helpers for the memory-bandwidth tests: small /sys and /proc trees written per test."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.sources.membw.dimm_slots import MemoryLayout
from tests.helpers.scheduling import favoured


def source_of(layout: MemoryLayout | None) -> str:
    """Where a layout that must have been found was read from (MemoryLayout.source)."""
    assert layout is not None, "no layout found"
    return layout.source


def sys_with_llc(root: Path, size: str | None) -> Path:
    """A /sys tree whose cpu0 has a level-3 unified cache of `size` (none when None)."""
    if size is not None:
        index = root / "devices/system/cpu/cpu0/cache/index3"
        index.mkdir(parents=True)
        (index / "level").write_text("3\n")
        (index / "type").write_text("Unified\n")
        (index / "size").write_text(f"{size}\n")
    else:
        root.mkdir(parents=True)
    return root


def cpu_ns(pid: int) -> int:
    """Nanoseconds on CPU so far, summed over the process's threads (schedstat)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int((task / "schedstat").read_text().split()[0])
    return total


def hog_cpus(first_for: str) -> list[int]:
    """This process's CPUs, the first for `first_for` and the second for a sysbench memory
    hog; skips where sysbench or a second CPU is missing."""
    if shutil.which("sysbench") is None:
        pytest.skip("sysbench not installed (apt-get install -y sysbench)")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip(f"needs two CPUs: one for {first_for}, one for the hog")
    return cpus


@contextlib.contextmanager
def sysbench_hog(block_size: str, cpu: int | None = None, seconds: int = 60) -> Iterator[int]:
    """`sysbench memory` (1 thread, `block_size` blocks, for at most `seconds`), favoured and
    pinned to `cpu` when given, streaming before this yields its pid (0.2 s of its CPU
    spent: past allocation)."""
    proc = subprocess.Popen(
        ["sysbench", "memory", "--threads=1", f"--memory-block-size={block_size}",
         "--memory-total-size=1000T", f"--time={seconds}", "run"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        # Before exec: sysbench's worker thread inherits the weight and the pinning.
        preexec_fn=favoured(None if cpu is None else {cpu}),
    )
    try:
        deadline = time.monotonic() + 10
        while cpu_ns(proc.pid) < 200_000_000:
            assert proc.poll() is None, "sysbench exited early"
            assert time.monotonic() < deadline, "sysbench never got CPU time"
            time.sleep(0.02)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(timeout=10)


def proc_tree(
    root: Path,
    paranoid: int | None = 2,
    cap_eff: int = 0,
    vendor: str = "GenuineIntel",
    processes: dict[int, tuple[str, tuple[int, ...], int]] | None = None,
) -> Path:
    """A /proc tree: perf_event_paranoid, this process's CapEff, cpuinfo's vendor, and
    `processes` as pid -> (comm, thread ids, CPU ticks used)."""
    (root / "self").mkdir(parents=True)
    (root / "self/status").write_text(f"Name:\tpython\nCapEff:\t{cap_eff:016x}\n")
    (root / "cpuinfo").write_text(f"processor\t: 0\nvendor_id\t: {vendor}\n"
                                  "cpu family\t: 6\nmodel\t\t: 143\n\n")
    if paranoid is not None:
        (root / "sys/kernel").mkdir(parents=True)
        (root / "sys/kernel/perf_event_paranoid").write_text(f"{paranoid}\n")
    for pid, (comm, tids, ticks) in (processes or {}).items():
        for tid in tids:
            (root / str(pid) / "task" / str(tid)).mkdir(parents=True)
        (root / str(pid) / "comm").write_text(comm + "\n")
        fields = ["S", "1", *["0"] * 9, str(ticks), "0", *["0"] * 6]
        (root / str(pid) / "stat").write_text(f"{pid} ({comm}) {' '.join(fields)}\n")
    return root


def sys_with_core_pmu(root: Path, cpus: str = "0-1", pmu: str | None = "cpu") -> Path:
    """A /sys tree with a core PMU named `pmu` (none when None) and `cpus` online."""
    devices = root / "bus/event_source/devices"
    devices.mkdir(parents=True)
    (devices / "software").mkdir()
    if pmu is not None:
        (devices / pmu).mkdir()
        (devices / pmu / "type").write_text("4\n")
    (root / "devices/system/cpu").mkdir(parents=True)
    (root / "devices/system/cpu/online").write_text(cpus + "\n")
    return root


def write_vmstat(root: Path, pswpin: int, pgmajfault: int) -> None:
    """A /proc/vmstat in `root` with these swap-in and major-fault counters, rewritten in
    place: the kernel's is one file whose contents change, which gputop reads through an fd
    it keeps open."""
    text = f"nr_free_pages 1000\npswpin {pswpin}\npswpout 0\npgmajfault {pgmajfault}\n"
    (root / "vmstat").write_text(text)
