"""Which processes have a thread of a given name (a trainer's pt_data_pin), listed rarely."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping

from gputop.core.printable import printable
from gputop.sources import procfs
from gputop.sources.tracked_process import TrackedProcess

RESCAN_S = 2.0  # while none was found, a process's threads are listed again this often


class _Search:
    """The last look at a process's threads for one of the name sought."""

    __slots__ = ("scanned_at", "start", "threads", "tid")

    def __init__(self, start: int) -> None:
        self.start = start
        self.tid: int | None = None
        self.threads: int | None = None
        self.scanned_at = float("-inf")


class NamedThreads:
    """Finds threads by name, keeping what each process's last look found."""

    def __init__(self, proc_root: str) -> None:
        self.proc_root = proc_root
        self.searches: dict[int, _Search] = {}

    def having(self, pids: Iterable[int], comm: str,
               tracked: Mapping[int, TrackedProcess]) -> frozenset[int]:
        """Those of `pids` with a thread named `comm`; a process's threads are listed again
        only when its thread count changed (or every RESCAN_S while none was found).
        What is kept of the processes not among `pids` is dropped."""
        now = time.clock_gettime(time.CLOCK_BOOTTIME)
        found: set[int] = set()
        searches: dict[int, _Search] = {}
        for pid in pids:
            t = tracked.get(pid)
            if t is None:
                continue
            search = self.searches.get(pid)
            if search is None or search.start != t.start:
                search = _Search(t.start)
            searches[pid] = search
            if search.tid is not None and self._thread_comm(pid, search.tid) != comm:
                search.tid, search.threads = None, None
            if search.tid is None and (
                search.threads != t.num_threads or now - search.scanned_at > RESCAN_S
            ):
                search.tid = self._find_thread(pid, comm)
                search.threads, search.scanned_at = t.num_threads, now
            if search.tid is not None:
                found.add(pid)
        self.searches = searches
        return frozenset(found)

    def _thread_comm(self, pid: int, tid: int) -> str | None:
        """The name of thread `tid` of `pid`, escaped; None once it is gone."""
        data = procfs.read_bytes(f"{self.proc_root}/{pid}/task/{tid}/comm", 256)
        return None if data is None else printable(data.rstrip(b"\n").decode("utf-8", "replace"))

    def _find_thread(self, pid: int, comm: str) -> int | None:
        """The first thread of `pid` named `comm`, listing its threads."""
        try:
            tids = os.listdir(f"{self.proc_root}/{pid}/task")
        except OSError:
            return None
        for tid in tids:
            if tid.isdigit() and self._thread_comm(pid, int(tid)) == comm:
                return int(tid)
        return None
