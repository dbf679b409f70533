"""The advice's work per tick is counted, not timed: one pass over the rows, one over the
window's steps, however many rules ask."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gputop.advice import context, evaluate
from gputop.advice.context import Context, step_shape
from gputop.model import ProcessSample
from tests.helpers.builders import attached, frame, process, trainer_with_workers


class CountingRows(tuple[ProcessSample, ...]):
    """A frame's process rows that count the passes made over them."""

    passes = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
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


def test_every_rule_shares_one_step_shape_per_trainer(monkeypatch: pytest.MonkeyPatch) -> None:
    rows, group = trainer_with_workers(10, workers=2, worker_cpu=97.0)
    state = attached(10, data_ms=60, compute_ms=40, num_workers=2, batch_size=64, n=50)
    f = frame(processes=rows, trainers=(group,), cores=16, cpu_percent=25.0, attach=(state,))
    calls = 0
    real_split = context.split

    def counting_split(step):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        return real_split(step)

    monkeypatch.setattr(context, "split", counting_split)
    found = {a.id for a in evaluate(Context(f, {}))}
    assert "raise-num-workers" in found
    assert calls <= 50  # one pass over the 50 steps, not one per rule that asks
    shape = step_shape(f.attached[0])
    assert shape is not None and round(shape.input_ms) == 60 and round(shape.compute_ms) == 40
