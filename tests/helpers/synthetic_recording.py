"""A synthetic recording of any length, written by the recorder's own RecordWriter: one
trainer closing STEPS_PER_TICK steps a tick (~1-1.7 s) on two simulated GPUs, with an hour-long
data-starved stretch (slow input, idle GPUs, advice shown, memory pressure up) and a
checkpoint step every CHECKPOINT_EVERY steps. For the report's tests and its benchmark.
"""

from __future__ import annotations

from dataclasses import replace

from gputop.core.model import (
    Advice,
    AttachState,
    Frame,
    GpuReport,
    MemoryBandwidthSample,
    StepRecord,
    TrainerConfig,
    Verdict,
)
from gputop.recording.writer import RecordWriter, open_record
from tests.helpers.builders import gpu, host, trainer_with_workers

START_S = 1_800_000_000.0  # 2027-01-15, a fixed date: the same file every run
MS = 1_000_000
STEPS_PER_TICK = 10
WINDOW = 32  # steps each tick's ring window shows (more than a tick closes)
CHECKPOINT_EVERY = 1000
TRAINER_PID = 4242
CONFIG = TrainerConfig(num_workers=4, pin_memory=True, batch_size=256, prefetch_factor=2,
                       persistent_workers=True, num_threads=8, device="cuda:0")
STARVED = Advice("gpu-starved", "critical", "GPUs are waiting for input, not computing",
                 "GPU 0 idle in 60% of samples", "Raise num_workers or cache the dataset.")


def starved(tick: int, ticks: int) -> bool:
    """The data-starved stretch: the second quarter of the run."""
    return ticks // 4 <= tick < ticks // 2


def step(n: int, slow_input: bool) -> StepRecord:
    """Step `n`: ~100 ms of compute, its input wait slow in the starved stretch."""
    data = (60 + n % 7 * 5) * MS if slow_input else (2 + n % 3) * MS
    backward = (45 + n % 11) * MS
    checkpoint = 4000 * MS if n and n % CHECKPOINT_EVERY == 0 else 0
    optimizer = 8 * MS + checkpoint
    duration = data + MS + 30 * MS + backward + optimizer + 2 * MS
    verdict: Verdict = "data-bound" if data + MS >= duration - data - MS else "compute-bound"
    return StepRecord(step=n, duration_ns=duration, data_ns=data, h2d_ns=MS, forward_ns=30 * MS,
                      backward_ns=backward, optimizer_ns=optimizer, batch_size=256,
                      verdict=verdict)


def write_synthetic_recording(path: str, steps: int, steps_per_tick: int = STEPS_PER_TICK,
                              gpu_util: float | None = None) -> int:
    """Record `steps` steps to `path`, a tick each `steps_per_tick` steps (at the end of the
    last one, as the recorder would see it), the GPUs at `gpu_util` % throughout when given;
    how many ticks were written."""
    ticks = -(-steps // steps_per_tick)
    writer = RecordWriter(open_record(path))
    rows, group = trainer_with_workers(TRAINER_PID, 4, 80.0)
    window: list[StepRecord] = []
    first_end_ns = end_ns = 10**12
    try:
        for tick in range(ticks):
            slow = starved(tick, ticks)
            for n in range(tick * steps_per_tick, min(steps, (tick + 1) * steps_per_tick)):
                record = step(n, slow)
                end_ns += record.duration_ns
                window.append(replace(record, end_ns=end_ns))
            del window[:-WINDOW]
            util = 35.0 + tick % 5 if slow else 92.0 + tick % 5
            util = util if gpu_util is None else gpu_util
            gpus = (gpu(0, util, 61.5), gpu(1, util - 3, 60.0))
            writer.write(Frame(
                time=START_S + (end_ns - first_end_ns) / 1e9 + 0.01, interval_s=1.0,
                host=host(cpu_percent=55.0),
                gpu=GpuReport(source="simulated", gpus=gpus, note="synthetic recording"),
                processes=tuple(rows), trainers=(replace(group, workers_cpu_percent=(
                    390.0 if slow else 120.0) + tick % 7),),
                memory_bandwidth=MemoryBandwidthSample(
                    "estimate", "medium", pressure=0.7 if slow else 0.25 + tick % 10 / 100,
                    psi_some_avg10=4.0 if slow else 0.2),
                attached=(AttachState(pid=TRAINER_PID, config=CONFIG, dropped_records=0,
                                      steps=tuple(window)),),
                advice=(STARVED,) if slow else ()))
    finally:
        writer.db.close()
    return ticks
