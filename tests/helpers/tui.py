"""Deterministic TUI test inputs: simulated GPUs, a recorded process list, a fed sampler."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec

if TYPE_CHECKING:  # Textual only where an app runs: some tests watch when it is imported
    from textual.pilot import Pilot

    from gputop.tui.app import GputopApp

from gputop.advice import Advisor
from gputop.analysis.steps import classified, summarize
from gputop.app.demo_trainer import SHAPES
from gputop.core.model import (
    AttachState,
    FleetReport,
    Frame,
    GpuReport,
    HostSample,
    MemoryBandwidthSample,
    ProcessSample,
    StepRecord,
    StepSummary,
    TrainerConfig,
    TrainerGroup,
)
from gputop.sources.simulated import SimulatedGpuSource

DATA = Path(__file__).resolve().parents[1] / "tui" / "data"
GIB = 1 << 30
MS = 1_000_000
T0 = 1_800_000_000.0
P = ParamSpec("P")


class FedSampler:
    """Stands where the real Sampler stands; the test hands frames to the app itself."""

    def __init__(self) -> None:
        self.paused = False
        self.started = False
        self.stopped = False
        self.attached: list[int] = []
        self.detached: list[int] = []
        self.on_frame: Callable[[Frame], None] | None = None

    def start(self, on_frame: Callable[[Frame], None], *, on_prime: object = None) -> None:
        self.started = True
        self.on_frame = on_frame

    def stop(self) -> None:
        self.stopped = True

    def set_paused(self, paused: bool) -> None:
        self.paused = paused

    def attach(self, pid: int) -> None:
        self.attached.append(pid)

    def detach(self, pid: int) -> None:
        self.detached.append(pid)

    def add_deferred_sources(self) -> None:
        """Nothing is deferred here: the test feeds frames."""


class FedFleet(FedSampler):
    """Stands where the fleet's sampler stands: records the hosts the app focuses on."""

    def __init__(self) -> None:
        super().__init__()
        self.focused: list[str | None] = []

    def focus(self, instance: str | None) -> None:
        self.focused.append(instance)


def fleet_frame(report: FleetReport, interval_s: float = 15.0) -> Frame:
    """A fleet Frame as the fleet sampler hands it over."""
    return Frame(time=T0, interval_s=interval_s, host=host(), gpu=GpuReport(source="none"),
                 processes=(), trainers=(), fleet=report)


def recorded_processes() -> tuple[tuple[ProcessSample, ...], tuple[TrainerGroup, ...]]:
    """The process list recorded from a real `gputop --demo` run (tests/tui/data)."""
    raw = json.loads((DATA / "processes.json").read_text())
    procs = tuple(
        ProcessSample(**{**p, "cmdline": tuple(p["cmdline"]),
                         "gpu_indices": tuple(p["gpu_indices"])})
        for p in raw["processes"]
    )
    groups = tuple(TrainerGroup(**{**g, "worker_pids": tuple(g["worker_pids"])})
                   for g in raw["trainers"])
    return procs, groups


def host(tick: int = 0, cores: int = 8) -> HostSample:
    """A host whose load moves a little with the tick."""
    per_cpu = tuple(float((17 * (i + 1) + 9 * tick) % 100) for i in range(cores))
    return HostSample(
        hostname="trainbox", cpu_count=cores, cpu_percent=sum(per_cpu) / cores,
        per_cpu_percent=per_cpu, memory_total_bytes=64 * GIB,
        memory_available_bytes=23 * GIB, swap_total_bytes=8 * GIB, swap_used_bytes=GIB // 4,
        load_average=(3.21, 2.87, 2.5), uptime_s=3 * 86400 + 4 * 3600 + 5 * 60,
    )


def membw(tick: int = 0) -> MemoryBandwidthSample:
    """An estimated memory-bandwidth reading."""
    return MemoryBandwidthSample(
        source="estimate", confidence="low", pressure=0.3 + 0.05 * (tick % 7),
        peak_bytes_per_s=38e9, psi_some_avg10=1.5, psi_full_avg10=0.0, swap_in_per_s=0.0,
        major_faults_per_s=2.0,
    )


