"""After many short-lived processes came and went, the process source holds only live ones
(a guard for the soak: nothing it keeps per PID may grow with the machine's churn)."""

from __future__ import annotations

import os
import subprocess

import pytest

from gputop.core.model import GpuReport
from gputop.sources import procfs
from gputop.sources.processes import ProcProcessSource

CHILDREN = 500
BATCH = 50


@pytest.mark.slow
def test_per_pid_memory_holds_only_live_processes() -> None:
    source = ProcProcessSource()
    gpu = GpuReport(source="none")
    seen: set[int] = set()
    try:
        for _ in range(CHILDREN // BATCH):
            children = [subprocess.Popen(["sleep", "0.2"]) for _ in range(BATCH)]
            scan = source.sample(gpu)
            pids = [c.pid for c in children]
            seen.update(pids)
            source.threads_named(pids, "pt_data_pin")
            for pid in pids:
                source.torch_version(pid)
            for child in children:
                child.wait(timeout=10)
        source.sample(gpu)
        scan = source.sample(gpu)
        live = set(procfs.list_pids())
        listed = {row.pid for row in scan.rows}
        source.threads_named([os.getpid()], "pt_data_pin")  # as each tick with a trainer does
        assert not listed & seen - live
        assert source.open_fds <= 2 * len(listed)
        alive = live | {os.getpid()}
        assert set(source._tracked) <= alive
        assert set(source._named_threads.searches) <= alive
        assert {pid for pid, _ in source._torch_versions.known} <= alive
    finally:
        source.close()
