"""The process scan says which rows use a GPU (derive then walks no row to find them): the
same PIDs as the rows with GPU memory or devices, as NVML's list comes and goes."""

from __future__ import annotations

import os

from gputop.core.model import GpuReport
from gputop.sources.processes import ProcProcessSource
from tests.helpers import builders

FOREIGN = 4_194_304 + 7  # above any pid_max: a PID of another namespace


def test_scan_gpu_pids_are_the_rows_with_a_gpu() -> None:
    me, parent = os.getpid(), os.getppid()
    reports = [
        GpuReport("nvml", (builders.gpu(0, pids=((me, 1.0),)),)),
        GpuReport("nvml", (builders.gpu(0, pids=((me, 1.0), (FOREIGN, 2.0))),
                           builders.gpu(1, pids=((parent, 0.5), (me, 0.5))))),
        GpuReport("nvml", ()),
        GpuReport("nvml", (builders.gpu(1, pids=((parent, 0.0),)),)),
        GpuReport("none"),
    ]
    source = ProcProcessSource()
    try:
        for report in reports:
            scan = source.sample(report)
            walked = frozenset(r.pid for r in scan.rows
                               if r.gpu_indices or r.gpu_memory_bytes is not None)
            assert scan.gpu_pids == walked
    finally:
        source.close()
