"""The ring directory is listed again only when a ring's name came or went (or, without
inotify, when its mtime moved), counted by the kernel: inotify sees each listing; yet a
ring that appears is found at the next tick."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gputop.probe import ring as ring_format
from gputop.sources import dirwatch
from gputop.sources import rings as rings_module
from gputop.sources.attach import RingAttachSource
from tests.helpers.fakeproc import ReadWatch
from tests.helpers.processes import open_fd_targets

OTHERS = 50  # files that are not rings, as /dev/shm holds semaphores and NCCL segments
RECORD = (0, 0, 5, 1, -1, -1, -1, -1, -1, -1, 8, 0, ring_format.F_OPTIMIZER, 1,
          0, -1, 0, 0, 0, 0, 0, 0)
MINUTE_NS = 60 * 10**9


def _stamp(directory: Path, mtime_ns: int) -> None:
    """Date the directory's last change (as if that much time had passed since)."""
    os.utime(directory, ns=(mtime_ns, mtime_ns))


def _shm_with_others(tmp_path: Path) -> Path:
    """A directory holding OTHERS files that are not rings, last changed a minute ago."""
    directory = tmp_path / "shm"
    directory.mkdir()
    for i in range(OTHERS):
        (directory / f"sem.mp-{i:04d}").write_bytes(b"")
    _stamp(directory, time.time_ns() - MINUTE_NS)
    return directory


def test_other_files_coming_and_going_do_not_list_the_ring_directory(tmp_path: Path) -> None:
    directory = _shm_with_others(tmp_path)
    source = RingAttachSource(directory=str(directory))
    watch = ReadWatch({"dir": directory})
    writer = None
    try:
        assert source.probe_pids() == frozenset()
        assert ("dir", "") in watch.take()
        for i in range(3):  # a semaphore made, another unlinked: the mtime moves
            (directory / f"sem.mp-new{i}").write_bytes(b"")
            (directory / f"sem.mp-{i:04d}").unlink()
            assert source.probe_pids() == frozenset()
            assert ("dir", "") not in watch.take()
        writer = ring_format.RingWriter(ring_format.ring_path(os.getpid(),
                                                              directory=str(directory)))
        writer.append([RECORD])
        assert source.probe_pids() == {os.getpid()}
        assert ("dir", "") in watch.take()
        (directory / "sem.mp-later").write_bytes(b"")
        assert source.probe_pids() == {os.getpid()}
        assert ("dir", "") not in watch.take()
        writer.close()
        writer = None
        assert source.probe_pids() == frozenset()  # the ring's unlink is an event too
    finally:
        watch.close()
        source.close()
        if writer is not None:
            writer.close()


def _inotify_instances() -> int:
    """How many inotify instances this process holds, as the kernel lists its fds."""
    return open_fd_targets().count("anon_inode:inotify")


def test_a_directory_busier_than_a_listing_is_listed_instead_of_watched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rings_module, "REWATCH_SCANS", 3)
    directory = _shm_with_others(tmp_path)
    source = RingAttachSource(directory=str(directory))
    watch = ReadWatch({"dir": directory})
    before = _inotify_instances()
    writer = None
    try:
        assert source.probe_pids() == frozenset()
        assert _inotify_instances() == before + 1  # watched
        for i in range(rings_module.LISTING_EVENTS + 10 * OTHERS):  # as DataLoader workers'
            # shared-memory files: two events each, none left
            (directory / f"torch_{i}").write_bytes(b"")
            (directory / f"torch_{i}").unlink()
        assert source.probe_pids() == frozenset()
        assert _inotify_instances() == before  # reading the events costs more than a listing
        watch.take()
        writer = ring_format.RingWriter(ring_format.ring_path(os.getpid(),
                                                              directory=str(directory)))
        writer.append([RECORD])
        assert source.probe_pids() == {os.getpid()}  # the mtime moved: listed, found
        assert ("dir", "") in watch.take()
        for _ in range(3):  # quiet again: watched again REWATCH_SCANS scans later
            assert source.probe_pids() == {os.getpid()}
        assert _inotify_instances() == before + 1
        watch.take()
        (directory / "sem.mp-later").write_bytes(b"")
        assert source.probe_pids() == {os.getpid()}
        assert ("dir", "") not in watch.take()  # a few events: the watch says no ring came
    finally:
        watch.close()
        source.close()
        if writer is not None:
            writer.close()


def test_without_inotify_the_directory_is_listed_again_only_when_it_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dirwatch, "_watch_fd", lambda path: None)  # no inotify instance left
    directory = _shm_with_others(tmp_path)
    source = RingAttachSource(directory=str(directory))
    watch = ReadWatch({"dir": directory})
    writer = None
    try:
        assert source.probe_pids() == frozenset()
        assert ("dir", "") in watch.take()
        for _ in range(3):
            assert source.probe_pids() == frozenset()
            assert ("dir", "") not in watch.take()  # unchanged: not listed again
        writer = ring_format.RingWriter(ring_format.ring_path(os.getpid(),
                                                              directory=str(directory)))
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
