"""The trainers in a recording (the attached ones and their steps, and every trainer's
group of workers): how they are stored, and decoded for the reader (gputop/recording/reader.py).

A recording stores a tick's new steps of a trainer as runs of consecutive steps, each run one
`step_ticks` row whose BLOB holds a STEP_TICK record per step (the numbers in ns, exact;
its end as an offset from the run's first end; its flags and verdict in a byte), and the
run's step number, epoch and batch size once. A step a record cannot hold exactly (a phase
of 4.3 s or more) is a run of its own in a STEP_WIDE record (8 bytes a field, a BLOB length
no run of STEP_TICK records has), so one view reads every step. Each tick's attached
trainers are one `attach_ticks` BLOB (ATTACH_TICK records, in screen order); what rarely
changes (dropped records, settings, error) is a `trainer_changes` row when it changes. A
tick's trainer groups are one `group_ticks` BLOB (GROUP_TICK: the numbers that move), their
workers, pin-memory thread and launcher a `group_changes` row when they change. The `steps`,
`trainer_ticks` and `trainer_groups` views give a row per step, attached trainer and group
back for SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gputop.core.model import StepRecord
from gputop.recording.packing import Packing, unpacked_view

STEP_FLAGS = ("warmup", "implicit", "input_outside_model", "at_backward")
FLAG_BITS = (1 << len(STEP_FLAGS)) - 1  # `marks`: the flags, then the verdict's code above them
# a step's verdict by its code
VERDICTS = ("unknown", "data-bound", "compute-bound", "host-bound", "cpu-starved")
TRAINER_STATES = ("running", "stalled", "exited", "evaluating", "saving")
ALIVE = 8  # ATTACH_TICK `state` bit: the process is alive (the low bits: TRAINER_STATES)
STATE_BITS = ALIVE - 1
RUN_STEPS = 64  # steps a `step_ticks` row holds at most
STEP_PHASES = ("duration_ns", "data_ns", "h2d_ns", "forward_ns", "backward_ns",
               "optimizer_ns", "gpu_ns", "gpu_gap_ns")
STEP_PARTITION = ("host_ns", "sync_ns")  # the rest of the step's partition, in ns too
# The stack sampler's counts, and its sites as `texts` ids (of "function (file:line)"); then
# the host and data parts' samples, all their sites (0 in both: unknown)
STEP_SAMPLED = (("samples", 2), ("host_site", 4), ("host_site_samples", 2), ("data_site", 4),
                ("data_site_samples", 2), ("host_samples", 2), ("data_samples", 2))
STEP_SITES = ("host_site", "data_site")
# A step in `step_ticks.steps`: its end after the run's `end_ns`, its phases, `marks` (the
# flags, STEP_FLAGS bits, plus the verdict's code in VERDICTS above them), its partition's
# other phases, its samples.
STEP_TICK = Packing((("end_offset_ns", 4), *((name, 4) for name in STEP_PHASES),
                     ("marks", 1), *((name, 4) for name in STEP_PARTITION), *STEP_SAMPLED))
STEP_WIDE = Packing((("end_offset_ns", 8), *((name, 8) for name in STEP_PHASES),
                     ("marks", 1), *((name, 8) for name in STEP_PARTITION), *STEP_SAMPLED))
STEP_TIMES = (*STEP_PHASES, *STEP_PARTITION)  # what a wide record holds wider
# a wide record's length is never that of a run of narrow ones: the view tells them apart so
assert all(STEP_WIDE.size != n * STEP_TICK.size for n in range(1, 65))
# A trainer attached at a tick, in `attach_ticks.trainers` (idle: to the ms up to 2.3 h,
# whole seconds beyond).
ATTACH_TICK = Packing((("trainer", 3), ("state", 1), ("idle_ms", 3, 1000),
                       ("first_step", 4), ("last_step", 4)))
# A trainer group at a tick, in `group_ticks.groups`.
GROUP_TICK = Packing((("pid", 4), ("workers_cpu_percent_x10", 3), ("num_threads_total", 2)))


@dataclass
class StepRun:
    """Consecutive steps of one trainer stored as one `step_ticks` row (a wide one: a step
    alone, in a STEP_WIDE record)."""

    first: StepRecord
    wide: bool = False
    records: list[tuple[int | None, ...]] = field(default_factory=list)

    def takes(self, step: StepRecord) -> bool:
        """Whether `step` can follow this run's steps in its row."""
        first = self.first
        if (self.wide or step.step != first.step + len(self.records)
                or len(self.records) >= RUN_STEPS
                or (step.epoch, step.batch_size) != (first.epoch, first.batch_size)):
            return False
        if step.end_ns is None:
            return True
        return first.end_ns is not None and STEP_TICK.exact("end_offset_ns",
                                                             step.end_ns - first.end_ns)

    def row(self, trainer: int, fid: int) -> tuple[object, ...]:
        """The run as a `step_ticks` row."""
        first = self.first
        return (trainer, first.step, fid, first.end_ns, first.epoch, first.batch_size,
                (STEP_WIDE if self.wide else STEP_TICK).pack(self.records))


