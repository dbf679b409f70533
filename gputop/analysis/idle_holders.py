"""GPU holders that do nothing: memory held, no util, no steps, no CPU; and how long idle."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gputop.core.model import AttachState, Frame, GpuSample, ProcessSample, TrainerGroup

IDLE_UTIL = 10.0  # % util (the GPU's, and the process's own SM share) that counts as none
BUSY_CPU_PERCENT = 5.0  # % of a core a holder and its workers use when they do work
MIN_HELD_BYTES = 256 * 1024**2  # less is a CUDA context at most
KERNEL_MARKS = ("ipykernel_launcher", "ipykernel", "jupyter")
STOPPED_STATES = ("T", "t")
BLOCKED_STATE = "D"


def family_cpu(row: ProcessSample, group: TrainerGroup | None) -> float | None:
    """The CPU (% of one core) `row` used this tick with its DataLoader workers; None: unknown."""
    if row.cpu_percent is None:
        return None
    return row.cpu_percent + (group.workers_cpu_percent if group is not None else 0.0)


class IdleClock:
    """Per GPU holder, since when it used no CPU (monotonic s), as long as it was watched."""

    def __init__(self) -> None:
        self._since: dict[tuple[int, int], float] = {}
        self._last: float | None = None  # the previous tick

    def idle_s(self, rows: Sequence[ProcessSample], groups: Mapping[int, TrainerGroup],
               now: float) -> dict[int, float]:
        """Seconds each holder in `rows` has used no CPU (0.0: it used some this tick); a
        holder whose CPU is unknown this tick is left out. Only `rows`' holders are kept."""
        since: dict[tuple[int, int], float] = {}
        out: dict[int, float] = {}
        for row in rows:
            cpu = family_cpu(row, groups.get(row.pid))
            if cpu is None:
                continue
            if cpu > BUSY_CPU_PERCENT:
                since[row.key] = now
                out[row.pid] = 0.0
                continue
            # Idle this interval: idle since it began, or since it was last seen busy.
            start = self._since.get(row.key, self._last if self._last is not None else now)
            since[row.key] = start
            out[row.pid] = max(0.0, now - start)
        self._since, self._last = since, now
        return out


@dataclass(frozen=True, slots=True)
class IdleHolder:
    """A process holding GPU memory and doing nothing with it."""

    gpu: GpuSample
    row: ProcessSample
    held_bytes: int
    idle_s: float  # no CPU (and no step) for at least this long
    last_step_s: float | None  # an attached trainer's newest step closed this long ago
    kind: str  # "jupyter", "stopped", "blocked", "stalled" or "idle"

    @property
    def alone(self) -> bool:
        """Whether it is the only process holding memory on its GPU."""
        return all(p.pid == self.row.pid for p in self.gpu.processes)


def kind_of(row: ProcessSample, state: AttachState | None) -> str:
    """What an idle holder is, from its state, its command line and its probe."""
    if row.state in STOPPED_STATES:
        return "stopped"
    if row.state == BLOCKED_STATE:
        return "blocked"
    if any(mark in arg for arg in row.cmdline for mark in KERNEL_MARKS):
        return "jupyter"
    if state is not None and state.steps:
        return "stalled"
    return "idle"


def stepping(state: AttachState | None) -> bool:
    """Whether an attached trainer makes progress: evaluating or saving (its own states say
    so, steps or not), running with steps, or in a step still computing."""
    if state is None or state.state in ("stalled", "exited"):
        return False
    if state.state in ("evaluating", "saving"):
        return True
    return bool(state.steps) or state.step_in_progress_s is not None


def gpu_quiet(gpu: GpuSample, history: Sequence[float]) -> bool:
    """The GPU's util stayed at IDLE_UTIL or below over `history` (and now)."""
    utils = [*history, *(() if gpu.util_percent is None else (gpu.util_percent,))]
    return bool(utils) and max(utils) <= IDLE_UTIL


def idle_holders(frame: Frame, history: Mapping[int, Sequence[float]]) -> list[IdleHolder]:
    """Each process that holds memory on a quiet GPU, its own SM share at about zero, with no
    steps and no CPU use this tick (measured: a process /proc does not show is never idle)."""
    states = {s.pid: s for s in frame.attached}
    out = []
    for gpu in frame.gpu.gpus:
        if gpu.lost or not gpu_quiet(gpu, history.get(gpu.index, ())):
            continue
        for proc in gpu.processes:
            row = frame.process(proc.pid)
            held = proc.memory_used_bytes
            if (row is None or not row.in_proc or held is None or held < MIN_HELD_BYTES
                    or (proc.sm_util_percent or 0.0) > IDLE_UTIL):
                continue
            state = states.get(row.pid)
            if stepping(state) or row.cpu_idle_s is None:
                continue
            if row.cpu_idle_s <= 0.0 and row.state not in STOPPED_STATES:
                continue  # it used CPU this tick (a stopped process cannot)
            last_step = state.idle_s if state is not None and state.steps else None
            out.append(IdleHolder(gpu, row, held, row.cpu_idle_s, last_step,
                                  kind_of(row, state)))
    return out


def active_holder(frame: Frame, gpu: GpuSample) -> bool | None:
    """Whether a process on `gpu` steps or uses CPU this tick; None when none is visible (no
    process listed, or only ones /proc does not show): then who holds it is unknown."""
    states = {s.pid: s for s in frame.attached}
    groups = {t.pid: t for t in frame.trainers}
    known = False
    for proc in gpu.processes:
        row = frame.process(proc.pid)
        if row is None or not row.in_proc:
            continue
        known = True
        cpu = family_cpu(row, groups.get(row.pid))
        if stepping(states.get(row.pid)) or cpu is None or cpu > BUSY_CPU_PERCENT:
            return True  # an unknown rate is not called idle
    return None if not known else False
