"""The facts a Frame carries that are derived, not measured, computed once per tick.

Sources return raw facts; the sampler hands them here, and renderers and advice only
read the results: roles and trainer groups, each attached trainer's step verdicts, window
summary and state, the straggler. A recording played back is derived here too (`recorded`), so
a replay names the straggler and the verdicts the live view named.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

from gputop.analysis import grouping, idle_holders, starvation, step_window, steps
from gputop.core.model import (
    AttachState,
    CpuStarvation,
    GpuReport,
    InputStraggler,
    ProcessSample,
    TrainerGroup,
)
from gputop.sources import cpu_quota
from gputop.sources.affinity import cpus_allowed
from gputop.sources.base import ProcessFacts, ProcessScan, ProcessWaits

LEGACY_TORCH = (2, 5)  # torch below this names no DataLoader threads
CORES_REREAD_S = 10.0
MAX_CORES_KEPT = 256  # trainers whose allowed cores are remembered (gone ones drop out)


class Derivation:
    """Derives each tick's facts, keeping what makes the next tick cheap (roles, rows,
    step verdicts)."""

    def __init__(self) -> None:
        self._grouping = grouping.Grouping()
        self._inputs: tuple[frozenset[int], frozenset[int]] | None = None
        self._involved: frozenset[int] = frozenset()  # PIDs the grouping rests on
        self._marked: dict[int, tuple[ProcessSample, ProcessSample]] = {}
        self._windows: dict[int, step_window.StepWindow] = {}  # trainer PID -> its window
        self._busy: dict[int, int] = {}  # trainer PID -> when it last used CPU (monotonic ns)
        self._starved: dict[int, CpuStarvation] = {}  # trainer PID -> this tick's finding
        self._idle = idle_holders.IdleClock()  # since when each GPU holder used no CPU
        self._cores: dict[int, tuple[float, float | None]] = {}  # trainer -> (read at, cores)

    def processes(
        self, scan: ProcessScan, probe_pids: frozenset[int], source: ProcessFacts
    ) -> tuple[tuple[ProcessSample, ...], tuple[TrainerGroup, ...]]:
        """Rows with roles, trainer links, probe marks and waits; one group per trainer.
        Each row is looked at once: only the few with a role or a probe are touched."""
        rows = scan.rows
        gpu_pids = scan.gpu_pids
        if gpu_pids is None:
            gpu_pids = frozenset([r.pid for r in rows
                                  if r.gpu_indices or r.gpu_memory_bytes is not None])
        inputs = (probe_pids, gpu_pids)  # what grouping reads besides the scan
        if inputs != self._inputs or (scan.changed and self._regroup(scan)):
            legacy = _legacy_workers(rows, source)
            self._grouping = grouping.classify(rows, probe_pids, legacy)
            self._inputs = inputs
            self._involved = grouping.involved(rows, self._grouping)
        groups = self._grouping
        trainers = [pid for pid, role in groups.roles.items() if role == "trainer"]
        waits = _waits(trainers, groups, source) if trainers else {}
        special = groups.roles.keys() | probe_pids
        marked: dict[int, tuple[ProcessSample, ProcessSample]] = {}
        positions = scan.positions
        if positions is None:  # a pass over every process
            out = tuple([self._mark(row, groups, probe_pids, waits, marked)
                         if row.pid in special else row for row in rows])
        else:  # the few special rows, found where the scan says they are
            changed = list(rows)
            for pid in special:
                at = positions.get(pid)
                if at is not None:
                    changed[at] = self._mark(rows[at], groups, probe_pids, waits, marked)
            out = tuple(changed)
        self._marked = marked
        self._starved = _starved(trainers, groups, waits, marked, out)
        if not trainers:
            return out, ()
        pins = source.threads_named(trainers, grouping.PIN_THREAD_COMM)
        members = {pid: marked[pid][1] for pid in groups.roles if pid in marked}
        return out, grouping.trainer_groups(groups, members, pins)

    def holders_idle(
        self, rows: tuple[ProcessSample, ...], gpu: GpuReport,
        positions: Mapping[int, int] | None, groups: Sequence[TrainerGroup], now: float,
    ) -> tuple[ProcessSample, ...]:
        """`rows` with each GPU holder's seconds without CPU, its workers' counted (`now`:
        the monotonic clock; `positions`: where each PID's row is, else looked for)."""
        pids = {p.pid for g in gpu.gpus for p in g.processes}
        if positions is None and pids:
            positions = {row.pid: at for at, row in enumerate(rows) if row.pid in pids}
        places = {pid: at for pid in pids if (at := (positions or {}).get(pid)) is not None}
        holders = [rows[at] for at in places.values() if rows[at].in_proc]
        idle = self._idle.idle_s(holders, {g.pid: g for g in groups}, now)
        if not idle:
            return rows
        out = list(rows)
        for pid, seconds in idle.items():
            out[places[pid]] = replace(out[places[pid]], cpu_idle_s=seconds)
        return tuple(out)

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
        waits: dict[int, ProcessWaits], marked: dict[int, tuple[ProcessSample, ProcessSample]],
    ) -> ProcessSample:
        """`row` with its role, trainer, probe mark and waits (the same object while none of
        them changed); a row not waited keeps its own waits."""
        pid = row.pid
        wait = waits.get(pid)
        role = groups.role(pid)
        shown = (role, groups.trainer_of.get(pid), pid in probe_pids,
                 *(_row_waits(row) if wait is None else wait)[:5],
                 self._cores_allowed(pid) if role == "trainer" else row.cores_allowed)
        raw, done = self._marked.get(pid, (None, None))
        if raw is not row or done is None or _marks(done) != shown:
            done = replace(row, role=shown[0], trainer_pid=shown[1], has_probe=shown[2],
                           runqueue_wait_percent=shown[3], io_wait_percent=shown[4],
                           read_bytes_per_s=shown[5], main_thread_busy_percent=shown[6],
                           major_faults_per_s=shown[7], cores_allowed=shown[8])
        marked[pid] = (row, done)
        return done

    def _cores_allowed(self, pid: int) -> float | None:
        """The cores trainer `pid` may use (affinity capped by its cgroup's quota), read again
        every CORES_REREAD_S: they change when someone runs taskset or resizes a container."""
        now = time.monotonic()
        read_at, cores = self._cores.get(pid, (-CORES_REREAD_S, None))
        if now - read_at >= CORES_REREAD_S:
            cores = cpu_quota.cores_allowed(pid)
            if len(self._cores) > MAX_CORES_KEPT:
                self._cores.clear()
            self._cores[pid] = (now, cores)
        return cores

    def attached(
        self, states: Sequence[AttachState], now_ns: int,
        cpu: Mapping[int, float | None] | None = None,
    ) -> tuple[tuple[AttachState, ...], InputStraggler | None]:
        """Each trainer with its steps classified, its window summarized and its
        running/stalled/exited state; and the job's input straggler.

        `cpu`: each trainer's CPU this tick with its workers' (`trainer_cpu`; None or absent:
        not measured): a trainer that uses CPU makes progress even while no step closes."""
        windows = {}
        busy = {}
        out = []
        for state in states:
            pid = state.pid
            window = windows[pid] = self._windows.get(pid) or step_window.StepWindow()
            state = summarized(state, window)
            used = None if cpu is None else cpu.get(pid)
            seen = self._busy.get(pid)
            if used is not None:
                seen = now_ns if used > steps.BUSY_CPU_PERCENT else seen or 0  # 0: measured idle
            if seen is not None:
                busy[pid] = seen
            kind, idle_s = steps.trainer_state(state, now_ns, seen or None)
            starved = self._starved.get(pid)
            out.append(replace(state, state=kind, idle_s=idle_s,
                               step_in_progress_s=steps.step_in_progress_s(state, kind, idle_s),
                               cpu_starvation=starved,
                               summary=steps.with_starvation(state.summary, starved)))
        self._windows = windows  # only the current trainers' windows are kept
        self._busy = busy
        return tuple(out), job_straggler(out)


