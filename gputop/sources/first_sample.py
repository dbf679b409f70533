"""The live view's first look at the host's and every process's CPU times, taken before the
rest of gputop is imported: the first frame's %CPU then covers the time those imports take
instead of a wait after them. Only `os` and `time`, so importing this costs nothing.

The host and process sources take the look over as their previous tick
(`ProcHostSource.seed`, `ProcProcessSource.seed`); the stat fds stay open for them.
"""

from __future__ import annotations

import os
import time

_FLAGS = os.O_RDONLY | os.O_CLOEXEC


class FirstSample:
    """/proc/stat, the last PID allocated and each process's stat (its fd kept open), read
    at one moment on both clocks the sources use."""

    __slots__ = ("boottime", "host_stat", "last_pid", "monotonic", "proc_root", "stats")

    def __init__(self, proc_root: str, boottime: float, monotonic: float, host_stat: str,
                 last_pid: int | None, stats: dict[int, tuple[int, bytes]]) -> None:
        self.proc_root = proc_root
        self.boottime = boottime
        self.monotonic = monotonic
        self.host_stat = host_stat
        self.last_pid = last_pid
        self.stats = stats  # pid -> (its stat's open fd, the stat read)

    def hand_over(self) -> dict[int, tuple[int, bytes]]:
        """The stats with their fds, once: who takes them closes the fds."""
        stats, self.stats = self.stats, {}
        return stats

    def close(self) -> None:
        """Close the fds nobody took over."""
        for fd, _data in self.hand_over().values():
            os.close(fd)


def take(proc_root: str = "/proc") -> FirstSample:
    """Read the host's CPU times and every process's stat now (about 2 µs a process)."""
    boottime, monotonic = time.clock_gettime(time.CLOCK_BOOTTIME), time.monotonic()
    last_pid = _read_int(f"{proc_root}/sys/kernel/ns_last_pid")
    host_stat = _read(f"{proc_root}/stat").decode("ascii", "replace")
    stats: dict[int, tuple[int, bytes]] = {}
    try:
        names = os.listdir(proc_root)
    except OSError:
        names = []
    for name in names:
        if not name.isdigit():
            continue
        try:
            fd = os.open(f"{proc_root}/{name}/stat", _FLAGS)
        except OSError:
            continue
        try:
            stats[int(name)] = (fd, os.pread(fd, 1024, 0))
        except OSError:
            os.close(fd)
    return FirstSample(proc_root, boottime, monotonic, host_stat, last_pid, stats)


def _read(path: str) -> bytes:
    try:
        fd = os.open(path, _FLAGS)
    except OSError:
        return b""
    try:
        return os.pread(fd, 1 << 20, 0)  # /proc/stat: its cpu lines come first
    except OSError:
        return b""
    finally:
        os.close(fd)


def _read_int(path: str) -> int | None:
    text = _read(path).strip()
    return int(text) if text.isdigit() else None
