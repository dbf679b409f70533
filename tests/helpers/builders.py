"""Hand-built Frames for the pure layers' unit tests (advice rules, exporters)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, TypedDict

from gputop.core.model import (
    AttachState,
    Band,
    Frame,
    GpuProcess,
    GpuReport,
    GpuSample,
    HostSample,
    MemoryBandwidthSample,
    ProcessSample,
    Role,
    StepRecord,
    StepSummary,
    TrainerConfig,
    TrainerGroup,
    Verdict,
)
from gputop.frames import derive

if TYPE_CHECKING:
    from typing import Unpack  # Python 3.11+; annotations only

GIB = 1024**3
MS = 1_000_000


class ConfigArgs(TypedDict, total=False):
    """TrainerConfig's fields, as keyword arguments to `attached`."""

    num_workers: int | None
    pin_memory: bool | None
    batch_size: int | None
    prefetch_factor: int | None
    persistent_workers: bool | None
    num_threads: int | None
    device: str | None
    rank: int | None
    world_size: int | None
    extra: tuple[tuple[str, str], ...]


def host(cores: int = 8, cpu_percent: float = 30.0, swap_used: int = 0) -> HostSample:
    """A host with `cores` cores at `cpu_percent` busy."""
    return HostSample(
        hostname="testhost", cpu_count=cores, cpu_percent=cpu_percent,
        per_cpu_percent=(cpu_percent,) * cores, memory_total_bytes=64 * GIB,
        memory_available_bytes=40 * GIB, swap_total_bytes=8 * GIB, swap_used_bytes=swap_used,
        load_average=(1.0, 1.0, 1.0), uptime_s=3600.0,
    )


def gpu(index: int = 0, util: float = 90.0, used_gib: float = 40.0, total_gib: float = 80.0,
        pids: tuple[tuple[int, float], ...] = ()) -> GpuSample:
    """One device at `util` % with `used_gib` of `total_gib` used by `pids` (pid, GiB)."""
    return GpuSample(
        index=index, name="Test GPU", uuid=f"GPU-{index}", util_percent=util,
        memory_util_percent=None, memory_used_bytes=int(used_gib * GIB),
        memory_total_bytes=int(total_gib * GIB), temperature_c=60.0, power_w=300.0,
        power_limit_w=700.0, sm_clock_mhz=1980, memory_clock_mhz=2619,
        pcie_rx_bytes_per_s=1e9, pcie_tx_bytes_per_s=1e8,
        processes=tuple(GpuProcess(pid, int(g * GIB)) for pid, g in pids),
    )


def process(pid: int, ppid: int = 1, role: Role = "other", cpu: float | None = 0.0,
            trainer_pid: int | None = None, wait: float | None = None,
            io_wait: float | None = None, reads: float | None = None) -> ProcessSample:
    """A process row; `wait`: % of the interval runnable but waiting for a CPU."""
    return ProcessSample(
        pid=pid, ppid=ppid, name="python", cmdline=("python", "train.py"), username="me",
        state="S", num_threads=4, cpu_percent=cpu, rss_bytes=GIB, cpu_time_s=10.0,
        start_ticks=pid, role=role, trainer_pid=trainer_pid,
        runqueue_wait_percent=wait, io_wait_percent=io_wait, read_bytes_per_s=reads,
    )


def trainer_with_workers(pid: int, workers: int, worker_cpu: float,
                         worker_wait: float | None = None, trainer_cpu: float = 100.0,
                         trainer_wait: float | None = None, io_wait: float | None = None,
                         reads: float | None = None) -> tuple[
        list[ProcessSample], TrainerGroup]:
    """A trainer row, its worker rows (each at `worker_cpu` % CPU, `worker_wait` % waiting
    for a core), and the group joining them."""
    worker_pids = tuple(range(pid + 1, pid + 1 + workers))
    rows = [process(pid, role="trainer", cpu=trainer_cpu, wait=trainer_wait)]
    rows += [process(w, ppid=pid, role="worker", cpu=worker_cpu, trainer_pid=pid,
                     wait=worker_wait, io_wait=io_wait, reads=reads)
             for w in worker_pids]
    group = TrainerGroup(pid=pid, worker_pids=worker_pids,
                         workers_cpu_percent=worker_cpu * workers,
                         num_threads_total=4 * (workers + 1), pin_memory_thread=False)
    return rows, group


def steps(n: int, data_ms: float, compute_ms: float, h2d_ms: float | None = None,
          batch: int = 64) -> tuple[StepRecord, ...]:
    """`n` identical steps of `data_ms` waiting and `compute_ms` computing."""
    h2d = None if h2d_ms is None else int(h2d_ms * MS)
    total = int((data_ms + compute_ms + (h2d_ms or 0)) * MS)
    verdict: Verdict = "data-bound" if data_ms + (h2d_ms or 0) >= compute_ms else "compute-bound"
    return tuple(
        StepRecord(step=i, duration_ns=total, data_ns=int(data_ms * MS), h2d_ns=h2d,
                   forward_ns=int(compute_ms * MS), batch_size=batch,
                   verdict=verdict)
        for i in range(n)
    )


def attached(pid: int, data_ms: float, compute_ms: float, h2d_ms: float | None = None,
             n: int = 50, **config: Unpack[ConfigArgs]) -> AttachState:
    """An attached trainer whose window is `n` steps of the given shape."""
    recs = steps(n, data_ms, compute_ms, h2d_ms)
    step_ns = recs[0].duration_ns
    share = 100.0 * (data_ms + (h2d_ms or 0)) / (step_ns / MS)
    band: Band = "highly" if share >= 20 else "moderately" if share >= 5 else "not"
    phases: list[tuple[str, int | None]] = [("data", int(data_ms * MS)),
                                            ("forward", int(compute_ms * MS))]
    if h2d_ms is not None:
        phases.append(("h2d", int(h2d_ms * MS)))
    summary = StepSummary(
        steps=n, input_bound_percent=share, band=band,
        verdict="data-bound" if share >= 50 else "compute-bound",
        median_step_ns=step_ns, p95_step_ns=step_ns,
        samples_per_s=64 / (step_ns / 1e9), median_phase_ns=tuple(phases),
    )
    return AttachState(pid=pid, config=TrainerConfig(**config),
                       dropped_records=0, steps=recs, summary=summary)


def frame(gpus: tuple[GpuSample, ...] = (), processes: list[ProcessSample] | None = None,
          trainers: tuple[TrainerGroup, ...] = (), attach: tuple[AttachState, ...] = (),
          membw: MemoryBandwidthSample | None = None, cores: int = 8,
          cpu_percent: float = 30.0, swap_used: int = 0) -> Frame:
    """A frame from the parts given, derived facts derived as the sampler would; GPUs
    simulated when any are given; the host as `host(cores, cpu_percent, swap_used)`."""
    attach, straggler = derive.Derivation().attached(attach, time.monotonic_ns())
    return Frame(
        time=1_800_000_000.0, interval_s=1.0, host=host(cores, cpu_percent, swap_used),
        gpu=GpuReport(source="simulated" if gpus else "none", gpus=gpus,
                      note=None if gpus else "no NVIDIA driver"),
        processes=tuple(processes or ()), trainers=trainers, memory_bandwidth=membw,
        attached=attach, straggler=straggler,
    )


def with_gpu_util(f: Frame, util: float) -> Frame:
    """The same frame with every GPU at `util` %."""
    return replace(f, gpu=replace(f.gpu, gpus=tuple(replace(g, util_percent=util)
                                                    for g in f.gpu.gpus)))
