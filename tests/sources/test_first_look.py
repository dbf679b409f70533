"""The live view's first look, taken before gputop loads, serves the host and process sources
as their previous tick: counted by the kernel (inotify) on a /proc tree in a folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputop.core.model import GpuReport
from gputop.sources import first_sample as first_sample
from gputop.sources.host import ProcHostSource
from gputop.sources.processes import ProcProcessSource
from tests.helpers.fakeproc import IN_OPEN, FakeProc, ReadWatch
from tests.sources.test_host import write_tree

BUSY, QUIET = 100, 101


def test_a_first_look_is_the_process_sources_previous_tick(tmp_path: Path) -> None:
    """Rows after the look have %CPU on the first sample, whose reads reopen no stat, read no
    cmdline again and list /proc no more (no PID was allocated since the look)."""
    proc = FakeProc(tmp_path)
    proc.add(BUSY, "train", "python train.py")
    proc.add(QUIET, "sleep", "sleep 9")
    look = first_sample.take(str(tmp_path))
    proc.add(BUSY, "train", "python train.py", ut=50)
    source = ProcProcessSource(str(tmp_path))
    source.seed(look)
    opened = ReadWatch({pid: tmp_path / str(pid) for pid in (BUSY, QUIET)}, mask=IN_OPEN)
    listed = ReadWatch({"proc": tmp_path})
    try:
        rows = {row.pid: row for row in source.sample(GpuReport("none")).rows}
        assert (opened.take(), listed.take()) == (set(), set())
    finally:
        opened.close()
        listed.close()
        source.close()
    busy = rows[BUSY].cpu_percent
    assert busy is not None and busy > 0
    assert rows[QUIET].cpu_percent == 0.0
    assert rows[BUSY].cmdline == ("python", "train.py")
    assert source.listings == 0


def test_a_first_look_is_the_host_sources_previous_sample(tmp_path: Path) -> None:
    write_tree(tmp_path, u=100, s=100, i=800, w=0, g=50, u0=100, i0=400, u1=100, i1=400)
    (tmp_path / "sys/kernel").mkdir(parents=True)
    look = first_sample.take(str(tmp_path))
    write_tree(tmp_path, u=160, s=120, i=900, w=20, g=90, u0=200, i0=400, u1=100, i1=500)
    host = ProcHostSource(str(tmp_path))
    host.seed(look.host_stat)
    assert host.sample().cpu_percent == pytest.approx(40.0)


def test_a_source_that_sampled_already_closes_the_looks_fds(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path)
    proc.add(BUSY, "train")
    look = first_sample.take(str(tmp_path))
    source = ProcProcessSource(str(tmp_path))
    try:
        source.sample(GpuReport("none"))
        source.seed(look)
        assert look.stats == {}
        assert source.open_fds == 1  # its own, not the look's as well
    finally:
        source.close()