def step_runs(steps: Iterable[StepRecord],
              text_id: Callable[[str | None], int | None] = lambda site: None) -> list[StepRun]:
    """`steps` (in order) as runs of records; `text_id` stores a sampled site's text."""
    runs: list[StepRun] = []
    for step in steps:
        phases = tuple(getattr(step, name) for name in STEP_PHASES)
        partition = tuple(getattr(step, name) for name in STEP_PARTITION)
        if not all(STEP_TICK.exact(name, value) for name, value in
                   zip(STEP_TIMES, (*phases, *partition), strict=True)):
            runs.append(StepRun(step, wide=True))
        elif not runs or not runs[-1].takes(step):
            runs.append(StepRun(step))
        run = runs[-1]
        offset = None if step.end_ns is None or run.first.end_ns is None else (
            step.end_ns - run.first.end_ns)
        verdict = VERDICTS.index(step.verdict) if step.verdict in VERDICTS else 0
        run.records.append((offset, *phases, step_flags(step) | (FLAG_BITS + 1) * verdict,
                            *partition, step.samples, text_id(step.host_site),
                            step.host_site_samples, text_id(step.data_site),
                            step.data_site_samples, step.host_samples, step.data_samples))
    return runs


def step_flags(step: StepRecord) -> int:
    """The step's flags as bits, in STEP_FLAGS order (1 warm-up, 2 implicit, 4 input outside,
    8 closed at backward)."""
    return (int(step.warmup) | int(step.implicit) << 1 | int(step.input_outside_model) << 2
            | int(step.at_backward) << 3)


def run_steps(first_step: int, fid: int, end_ns: int | None, epoch: int, batch: int | None,
              blob: bytes) -> list[tuple[Any, ...]]:
    """A `step_ticks` row's steps, each as StepRow's fields (gputop/recording/rows.py; its
    sites still `texts` ids)."""
    rows = []
    packing = STEP_WIDE if len(blob) == STEP_WIDE.size else STEP_TICK
    marks_at = len(STEP_PHASES) + 1
    for i, values in enumerate(packing.unpack(blob)):
        offset, phases, marks = values[0], values[1:marks_at], values[marks_at] or 0
        end = None if offset is None or end_ns is None else end_ns + offset
        code = marks >> len(STEP_FLAGS)
        rows.append((first_step + i, fid, end, *phases, batch, epoch, marks & FLAG_BITS,
                     VERDICTS[code] if code < len(VERDICTS) else "unknown",
                     *values[marks_at + 1 :]))
    return rows


def _groups_view() -> str:
    """The view giving a row per tick and trainer group."""
    columns = GROUP_TICK.sql_columns("t.groups", "d.i")
    change = ("c.frame = (SELECT max(frame) FROM group_changes WHERE pid = c.pid AND frame <= "
              "t.frame)")
    named = ["t.frame AS frame", f"{columns['pid']} AS pid", "c.workers_id AS workers_id",
             f"{columns['workers_cpu_percent_x10']} AS workers_cpu_percent_x10",
             f"{columns['num_threads_total']} AS num_threads_total",
             "c.pin_memory_thread AS pin_memory_thread", "c.launcher_pid AS launcher_pid"]
    return unpacked_view("trainer_groups", "group_ticks", "groups", GROUP_TICK, named,
                         f" LEFT JOIN group_changes c ON c.pid = {columns['pid']} AND {change}")