def steps(trainer: int, n: int = 30, data_ms: float = 60.0) -> AttachState:
    """An attached trainer: two warm-up steps then steady data-bound steps."""
    records = []
    for i in range(n):
        data = int((data_ms + (i % 5) * 4) * MS)
        fwd, bwd, opt = 18 * MS, 30 * MS, 6 * MS
        h2d = 3 * MS
        total = data + h2d + fwd + bwd + opt + 2 * MS
        records.append(StepRecord(
            step=100 + i, duration_ns=total, data_ns=data, h2d_ns=h2d, forward_ns=fwd,
            backward_ns=bwd, optimizer_ns=opt, batch_size=64, warmup=i < 2,
            verdict="data-bound" if data + h2d >= total - data - h2d else "compute-bound",
        ))
    summary = StepSummary(
        steps=n - 2, input_bound_percent=52.4, band="highly", verdict="data-bound",
        median_step_ns=127 * MS, p95_step_ns=140 * MS, samples_per_s=503.9,
        waited_percent=100.0, p95_data_ns=76 * MS, data_bound_steps=n - 2,
    )
    config = TrainerConfig(num_workers=3, pin_memory=False, batch_size=64, prefetch_factor=2,
                           persistent_workers=False, num_threads=4, device="cpu", rank=0,
                           world_size=1)
    return AttachState(pid=trainer, config=config, dropped_records=0, steps=tuple(records),
                       summary=summary)


def frames(scenario: str, count: int = 80, gpus: int = 4, attach: bool = False,
           advice: bool = False) -> list[Frame]:
    """`count` consecutive frames of one scenario, identical on every run."""
    procs, groups = recorded_processes()
    trainer = groups[0].pid
    source = SimulatedGpuSource(scenario, count=gpus, owner_pids=(trainer,))
    return _ticks(source, procs, groups, (steps(trainer),) if attach else (), count,
                  Advisor() if advice else None)


def recordable_frames(count: int) -> list[Frame]:
    """`count` data-starved frames with GPUs, a trainer's steps and advice, as the live
    sampler delivers them (each window summarized, the straggler named): what a replay of
    their recording must show."""
    from gputop.frames.derive import Derivation

    out = []
    for frame in frames("data-starved", count, attach=True, advice=True):
        attached, straggler = Derivation().attached(frame.attached, 0)
        out.append(replace(frame, attached=attached, straggler=straggler))
    return out


def first_frames(**kwargs: bool) -> list[Frame]:
    """The five data-starved frames a Pilot test starts from (`attach`, `advice` as frames)."""
    return frames("data-starved", 5, **kwargs)


def _ticks(source: SimulatedGpuSource, procs: tuple[ProcessSample, ...],
           groups: tuple[TrainerGroup, ...], attached: tuple[AttachState, ...], count: int,
           advisor: Advisor | None) -> list[Frame]:
    """`count` frames of the simulated GPUs beside the recorded processes, each process
    showing the GPU memory it holds that tick; advised when there is an `advisor`."""
    out = []
    for tick in range(count):
        report = source.report_at(tick)
        gpu_mem = {p.pid: p.memory_used_bytes for g in report.gpus for p in g.processes}
        rows = tuple(
            replace(p, gpu_memory_bytes=gpu_mem.get(p.pid), gpu_indices=(0,) if p.pid in gpu_mem
                    else ()) for p in procs
        )
        frame = Frame(time=T0 + tick, interval_s=1.0, host=host(tick), gpu=report,
                      processes=rows, trainers=groups, memory_bandwidth=membw(tick),
                      attached=attached)
        out.append(replace(frame, advice=advisor(frame)) if advisor is not None else frame)
    return out


@dataclass(frozen=True)
class DemoRun:
    """What the real demo trainer of one scenario measured on a busy 2-core box (mean ms
    per step; %CPU and % waiting for a core of the trainer and of each worker)."""

    data_ms: float
    forward_ms: float
    backward_ms: float
    optimizer_ms: float
    trainer: tuple[float, float]
    worker: tuple[float, float]


DEMO_RUNS = {
    "data-starved": DemoRun(44.0, 0.4, 0.35, 0.17, trainer=(6.0, 3.0), worker=(3.0, 6.0)),
    "compute-bound": DemoRun(1.5, 5.8, 9.5, 0.3, trainer=(93.0, 5.0), worker=(4.0, 3.0)),
    "small-batch": DemoRun(3.2, 2.0, 4.3, 7.3, trainer=(80.0, 28.0), worker=(4.0, 13.0)),
    "memory-full-util-zero": DemoRun(426.0, 0.3, 0.3, 0.13, trainer=(0.5, 0.8),
                                     worker=(1.0, 0.5)),
}