def trainer_cpu(
    pids: Sequence[int], rows: Sequence[ProcessSample], places: Mapping[int, int] | None,
    trainers: Sequence[TrainerGroup],
) -> dict[int, float | None]:
    """The CPU (% of one core) each of `pids` used this tick with its DataLoader workers; None
    where its row or its rate is unknown. `places`: where each PID's row is in `rows` (None:
    looked for, the rows of these PIDs only)."""
    if places is None:
        wanted = set(pids)
        places = {row.pid: at for at, row in enumerate(rows) if row.pid in wanted}
    workers = {group.pid: group.workers_cpu_percent for group in trainers}
    out: dict[int, float | None] = {}
    for pid in pids:
        at = places.get(pid)
        own = None if at is None else rows[at].cpu_percent
        out[pid] = None if own is None else own + workers.get(pid, 0.0)
    return out


def recorded(
    states: Sequence[AttachState],
) -> tuple[tuple[AttachState, ...], InputStraggler | None]:
    """A recorded tick's trainers derived as `Derivation.attached` derived them live, but for
    the state: the recorded one stands (it was judged against a clock the file does not hold).
    A file that does not say which job each trainer was in names no straggler (n/a)."""
    out = tuple(summarized(state, step_window.StepWindow()) for state in states)
    if any(state.job is None for state in out):
        return out, None
    return out, job_straggler(out)