def _steps_view() -> str:
    """The view giving a row per stored step."""
    narrow = STEP_TICK.sql_columns("t.steps", "d.i")
    wide = STEP_WIDE.sql_columns("t.steps", "0")
    columns = {name: f"CASE WHEN length(t.steps) = {STEP_WIDE.size} THEN {wide[name]} ELSE "
                     f"{narrow[name]} END" for name in STEP_TICK.names}
    marks = columns["marks"]
    verdict = " ".join(f"WHEN {code} THEN '{name}'" for code, name in enumerate(VERDICTS))
    named = ["t.trainer AS trainer", "t.first_step + d.i AS step", "t.frame AS frame",
             f"t.end_ns + {columns['end_offset_ns']} AS end_ns",
             *(f"{columns[name]} AS {name}" for name in STEP_PHASES),
             "t.batch_size AS batch_size", "t.epoch AS epoch",
             f"({marks}) & {FLAG_BITS} AS flags",
             f"CASE ({marks}) >> {len(STEP_FLAGS)} {verdict} ELSE 'unknown' END AS verdict",
             *(f"{columns[name]} AS {name}" for name in STEP_PARTITION),
             *(f"(SELECT json_extract(x.text, '$') FROM texts x WHERE x.id = {columns[name]})"
               f" AS {name}" if name in STEP_SITES else f"{columns[name]} AS {name}"
               for name, _ in STEP_SAMPLED)]
    return ("CREATE VIEW IF NOT EXISTS steps AS WITH RECURSIVE d(i) AS (SELECT 0 UNION ALL "
            f"SELECT i + 1 FROM d WHERE i + 1 < {RUN_STEPS}) SELECT {', '.join(named)} "
            f"FROM step_ticks t CROSS JOIN d WHERE d.i < length(t.steps) / {STEP_TICK.size};\n")


def _trainer_ticks_view() -> str:
    """The view giving a row per tick and attached trainer."""
    columns = ATTACH_TICK.sql_columns("t.trainers", "d.i")
    state = columns["state"]
    words = " ".join(f"WHEN {code} THEN '{name}'" for code, name in enumerate(TRAINER_STATES))
    change = ("c.frame = (SELECT max(frame) FROM trainer_changes WHERE trainer = c.trainer "
              "AND frame <= t.frame)")
    named = ["t.frame AS frame", "d.i AS position", f"{columns['trainer']} AS trainer",
             f"CASE ({state}) & {STATE_BITS} {words} END AS state",
             f"{columns['idle_ms']} AS idle_ms",
             f"(({state}) & {ALIVE}) / {ALIVE} AS alive", "c.dropped_records AS dropped_records",
             f"{columns['first_step']} AS first_step", f"{columns['last_step']} AS last_step",
             "c.config_id AS config_id", "c.error_id AS error_id"]
    return unpacked_view("trainer_ticks", "attach_ticks", "trainers", ATTACH_TICK, named,
                         f" LEFT JOIN trainer_changes c ON c.trainer = {columns['trainer']} "
                         f"AND {change}")


TRAINER_TABLES = """
CREATE TABLE IF NOT EXISTS trainers (
    id INTEGER PRIMARY KEY,
    pid INTEGER NOT NULL,
    first_frame INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS group_ticks (
    frame INTEGER PRIMARY KEY,
    groups BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS group_changes (
    pid INTEGER NOT NULL,
    frame INTEGER NOT NULL,
    workers_id INTEGER NOT NULL,
    pin_memory_thread INTEGER NOT NULL,
    launcher_pid INTEGER,
    PRIMARY KEY (pid, frame)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS attach_ticks (
    frame INTEGER PRIMARY KEY,
    trainers BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS trainer_changes (
    trainer INTEGER NOT NULL,
    frame INTEGER NOT NULL,
    dropped_records INTEGER NOT NULL,
    config_id INTEGER,
    error_id INTEGER,
    PRIMARY KEY (trainer, frame)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS step_ticks (
    trainer INTEGER NOT NULL,
    first_step INTEGER NOT NULL,
    frame INTEGER NOT NULL,
    end_ns INTEGER,
    epoch INTEGER NOT NULL,
    batch_size INTEGER,
    steps BLOB NOT NULL,
    PRIMARY KEY (trainer, first_step)
) WITHOUT ROWID;
""" + _groups_view() + _steps_view() + _trainer_ticks_view()


def attach_state(code: int | None) -> tuple[str, bool]:
    """An ATTACH_TICK `state` read back: the trainer's state and whether it was alive."""
    state = (code or 0) & STATE_BITS
    return (TRAINER_STATES[state] if state < len(TRAINER_STATES) else "exited",
            bool((code or 0) & ALIVE))


def attach_record(trainer: int, state: str, alive: bool, idle_ms: int | None,
                  window: Sequence[StepRecord]) -> tuple[int | None, ...]:
    """An attached trainer's ATTACH_TICK record."""
    code = TRAINER_STATES.index(state) if state in TRAINER_STATES else 2
    return (trainer, code | (ALIVE if alive else 0), idle_ms,
            window[0].step if window else None, window[-1].step if window else None)
