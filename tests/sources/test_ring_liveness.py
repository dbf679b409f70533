"""A trusted ring's process is known to live on by a pidfd (one poll a tick for every ring),
not by reading /proc/PID/stat for each ring each tick; once it exits, the full start-ticks
check runs again, so a PID reused by another process never inherits the ring (DESIGN.md
"Trust boundaries")."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.probe import ring as ring_format
from gputop.sources.attach import RingAttachSource
from gputop.sources.rings import RingDirectory
from tests.helpers.probe import header_only_ring

needs_pidfd = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no os.pidfd_open")


class CountingTicks:
    """ring_format.start_ticks, counting its reads of /proc/PID/stat."""

    def __init__(self) -> None:
        self.real = ring_format.start_ticks
        self.reads = 0

    def __call__(self, pid: int) -> int | None:
        self.reads += 1
        return self.real(pid)


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A child process with a ring in tmp_path (a header: its PID, start ticks, namespace)."""
    child = subprocess.Popen(["sleep", "60"])
    ticks = ring_format.start_ticks(child.pid)
    assert ticks is not None
    path = ring_format.ring_path(child.pid, directory=str(tmp_path))
    Path(path).write_bytes(header_only_ring(child.pid, ticks, ring_format.pid_namespace()))
    yield child
    if child.poll() is None:
        child.kill()
    child.wait(timeout=10)


@needs_pidfd
def test_an_attached_live_ring_reads_no_process_stat_per_tick(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writer = ring_format.RingWriter(ring_format.ring_path(os.getpid(), directory=str(tmp_path)))
    source = RingAttachSource(directory=str(tmp_path))
    try:
        source.attach(os.getpid())
        for _ in range(2):
            assert source.probe_pids() == {os.getpid()}
            (state,) = source.sample()
        counting = CountingTicks()
        monkeypatch.setattr(ring_format, "start_ticks", counting)
        for _ in range(5):
            assert source.probe_pids() == {os.getpid()}
            (state,) = source.sample()
        assert state.alive and state.error is None
        assert counting.reads == 0  # was one per ring for the listing, one for the reading
    finally:
        source.close()
        writer.close()


@pytest.mark.parametrize("reaped", [False, True])
def test_a_ring_is_dropped_in_the_tick_its_process_exits(
        sleeper: subprocess.Popen[bytes], tmp_path: Path, reaped: bool) -> None:
    """Exited (a zombie, or reaped and its PID free for reuse): the ring is no longer trusted
    for that PID, whatever the pidfd saw."""
    rings = RingDirectory(str(tmp_path), watch=True)
    try:
        for _ in range(3):
            rings.scan()
            assert set(rings.rings) == {sleeper.pid}
        sleeper.kill()
        if reaped:
            sleeper.wait(timeout=10)
        else:
            os.waitid(os.P_PID, sleeper.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
        rings.scan()
        assert sleeper.pid not in rings.rings
    finally:
        rings.close()
