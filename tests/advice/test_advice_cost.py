"""The advice's work per tick is counted, not timed: one pass over the rows however many
rules ask, and none over a derived trainer's window (the sampler keeps its totals)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from gputop.advice import context, evaluate
from gputop.advice.context import Context, WorkerLoad, step_shape
from gputop.core.model import AttachState, Frame, ProcessSample, StepRecord
from gputop.frames.derive import Derivation
from tests.helpers.builders import attached, frame, process, trainer_with_workers


class CountingRows(tuple[ProcessSample, ...]):
    """A frame's process rows that count the passes made over them."""

    passes = 0

    def __iter__(self) -> Iterator[ProcessSample]:
        type(self).passes += 1
        return super().__iter__()


def test_looking_up_rows_by_pid_passes_over_the_rows_once() -> None:
    rows, group = trainer_with_workers(10, workers=4, worker_cpu=97.0)
    others = [process(pid, cpu=1.0) for pid in range(1000, 1600)]
    f = frame(processes=rows + others, trainers=(group,))
    CountingRows.passes = 0
    ctx = Context(replace(f, processes=CountingRows(f.processes)), {})
    found = [ctx.process(pid) for pid in (10, 11, 12, 13, 14, 1599, 1600) * 3]
    assert [r.pid if r else None for r in found[:7]] == [10, 11, 12, 13, 14, 1599, None]
    assert CountingRows.passes <= 1


class CountingSteps(tuple[StepRecord, ...]):
    """A trainer's window that counts the passes made over its steps."""

    passes = 0

    def __iter__(self) -> Iterator[StepRecord]:
        type(self).passes += 1
        return super().__iter__()


def _data_bound_trainer(n: int = 50) -> tuple[Frame, AttachState]:
    """A frame with a data-bound trainer of two busy workers among 600 other processes,
    its window of `n` steps as the sampler derives it tick after tick (config without a
    batch size)."""
    rows, group = trainer_with_workers(10, workers=2, worker_cpu=97.0)
    others = [process(pid, cpu=60.0 if pid % 7 == 0 else 1.0) for pid in range(1000, 1600)]
    raw = attached(10, data_ms=60, compute_ms=40, num_workers=2, n=n + 10)
    derive = Derivation()
    for tick in range(2):  # a tick, then one with 10 more steps closed: the window is kept
        (state,), _ = derive.attached((replace(raw, steps=raw.steps[10 * tick:][:n]),), 0)
    f = frame(processes=rows + others, trainers=(group,), cores=16, cpu_percent=25.0,
              attach=(state,))
    return f, state


def test_every_rule_shares_one_step_shape_per_trainer() -> None:
    """A state built without the sampler's totals: its window is summed once, not once per
    rule that asks."""
    f, derived = _data_bound_trainer()
    state = replace(derived, steps=CountingSteps(derived.steps), part_totals=None)
    CountingSteps.passes = 0
    found = {a.id for a in evaluate(Context(replace(f, attached=(state,)), {}))}
    assert "raise-num-workers" in found
    assert CountingSteps.passes <= 1
    shape = step_shape(state)
    assert shape is not None and round(shape.input_ms) == 60 and round(shape.compute_ms) == 40


def test_the_advice_walks_no_window_of_a_derived_trainer() -> None:
    """The sampler keeps the window's part totals beside its summary: a tick's advice
    passes over none of its steps (it walked all 256 of them each tick)."""
    f, derived = _data_bound_trainer(n=256)
    assert derived.part_totals is not None
    state = replace(derived, steps=CountingSteps(derived.steps))
    CountingSteps.passes = 0
    found = evaluate(Context(replace(f, attached=(state,)), {}))
    assert CountingSteps.passes == 0
    assert found == evaluate(Context(f, {}))
    assert "raise-num-workers" in {a.id for a in found}
    assert step_shape(state) == step_shape(replace(state, part_totals=None))


def test_the_advice_passes_over_the_process_rows_once() -> None:
    """The busy processes the job's CPU is judged against come from one pass over the
    frame's ~600 rows, however many rules ask; rows by PID from the sampler's index (no
    pass), or, for a frame without one, from one more pass made on first use."""
    f, _ = _data_bound_trainer()
    rows = CountingRows(f.processes)
    placed = replace(f, processes=rows,
                     process_index=(rows, {row.pid: at for at, row in enumerate(f.processes)}))
    CountingRows.passes = 0
    found = evaluate(Context(placed, {}))
    assert CountingRows.passes == 1
    assert found == evaluate(Context(f, {}))
    CountingRows.passes = 0
    assert evaluate(Context(replace(f, processes=CountingRows(f.processes)), {})) == found
    assert CountingRows.passes == 2


def test_every_rule_shares_one_worker_load_per_trainer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The three num_workers rules and the I/O rule read the same workers' load: it is
    averaged once a tick, not once per rule that asks."""
    f, _ = _data_bound_trainer()
    made = 0
    real = context.worker_load

    def counting(ctx: Context, pid: int) -> WorkerLoad | None:
        nonlocal made
        made += 1
        return real(ctx, pid)

    monkeypatch.setattr(context, "worker_load", counting)
    found = evaluate(Context(f, {}))
    assert "raise-num-workers" in {a.id for a in found}
    assert made == 1
