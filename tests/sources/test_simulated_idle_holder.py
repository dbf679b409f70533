"""The simulated "mixed" scenario's idle holder: which GPU it holds, and owners with gaps."""

from __future__ import annotations

from gputop.app.demo_holder import demo_owners, holder_gpu
from gputop.sources.simulated import SimulatedGpuSource, idle_holder_gpu


def test_mixed_has_one_memory_full_gpu_for_the_holder_and_other_scenarios_none() -> None:
    assert idle_holder_gpu("mixed", 4) == 2
    assert idle_holder_gpu("mixed", 2) is None  # too few GPUs to reach the memory-full one
    assert idle_holder_gpu("memory-full-util-zero", 4) is None  # its trainer starves there
    assert holder_gpu(None, None) is None and holder_gpu("mixed", None) == 2


def test_owners_by_index_leave_the_gpus_between_without_a_process() -> None:
    assert demo_owners(None, None, None) == [0]
    report = SimulatedGpuSource("mixed", count=4, owner_pids=[0, 0, 4121]).sample()
    assert [[p.pid for p in g.processes] for g in report.gpus] == [[], [], [4121], []]
    (held,) = report.gpus[2].processes
    assert held.sm_util_percent == 0.0 and report.gpus[2].util_percent == 0.0
    assert held.memory_used_bytes is not None and report.gpus[2].memory_used_bytes is not None
    assert held.memory_used_bytes < report.gpus[2].memory_used_bytes  # the driver's share