def demo_steps(trainer: int, scenario: str, n: int = 40) -> AttachState:
    """The demo trainer of `scenario` as the probe reports it: its shape's batch and the
    step timings it measured, with a little deterministic jitter."""
    shape, run = SHAPES[scenario], DEMO_RUNS[scenario]
    records = []
    for i in range(n):
        wobble = 1.0 + 0.04 * ((7 * i) % 5 - 2)
        data = int(run.data_ms * wobble * MS)
        fwd, bwd, opt = (int(v * MS) for v in (run.forward_ms * wobble, run.backward_ms,
                                                 run.optimizer_ms))
        records.append(StepRecord(step=500 + i, duration_ns=data + fwd + bwd + opt + MS // 5,
                                  data_ns=data, forward_ns=fwd, backward_ns=bwd,
                                  optimizer_ns=opt, batch_size=shape.batch, warmup=i < 2))
    recs = classified(records)
    config = TrainerConfig(num_workers=shape.workers, pin_memory=False, batch_size=shape.batch,
                           prefetch_factor=2, persistent_workers=False, num_threads=1,
                           device="cpu")
    return AttachState(pid=trainer, config=config, dropped_records=0, steps=recs,
                       summary=summarize(recs))


def scenario_frames(scenario: str, count: int = 40, gpus: int = 4) -> list[Frame]:
    """`gputop --demo SCENARIO` as a user sees it, tick by tick, advice included: the
    simulated GPUs, and the scenario's demo trainer (none when idle) with its workers."""
    procs, groups = recorded_processes()
    group = groups[0]
    members = {group.pid, *group.worker_pids}
    run = DEMO_RUNS.get(scenario)
    if run is None:  # no trainer: its rows and group are gone
        procs = tuple(p for p in procs if p.pid not in members)
        groups = groups[1:]
    else:
        cpu = {group.pid: run.trainer, **{w: run.worker for w in group.worker_pids}}
        procs = tuple(replace(p, cpu_percent=cpu[p.pid][0], runqueue_wait_percent=cpu[p.pid][1])
                      if p.pid in cpu else p for p in procs)
        groups = (replace(group, workers_cpu_percent=run.worker[0] * len(group.worker_pids)),
                  *groups[1:])
    source = SimulatedGpuSource(scenario, count=gpus,
                                owner_pids=(group.pid,) if run is not None else ())
    attached = (demo_steps(group.pid, scenario),) if run is not None else ()
    return _ticks(source, procs, groups, attached, count, Advisor())


def sync(test: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
    """Run an async Pilot test with asyncio.run (no pytest-asyncio needed)."""

    @functools.wraps(test)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


@asynccontextmanager
async def running(app: GputopApp, *shown: Frame, size: tuple[int, int] = (120, 40),
                  notifications: bool = False) -> AsyncIterator[Pilot[int]]:
    """`app` run headless at `size`, handed `shown` in order and settled: its Pilot."""
    async with app.run_test(size=size, notifications=notifications) as pilot:
        for frame in shown:
            app.show_frame(frame)
        await pilot.pause()
        yield pilot


def drawn_lines(frame: Frame, kept: set[int], width: int = 160) -> list[str]:
    """The header, host, GPU and process lines the live view draws for `frame` alone (the
    table's rows of the processes in `kept`: a recording keeps the ones that matter)."""
    from gputop.tui.history import History
    from gputop.tui.views.gpus import gpu_lines
    from gputop.tui.views.header import header_lines
    from gputop.tui.views.host import host_lines
    from gputop.tui.views.processes import TableState, columns_for, row_line, table_rows

    history = History()
    history.add(frame)
    columns = columns_for(width)
    lines = (header_lines(frame, width) + host_lines(frame.host, frame.memory_bandwidth,
                                                       history, width, max_core_rows=4)
             + gpu_lines(frame.gpu.gpus, history, width, 8)
             + [row_line(r, columns, width, False) for r in table_rows(frame, TableState())
                if r.process.pid in kept])
    return ["".join(text for text, _ in line) for line in lines]


def screen_text(app: Any) -> list[str]:
    """What the app's current screen shows, one string per terminal row."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def notices(app: Any) -> list[str]:
    """The messages of the notifications the app has shown."""
    return [str(note.message) for note in app._notifications]


class RecordingSignaller:
    """Stands where gputop.app.signalling.ProcessSignaller stands: records what `k` sends; a
    `refuse` reason stands for the kernel's answer about a process that is not ours."""

    def __init__(self, refuse: str | None = None) -> None:
        self.refuse = refuse
        self.sent: list[tuple[list[tuple[int, int]], int]] = []

    def refusal(self, targets: Any) -> str | None:
        return self.refuse

    def send(self, targets: Any, signum: int) -> str | None:
        self.sent.append((list(targets), signum))
        return self.refuse
