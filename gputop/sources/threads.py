"""The userland threads of chosen processes (htop's H), read only while the table shows them."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

from gputop.core.model import ThreadSample
from gputop.core.printable import printable
from gputop.sources import procfs

MAX_THREADS = 1024  # thread rows read in one tick, over every process asked for


class ThreadReader:
    """Reads /proc/PID/task/TID/stat for the processes asked for; each thread's %CPU comes
    from its CPU time now and at the reader's previous read."""

    def __init__(self, proc_root: str = "/proc", max_threads: int = MAX_THREADS) -> None:
        self.proc_root = proc_root
        self.max_threads = max_threads
        self._ticks: dict[tuple[int, int], int] = {}  # (TID, start ticks): its CPU ticks
        self._read_at: float | None = None

    def read(self, pids: Iterable[int]) -> dict[int, tuple[ThreadSample, ...]]:
        """The threads of each of `pids` but its main one (the process's own row), by TID;
        a process that is gone or has no other thread is left out."""
        now = time.monotonic()
        elapsed = None if self._read_at is None else max(1e-3, now - self._read_at)
        left = self.max_threads
        ticks: dict[tuple[int, int], int] = {}
        found: dict[int, tuple[ThreadSample, ...]] = {}
        for pid in pids:
            if left <= 0:
                break
            threads = self._threads_of(pid, elapsed, ticks, left)
            left -= len(threads)
            if threads:
                found[pid] = threads
        self._ticks, self._read_at = ticks, now
        return found

    def _threads_of(self, pid: int, elapsed: float | None, ticks: dict[tuple[int, int], int],
                    most: int) -> tuple[ThreadSample, ...]:
        task = f"{self.proc_root}/{pid}/task"
        try:
            names = os.listdir(task)
        except OSError:
            return ()
        threads: list[ThreadSample] = []
        for tid in sorted(int(name) for name in names if name.isdigit()):
            if tid == pid:
                continue
            if len(threads) >= most:
                break
            data = procfs.read_bytes(f"{task}/{tid}/stat", 4096)
            stat = procfs.parse_stat(data) if data else None
            if stat is None:  # it ended between the listing and the read
                continue
            used = stat.utime + stat.stime
            before = self._ticks.get((tid, stat.starttime))
            ticks[(tid, stat.starttime)] = used
            cpu = (None if before is None or elapsed is None
                   else max(0, used - before) / procfs.CLOCK_TICKS / elapsed * 100.0)
            threads.append(ThreadSample(tid=tid, comm=printable(stat.comm), state=stat.state,
                                        start_ticks=stat.starttime, cpu_percent=cpu,
                                        cpu_time_s=used / procfs.CLOCK_TICKS))
        return tuple(threads)
