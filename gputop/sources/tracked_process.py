"""What the process source remembers about one process between ticks, and its row."""

from __future__ import annotations

from gputop.core.model import ProcessSample
from gputop.sources import procfs
from gputop.sources.containers import Container


class TrackedProcess:
    """One process as last read: its stat fields, names, GPU share and its row."""

    __slots__ = (
        "cmdline", "cmdline_age", "comm", "container", "container_pid", "cpu_percent",
        "cpu_ticks", "gpu_indices", "gpu_memory_bytes", "name", "num_threads", "pid", "ppid",
        "ran_at", "raw", "rss_bytes", "sample", "sched", "seen_at", "start", "state", "username",
    )

    def __init__(self, pid: int, st: procfs.ProcStat, raw: bytes) -> None:
        self.pid = pid
        self.start = st.starttime
        self.raw = raw
        self.comm = st.comm
        self.name = st.comm
        self.ppid: int | None = st.ppid
        self.state = st.state
        self.num_threads: int | None = st.num_threads
        self.rss_bytes = st.rss_pages * procfs.PAGE_SIZE
        self.cpu_ticks = st.utime + st.stime
        self.cpu_percent: float | None = None
        self.cmdline: tuple[str, ...] = ()
        self.cmdline_age = 0.0
        self.username: str | None = None
        self.gpu_memory_bytes: int | None = None
        self.gpu_indices: tuple[int, ...] = ()
        self.container: Container | None = None
        self.container_pid: int | None = None  # its PID in its own namespace, if not ours
        self.sample: ProcessSample | None = None
        self.sched: bytes | int | None = None  # its CPU clock (ns), else its schedstat
        self.ran_at = 0  # the last tick that moved (or it was first seen)
        self.seen_at = 0  # the last tick it was looked at (a quiet one is not, every tick)

    def row(self) -> ProcessSample:
        """The process as a sample; the same object while nothing shown changed."""
        s = self.sample
        if (
            s is not None
            and s.cpu_percent == self.cpu_percent
            and s.gpu_memory_bytes == self.gpu_memory_bytes
            and s.gpu_indices == self.gpu_indices
            and s.num_threads == self.num_threads
            and s.rss_bytes == self.rss_bytes
            and s.state == self.state
            and s.name == self.name
            and s.ppid == self.ppid
        ):
            return s
        s = ProcessSample(
            pid=self.pid,
            ppid=self.ppid,
            name=self.name,
            cmdline=self.cmdline,
            username=self.username,
            state=self.state,
            num_threads=self.num_threads,
            cpu_percent=self.cpu_percent,
            rss_bytes=self.rss_bytes,
            cpu_time_s=self.cpu_ticks / procfs.CLOCK_TICKS,
            start_ticks=self.start,
            gpu_memory_bytes=self.gpu_memory_bytes,
            gpu_indices=self.gpu_indices,
            container=None if (c := self.container) is None else c.id,
            container_pod=None if c is None else c.pod_uid,
            container_pid=self.container_pid,
        )
        self.sample = s
        return s
