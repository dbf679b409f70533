"""The facts a Frame carries that are derived, not measured, computed once per tick.

Sources return raw facts; the sampler hands them here, and renderers and advice only
read the results: roles and trainer groups, each attached trainer's step verdicts, window
summary and state, the straggler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gputop.analysis import grouping, step_window, steps
from gputop.model import (
    AttachState,
    InputStraggler,
    ProcessSample,
    TrainerGroup,
)
from gputop.sources.base import ProcessScan, ProcessSource

LEGACY_TORCH = (2, 5)  # torch below this names no DataLoader threads


class Derivation:
    """Derives each tick's facts, keeping what makes the next tick cheap (roles, rows,
    step verdicts)."""

    def __init__(self) -> None:
        self._grouping = grouping.Grouping()
        self._inputs: tuple[frozenset[int], frozenset[int]] | None = None
        self._involved: frozenset[int] = frozenset()  # PIDs the grouping rests on
        self._marked: dict[int, tuple[ProcessSample, ProcessSample]] = {}
        self._windows: dict[int, step_window.StepWindow] = {}  # trainer PID -> its window

    def processes(
        self, scan: ProcessScan, probe_pids: frozenset[int], source: ProcessSource
    ) -> tuple[tuple[ProcessSample, ...], tuple[TrainerGroup, ...]]:
        """Rows with roles, trainer links and probe marks; one group per trainer."""
        rows = scan.rows
        gpu_pids = frozenset([r.pid for r in rows
                              if r.gpu_indices or r.gpu_memory_bytes is not None])
        inputs = (probe_pids, gpu_pids)  # what grouping reads besides the scan
        if inputs != self._inputs or (scan.changed and self._regroup(scan)):
            legacy = _legacy_workers(rows, source)
            self._grouping = grouping.classify(rows, probe_pids, legacy)
            self._inputs = inputs
            self._involved = grouping.involved(rows, self._grouping)
        groups = self._grouping
        special = groups.roles.keys() | probe_pids
        marked: dict[int, tuple[ProcessSample, ProcessSample]] = {}
        out = [self._mark(row, groups, probe_pids, marked) if row.pid in special else row
               for row in rows]  # runs over every process each tick: a comprehension
        self._marked = marked
        trainers = [pid for pid, role in groups.roles.items() if role == "trainer"]
        if not trainers:
            return tuple(out), ()
        out = _with_waits(out, trainers, groups, source)
        pins = source.threads_named(trainers, grouping.PIN_THREAD_COMM)
        members = {row.pid: row for row in out if row.pid in groups.roles}
        return tuple(out), grouping.trainer_groups(groups, members, pins)

    def _regroup(self, scan: ProcessScan) -> bool:
        """Whether what changed may change the grouping: a process that matters, or one
        whose parent matters (a would-be worker), appeared, moved or went."""
        if scan.moved is None:
            return True
        involved = self._involved
        return bool(scan.gone & involved) or any(
            row.pid in involved or row.ppid in involved or grouping.matters(row)
            for row in scan.moved)

    def _mark(
        self, row: ProcessSample, groups: grouping.Grouping, probe_pids: frozenset[int],
        marked: dict[int, tuple[ProcessSample, ProcessSample]],
    ) -> ProcessSample:
        """`row` with its role, trainer and probe mark (the same object while nothing changed)."""
        role, trainer, probe = groups.role(row.pid), groups.trainer_of.get(row.pid), (
            row.pid in probe_pids)
        raw, done = self._marked.get(row.pid, (None, None))
        if raw is not row or done is None or (done.role, done.trainer_pid, done.has_probe) != (
                role, trainer, probe):
            done = replace(row, role=role, trainer_pid=trainer, has_probe=probe)
        marked[row.pid] = (row, done)
        return done

    def attached(
        self, states: Sequence[AttachState], now_ns: int
    ) -> tuple[tuple[AttachState, ...], InputStraggler | None]:
        """Each trainer with its steps classified, its window summarized and its
        running/stalled/exited state; and the job's input straggler."""
        windows = {}
        out = []
        for state in states:
            window = self._windows.get(state.pid) or step_window.StepWindow()
            window.update(state.steps)  # costs the steps that closed or left since last tick
            windows[state.pid] = window
            state = replace(state, steps=window.classified, summary=window.summary,
                            part_totals=window.totals)
            kind, idle_s = steps.trainer_state(state, now_ns)
            out.append(replace(state, state=kind, idle_s=idle_s))
        self._windows = windows  # only the current trainers' windows are kept
        return tuple(out), _first_straggler(out)


def _with_waits(rows: list[ProcessSample], trainers: Sequence[int], groups: grouping.Grouping,
                source: ProcessSource) -> list[ProcessSample]:
    """`rows` with the run-queue and I/O waits of each trainer and its workers (what the
    worker advice rests on); read for those processes only, so a tick costs the same with
    thousands of other processes."""
    wanted = [*trainers, *(w for t in trainers for w in groups.workers_of.get(t, ()))]
    waits = source.waits(wanted)
    if not waits:
        return rows
    return [row if row.pid not in waits else replace(
        row, runqueue_wait_percent=waits[row.pid].runqueue_wait_percent,
        io_wait_percent=waits[row.pid].io_wait_percent,
        read_bytes_per_s=waits[row.pid].read_bytes_per_s,
        main_thread_busy_percent=waits[row.pid].main_thread_busy_percent) for row in rows]


def _first_straggler(states: Sequence[AttachState]) -> InputStraggler | None:
    """The input straggler of the first job that has one, judged among that job's ranks only
    (trainers of different jobs wait for different loaders)."""
    jobs: dict[int | None, list[AttachState]] = {}
    for state in states:
        if state.state != "stalled" and (state.alive or state.steps):
            jobs.setdefault(state.job, []).append(state)
    for ranks in jobs.values():
        found = steps.input_straggler(ranks)
        if found is not None:
            return found
    return None


def _legacy_workers(rows: Sequence[ProcessSample], source: ProcessSource) -> dict[int, int]:
    """Unnamed workers of trainers whose torch is too old to name its threads."""
    keep = {}
    for worker, trainer in grouping.legacy_candidates(rows).items():
        version = source.torch_version(trainer)
        if version is not None and grouping.torch_version_below(version, *LEGACY_TORCH):
            keep[worker] = trainer
    return keep
