"""Real processes that have slept long enough to be looked at only every fourth tick leave
the table the tick after they end, whichever tick that is (the kernel's thread count tells
the scan that something it skipped ended)."""

from __future__ import annotations

import subprocess
import time

import pytest

from gputop.core.model import GpuReport
from gputop.sources.processes import DEEP_LOOK_EVERY, DEEP_QUIET_TICKS, ProcProcessSource

pytestmark = pytest.mark.alone

GPU_NONE = GpuReport("none")
SLEEPERS = 12


@pytest.mark.slow
def test_a_deep_quiet_process_that_ends_leaves_the_next_tick() -> None:
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(SLEEPERS)]
    source = ProcProcessSource()
    try:
        for _ in range(DEEP_QUIET_TICKS + 2 * DEEP_LOOK_EVERY):
            source.sample(GPU_NONE)
            time.sleep(0.005)
        for sleeper in sleepers[: 2 * DEEP_LOOK_EVERY]:  # one ends on each tick of a cycle
            assert sleeper.pid in {row.pid for row in source.sample(GPU_NONE).rows}
            sleeper.kill()
            sleeper.wait(timeout=10)
            assert sleeper.pid not in {row.pid for row in source.sample(GPU_NONE).rows}
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait(timeout=10)
        source.close()
