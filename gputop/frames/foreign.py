"""Each tick's NVML PIDs that /proc does not show, matched to ours where proven; the device
nodes' holders are read again only when those PIDs change or every RECHECK_S."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from gputop.analysis.foreign_gpu_pids import foreign_gpu_pids
from gputop.core.model import ForeignGpuPid, GpuReport, ProcessSample
from gputop.sources.device_holders import gpu_nodes, holders

RECHECK_S = 10.0  # holders() reads every fd link of every process here: not every tick


class ForeignWatch:
    """Remembers the last answer for the same foreign PIDs on the same GPUs."""

    def __init__(self, dev: str = "/dev", proc_root: str = "/proc",
                 recheck_s: float = RECHECK_S) -> None:
        self._dev = dev
        self._proc_root = proc_root
        self._recheck_s = recheck_s
        self._key: tuple[tuple[int, tuple[int, ...]], ...] | None = None
        self._checked_at = 0.0
        self._found: tuple[ForeignGpuPid, ...] = ()

    def found(self, gpu: GpuReport, rows: Sequence[ProcessSample],
              places: Mapping[int, int] | None, now: float) -> tuple[ForeignGpuPid, ...]:
        """NVML's PIDs without a /proc row here, matched where proven (`now`: monotonic)."""
        if places is None:
            places = {row.pid: at for at, row in enumerate(rows)}
        key = tuple((g.index, tuple(sorted({p.pid for p in g.processes})))
                    for g in gpu.gpus
                    if any(not _visible(p.pid, rows, places) for p in g.processes))
        if not key:
            self._key, self._found = None, ()
            return ()
        if key == self._key and now - self._checked_at < self._recheck_s:
            return self._found
        ours = [row.pid for row in rows if row.in_proc]
        node_of = {g.index: g.minor_number for g in gpu.gpus if g.minor_number is not None}
        self._found = foreign_gpu_pids(gpu, ours, gpu_nodes(self._dev),
                                       holders(ours, self._proc_root), node_of, os.getpid())
        self._key, self._checked_at = key, now
        return self._found


def _visible(pid: int, rows: Sequence[ProcessSample], places: Mapping[int, int]) -> bool:
    at = places.get(pid)
    return at is not None and rows[at].in_proc
