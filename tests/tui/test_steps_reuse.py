"""The steps pane is drawn every frame from a window that differs from the last by a few
steps: a frame costs those steps, not the window, and draws exactly what drawing from
scratch draws."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterator
from dataclasses import replace

import pytest

from gputop.core.model import AttachState, StepRecord
from gputop.tui.views import steps as steps_view
from gputop.tui.views.steps import step_lines
from tests.helpers.spy import spy
from tests.helpers.tui import MS, steps

WINDOW = 256


@pytest.fixture
def phase_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many times a step's unmeasured rest (other_ns, a phase every walk reads) was read."""
    reads = [0]
    other_ns = vars(StepRecord)["other_ns"]
    assert isinstance(other_ns, property) and other_ns.fget is not None
    getter = other_ns.fget

    def counted(step: StepRecord) -> int:
        reads[0] += 1
        return getter(step)

    monkeypatch.setattr(StepRecord, "other_ns", property(counted))
    yield reads


def _slid() -> tuple[AttachState, AttachState]:
    """A trainer's window, then the next frame's: one step arrived, the oldest left (the
    longest of the shown steps stays the same: step times repeat every 5 steps)."""
    state = steps(4242, n=WINDOW + 1)
    return replace(state, steps=state.steps[:WINDOW]), replace(state, steps=state.steps[1:])


def test_the_legend_reads_the_steps_that_came_not_the_window(phase_reads: list[int]) -> None:
    before, after = _slid()
    step_lines((before,), 120, 16)
    phase_reads[0] = 0
    step_lines((after,), 120, 16)
    assert phase_reads[0] <= 2, phase_reads  # the new step: its legend pattern and its bar


def test_a_step_line_is_drawn_once_while_it_stays_on_screen(
        monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: list[int] = []
    monkeypatch.setattr(steps_view, "step_line", spy(
        steps_view.step_line, lambda step, *args: drawn.append(step.step)))
    before, after = _slid()
    shown = len(step_lines((before,), 120, 16)) - steps_view.HEAD_LINES
    assert len(drawn) == shown > 1
    drawn.clear()
    step_lines((after,), 120, 16)
    assert drawn == [after.steps[-1].step]


def _windows(seed: int) -> Iterator[tuple[AttachState, int, int]]:
    """Frames of one trainer whose windows slide, jump and shrink, whose phases come and go,
    at changing sizes: (state, width, height)."""
    rng = random.Random(seed)
    base = steps(4242, n=1)
    made: deque[StepRecord] = deque(maxlen=40)
    number = 0
    for _ in range(120):
        for _ in range(rng.choice((0, 0, 1, 2, 5, 50))):
            number += 1
            data = rng.choice((None, 0, rng.randrange(1, 40) * MS))
            made.append(StepRecord(
                step=number, duration_ns=rng.randrange(0, 90) * MS, data_ns=data,
                h2d_ns=rng.choice((None, 2 * MS)), forward_ns=rng.choice((None, 20 * MS)),
                backward_ns=20 * MS, optimizer_ns=rng.choice((None, 0, 5 * MS)),
                warmup=number < 3, implicit=rng.random() < 0.2,
                verdict=rng.choice(("data-bound", "compute-bound", "unknown")),
                input_outside_model=rng.random() < 0.05))
        window = tuple(made)
        if rng.random() < 0.1:
            window = window[rng.randrange(len(window) + 1):]  # the front cut, not slid
        unmeasured = "no loader" if rng.random() < 0.3 else None
        summary = replace(base.summary, unmeasured_reason=unmeasured)
        yield (replace(base, steps=window, summary=summary), rng.choice((60, 90, 90, 140)),
               rng.choice((6, 12, 12, 20)))


@pytest.mark.parametrize("seed", range(4))
def test_kept_lines_are_the_lines_drawn_from_scratch(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    kept = steps_view._Drawn()
    for state, width, height in _windows(seed):
        monkeypatch.setattr(steps_view, "_LAST", steps_view._Drawn())
        fresh = step_lines((state,), width, height)
        monkeypatch.setattr(steps_view, "_LAST", kept)
        assert step_lines((state,), width, height) == fresh
        assert steps_view.legend_line(state.steps) == _legend_from_scratch(state.steps)


def _legend_from_scratch(window: tuple[StepRecord, ...]) -> tuple[tuple[str, str], ...]:
    """The legend as it was drawn before it was kept: every step's phases looked at."""
    names = ("data", "h2d", "forward", "backward", "optimizer", "other")
    measured = {name for step in window for name in names if getattr(step, f"{name}_ns")}
    outside = any(step.input_outside_model for step in window)
    spans: list[tuple[str, str]] = []
    for name in names:
        if name in measured:
            label = "input" if outside and name == "data" else steps_view._LABELS[name]
            spans += [("█", f"phase-{name}"), (f"{label} ", "dim")]
    return tuple(spans)
