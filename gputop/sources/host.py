"""Host source: CPU (total and per core, over the interval), memory, swap, load, uptime."""

from __future__ import annotations

import os
import socket

from gputop.core.model import HostSample
from gputop.core.printable import printable
from gputop.sources import procfs


class ProcHostSource:
    """HostSource over /proc/stat, /proc/meminfo, /proc/loadavg and /proc/uptime."""

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = proc_root
        self.hostname = printable(socket.gethostname())
        self.cpu_count = os.cpu_count() or 1
        self._last: tuple[procfs.CpuTimes | None, tuple[procfs.CpuTimes, ...]] | None = None
        self._stat, self._meminfo, self._loadavg, self._uptime = (
            procfs.KeptFile(f"{proc_root}/{name}") for name in (
                "stat", "meminfo", "loadavg", "uptime"))

    def seed(self, stat_text: str) -> None:
        """Take /proc/stat's text read earlier (a first look) as the previous sample."""
        self._last = procfs.parse_cpu_lines(stat_text)

    def sample(self) -> HostSample:
        """Host-wide figures now; CPU percentages are None until a previous sample exists."""
        total, per_cpu = procfs.parse_cpu_lines(self._stat.text() or "")
        cpu_percent: float | None = None
        per_cpu_percent: tuple[float, ...] = ()
        if self._last is not None:
            last_total, last_per_cpu = self._last
            if total is not None and last_total is not None:
                cpu_percent = procfs.cpu_percent_between(last_total, total)
            if len(per_cpu) == len(last_per_cpu):
                pairs = zip(last_per_cpu, per_cpu, strict=True)
                per_cpu_percent = tuple(procfs.cpu_percent_between(a, b) for a, b in pairs)
        self._last = (total, per_cpu)
        mem = procfs.parse_meminfo(self._meminfo.text() or "")
        load, _ = procfs.parse_loadavg(self._loadavg.text() or "")
        uptime = procfs.parse_uptime(self._uptime.text() or "")
        return HostSample(
            hostname=self.hostname,
            cpu_count=self.cpu_count,
            cpu_percent=cpu_percent,
            per_cpu_percent=per_cpu_percent,
            memory_total_bytes=mem.total if mem else 0,
            memory_available_bytes=mem.available if mem else 0,
            swap_total_bytes=mem.swap_total if mem else 0,
            swap_used_bytes=max(0, mem.swap_total - mem.swap_free) if mem else 0,
            load_average=load,
            uptime_s=uptime or 0.0,
        )
