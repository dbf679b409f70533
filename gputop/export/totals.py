"""Counters a single Frame cannot say, accumulated as frames arrive for `gputop serve`: the
steps each probed trainer closed since the exporter first saw it (with their step-time
buckets and phase times), and the CPU seconds of its workers, exited ones included."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gputop.core.model import AttachState, Frame, ProcessSample, StepRecord

STEP_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                  10.0, 30.0, 60.0)
PHASES = ("data", "h2d", "forward", "backward", "optimizer", "other")
NS = 1e-9


@dataclass
class StepTotals:
    """One probed trainer's steps since the exporter first saw it."""

    last_step: int = -1
    steps: int = 0
    duration_s: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * len(STEP_BUCKETS_S))
    phase_count: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    phase_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))

    def add(self, step: StepRecord) -> None:
        """Count a step and its measured phases (an unmeasured phase is not a zero)."""
        self.last_step = step.step
        self.steps += 1
        seconds = step.duration_ns * NS
        self.duration_s += seconds
        for i, bound in enumerate(STEP_BUCKETS_S):
            if seconds <= bound:
                self.buckets[i] += 1
        for phase, ns in _phases(step):
            if ns is not None:
                self.phase_count[phase] += 1
                self.phase_s[phase] += ns * NS


def _phases(step: StepRecord) -> tuple[tuple[str, int | None], ...]:
    return (("data", step.data_ns), ("h2d", step.h2d_ns), ("forward", step.forward_ns),
            ("backward", step.backward_ns), ("optimizer", step.optimizer_ns),
            ("other", step.other_ns))


@dataclass
class CpuTotals:
    """CPU seconds of a set of processes as a counter: exited members keep their share."""

    seconds: float = 0.0
    last: dict[tuple[int, int], float] = field(default_factory=dict)

    def update(self, rows: Iterable[ProcessSample]) -> None:
        """Add what each process used since the last frame (all of it for a new one)."""
        seen: dict[tuple[int, int], float] = {}
        for row in rows:
            if row.cpu_time_s is None:
                continue
            self.seconds += max(0.0, row.cpu_time_s - self.last.get(row.key, 0.0))
            seen[row.key] = max(row.cpu_time_s, self.last.get(row.key, 0.0))
        self.last = seen



class Totals:
    """Accumulates counters across frames, for trainers present in the newest one."""

    def __init__(self) -> None:
        self.steps: dict[int, StepTotals] = {}
        self.worker_cpu: dict[int, CpuTotals] = {}

    def update(self, frame: Frame) -> None:
        """Count new steps and worker CPU time; forget trainers that left the frame."""
        live = {a.pid for a in exported_attached(frame)}
        self.steps = {pid: t for pid, t in self.steps.items() if pid in live}
        for state in exported_attached(frame):
            totals = self.steps.setdefault(state.pid, StepTotals())
            for step in state.steps:
                if step.step > totals.last_step:
                    totals.add(step)
        groups = {g.pid: g for g in frame.trainers}
        self.worker_cpu = {pid: t for pid, t in self.worker_cpu.items() if pid in groups}
        rows = {r.pid: r for r in frame.processes}
        for pid, group in groups.items():
            workers = [rows[w] for w in group.worker_pids if w in rows]
            self.worker_cpu.setdefault(pid, CpuTotals()).update(workers)

    def snapshot(self) -> tuple[dict[int, StepTotals], dict[int, CpuTotals]]:
        """Copies the collector can render while the next frame is being counted."""
        steps = {pid: StepTotals(t.last_step, t.steps, t.duration_s, list(t.buckets),
                                 dict(t.phase_count), dict(t.phase_s))
                 for pid, t in self.steps.items()}
        cpu = {pid: CpuTotals(t.seconds) for pid, t in self.worker_cpu.items()}
        return steps, cpu


def exported_attached(frame: Frame) -> list[AttachState]:
    """Attached trainers that still run: an exited trainer's series go away with it."""
    return [a for a in frame.attached if a.state != "exited" and a.alive]