def summarized(state: AttachState, window: step_window.StepWindow) -> AttachState:
    """`state` with its steps classified and summarized by `window` (the live sampler keeps
    each trainer's window across ticks, so a tick costs only the steps that changed)."""
    window.update(state.steps)  # costs the steps that closed or left since last tick
    return replace(state, steps=window.classified, summary=window.summary,
                   part_totals=window.totals, input_waits=window.waits)


def job_straggler(states: Sequence[AttachState]) -> InputStraggler | None:
    """The input straggler of the first job that has one, judged among that job's ranks only
    (trainers of different jobs wait for different loaders)."""
    jobs: dict[int | None, list[AttachState]] = {}
    for state in states:
        if state.judged:
            jobs.setdefault(state.job, []).append(state)
    for ranks in jobs.values():
        found = steps.input_straggler(ranks)
        if found is not None:
            return found
    return None


def _waits(trainers: Sequence[int], groups: grouping.Grouping,
           source: ProcessFacts) -> dict[int, ProcessWaits]:
    """The run-queue and I/O waits of each trainer and its workers (what the worker advice
    rests on); read for those processes only, so a tick costs the same with thousands of
    other processes."""
    return source.waits([*trainers, *(w for t in trainers for w in groups.workers_of.get(t, ()))])


def _starved(trainers: Sequence[int], groups: grouping.Grouping,
             waits: Mapping[int, ProcessWaits],
             marked: Mapping[int, tuple[ProcessSample, ProcessSample]],
             rows: Sequence[ProcessSample]) -> dict[int, CpuStarvation]:
    """Each trainer whose main thread waits for cores other processes hold, and why."""
    out = {}
    for pid in trainers:
        wait, row = waits.get(pid), marked.get(pid)
        if wait is None or row is None or wait.main_thread_wait_percent is None:
            continue
        workers = [marked[w][1] for w in groups.workers_of.get(pid, ()) if w in marked]
        found = starvation.cpu_starvation(row[1], wait.main_thread_wait_percent, workers, rows,
                                          cpus_allowed)
        if found is not None:
            out[pid] = found
    return out


def _row_waits(row: ProcessSample) -> ProcessWaits:
    """The waits a row carries (a row derive did not ask waits for keeps its own)."""
    return ProcessWaits(row.runqueue_wait_percent, row.io_wait_percent, row.read_bytes_per_s,
                        row.main_thread_busy_percent, row.major_faults_per_s)


def _marks(row: ProcessSample) -> tuple[object, ...]:
    """What _mark sets on a row: role, trainer, probe mark, the five waits, allowed cores."""
    return (row.role, row.trainer_pid, row.has_probe, row.runqueue_wait_percent,
            row.io_wait_percent, row.read_bytes_per_s, row.main_thread_busy_percent,
            row.major_faults_per_s, row.cores_allowed)


def _legacy_workers(rows: Sequence[ProcessSample], source: ProcessFacts) -> dict[int, int]:
    """Unnamed workers of trainers whose torch is too old to name its threads."""
    keep = {}
    for worker, trainer in grouping.legacy_candidates(rows).items():
        version = source.torch_version(trainer)
        if version is not None and grouping.torch_version_below(version, *LEGACY_TORCH):
            keep[worker] = trainer
    return keep
