"""The ring directory is listed again only when it changed (counted by the kernel: inotify
sees each listing), yet a ring that appears is found at the next tick."""

from __future__ import annotations

import os
import time
from pathlib import Path

from gputop.probe import ring as layout
from gputop.sources.attach import RingAttachSource
from tests.helpers.fakeproc import ReadWatch

OTHERS = 50  # files that are not rings, as /dev/shm holds semaphores and NCCL segments
RECORD = (0, 0, 5, 1, -1, -1, -1, -1, -1, -1, 8, 0, layout.F_OPTIMIZER, 1)
MINUTE_NS = 60 * 10**9


def _stamp(directory: Path, mtime_ns: int) -> None:
    """Date the directory's last change (as if that much time had passed since)."""
    os.utime(directory, ns=(mtime_ns, mtime_ns))


def test_ring_directory_is_listed_again_only_when_it_changed(tmp_path: Path) -> None:
    directory = tmp_path / "shm"
    directory.mkdir()
    for i in range(OTHERS):
        (directory / f"sem.mp-{i:04d}").write_bytes(b"")
    _stamp(directory, time.time_ns() - MINUTE_NS)
    source = RingAttachSource(directory=str(directory))
    watch = ReadWatch({"dir": directory})
    writer = None
    try:
        assert source.probe_pids() == frozenset()
        assert ("dir", "") in watch.take()
        for _ in range(3):
            assert source.probe_pids() == frozenset()
            assert ("dir", "") not in watch.take()  # unchanged: not listed again
        writer = layout.RingWriter(layout.ring_path(os.getpid(), directory=str(directory)))
        writer.append([RECORD])
        _stamp(directory, time.time_ns() + MINUTE_NS)  # changed, and not settled however slow
        for _ in range(2):
            assert source.probe_pids() == {os.getpid()}
            assert ("dir", "") in watch.take()  # a change could follow with the same stamp
        _stamp(directory, time.time_ns() - MINUTE_NS)
        assert source.probe_pids() == {os.getpid()}
        assert ("dir", "") in watch.take()
        for _ in range(3):
            assert source.probe_pids() == {os.getpid()}
            assert ("dir", "") not in watch.take()
    finally:
        watch.close()
        source.close()
        if writer is not None:
            writer.close()
