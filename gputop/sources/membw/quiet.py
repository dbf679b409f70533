"""Whether the machine was quiet over a window: only then may a canary run count as idle.

Quiet means a low 1-minute load average per core, low memory PSI (some avg10) and, over
the window itself, little CPU used by other processes (/proc/stat minus our own CPU
time). The last catches a hog started seconds ago, which the load average has not yet
seen; PSI rises with reclaim stalls, not with bandwidth, so it alone would miss it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from gputop.sources.membw.estimate import read_psi

QUIET_LOAD_PER_CPU = 0.3
QUIET_OTHERS_CPU_SHARE = 0.2
QUIET_PSI_SOME = 1.0  # percent
BUSY_FIELDS = (0, 1, 2, 5, 6)  # user nice system irq softirq (guest is inside user)


class CpuMark(NamedTuple):
    """A point in time: wall clock, all CPUs' busy seconds, and our own CPU seconds."""

    wall_s: float
    busy_s: float
    own_s: float


def read_busy_s(proc_root: Path | str = "/proc") -> float | None:
    """Seconds all CPUs spent busy since boot (the 'cpu' line of /proc/stat)."""
    try:
        with open(Path(proc_root) / "stat") as stat:
            fields = stat.readline().split()
        if fields[0] != "cpu":
            return None
        return sum(int(fields[1 + i]) for i in BUSY_FIELDS) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def own_cpu_s() -> float:
    """CPU seconds of this process, all threads."""
    times = os.times()
    return times.user + times.system


class QuietMeter:
    """Says why the machine was not quiet since `start()`, or None when it was."""

    def __init__(
        self,
        proc_root: Path | str = "/proc",
        cpus: int | None = None,
        own: Callable[[], float] = own_cpu_s,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.proc_root = Path(proc_root)
        self.cpus = cpus or os.cpu_count() or 1
        self._own = own
        self._clock = clock
        self._mark: CpuMark | None = None

    def _now(self) -> CpuMark | None:
        busy = read_busy_s(self.proc_root)
        return None if busy is None else CpuMark(self._clock(), busy, self._own())

    def start(self) -> None:
        """Begin a window."""
        self._mark = self._now()

    def verdict(self) -> str | None:
        """None if the window since start() was quiet, else the reasons, '; '-joined."""
        reasons = []
        load = self._load_per_cpu()
        if load is None or load > QUIET_LOAD_PER_CPU:
            reasons.append("load average unknown" if load is None
                           else f"load {load:.2f} per core")
        psi = read_psi(self.proc_root).some_avg10
        if psi is not None and psi > QUIET_PSI_SOME:
            reasons.append(f"memory PSI {psi:.1f} %")
        others = self._others_share()
        if others is None or others > QUIET_OTHERS_CPU_SHARE:
            reasons.append("CPU use unknown" if others is None
                           else f"other processes used {others:.0%} of the CPUs")
        return "; ".join(reasons) or None

    def _load_per_cpu(self) -> float | None:
        try:
            return float((self.proc_root / "loadavg").read_text().split()[0]) / self.cpus
        except (OSError, ValueError, IndexError):
            return None

    def _others_share(self) -> float | None:
        """Share of all CPUs that other processes used over the window."""
        now, mark = self._now(), self._mark
        if now is None or mark is None or now.wall_s <= mark.wall_s:
            return None
        others = (now.busy_s - mark.busy_s) - (now.own_s - mark.own_s)
        return max(0.0, others) / ((now.wall_s - mark.wall_s) * self.cpus)
