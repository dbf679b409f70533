"""Issue 39: the sampler's watch over NVML PIDs /proc does not show reads the device nodes'
holders (a readlink per open fd of every process) only when those PIDs change or every
RECHECK_S, never while every NVML PID is one of ours. The /proc it reads is a folder of real
fd links made here; NVML's answer is given as data."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from gputop.core.model import GpuReport
from gputop.frames.foreign import ForeignWatch
from tests.helpers.builders import gpu, process

RECHECK_S = 10.0
HOST_PID = 4_000_000


def hold(proc: Path, pid: int, node: int = 0) -> None:
    """Process `pid` of `proc` holding /dev/nvidia`node` open as its fd 3."""
    fds = proc / str(pid) / "fd"
    fds.mkdir(parents=True, exist_ok=True)
    os.symlink(f"/dev/nvidia{node}", fds / "3")


def release(proc: Path, pid: int) -> None:
    (proc / str(pid) / "fd" / "3").unlink()


def report(*host_pids: int) -> GpuReport:
    """One GPU, /dev/nvidia0 by NVML's minor number, with `host_pids` on it."""
    return GpuReport("nvml", (replace(gpu(0, pids=tuple((p, 1.0) for p in host_pids)),
                                      minor_number=0),))


def test_holders_are_read_again_only_when_the_pids_change_or_the_time_is_up(
    tmp_path: Path,
) -> None:
    proc = tmp_path / "proc"
    rows = [process(10), process(11)]
    watch = ForeignWatch(dev=str(tmp_path / "dev"), proc_root=str(proc), recheck_s=RECHECK_S)
    hold(proc, 10)
    (first,) = watch.found(report(HOST_PID), rows, None, now=0.0)
    assert (first.host_pid, first.pid) == (HOST_PID, 10)
    release(proc, 10)
    hold(proc, 11)
    # the same foreign PID within RECHECK_S: the last answer, not read again
    (kept,) = watch.found(report(HOST_PID), rows, None, now=RECHECK_S / 2)
    assert kept.pid == 10
    (later,) = watch.found(report(HOST_PID), rows, None, now=RECHECK_S)
    assert later.pid == 11
    # another foreign PID: read at once (two compute processes: nothing proven)
    both = watch.found(report(HOST_PID, HOST_PID + 1), rows, None, now=RECHECK_S + 1)
    assert [(f.host_pid, f.pid) for f in both] == [(HOST_PID, None), (HOST_PID + 1, None)]


def test_a_row_marked_not_in_proc_is_foreign_and_a_visible_one_is_not(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    hold(proc, 10)
    watch = ForeignWatch(dev=str(tmp_path / "dev"), proc_root=str(proc))
    assert watch.found(report(10), [process(10)], {10: 0}, now=0.0) == ()
    # the process source's row for an NVML PID without a /proc entry is not one of ours
    foreign = replace(process(HOST_PID), in_proc=False)
    (found,) = watch.found(report(HOST_PID), [process(10), foreign], None, now=0.0)
    assert (found.host_pid, found.pid) == (HOST_PID, 10)
