"""Issue 13: a loop without a DataLoader has its input measured before the model's forward;
the verdict, the step pane and the text say "input (outside the model)", and no advice
tells it to change DataLoader settings it does not have."""

from __future__ import annotations

import json
import time
from dataclasses import replace

from gputop.advice import evaluate
from gputop.advice.context import Context
from gputop.advice.loader_rules import data_is_the_wait
from gputop.analysis.steps import summarize
from gputop.core.model import AttachState, Frame, StepRecord, TrainerConfig
from gputop.export.snapshot import dumps
from gputop.export.text import render
from gputop.tui.views.steps import legend_line, step_lines
from tests.helpers.builders import frame, trainer_with_workers

MS = 1_000_000


def _text(line) -> str:
    return "".join(text for text, _ in line)


def _loop(outside: bool, n: int = 40, data_ms: float = 30.0) -> tuple[StepRecord, ...]:
    """Whole steps, each opening where the previous closed: input, then forward/backward/
    optimizer of 10 ms; `outside`: flagged as the probe flags a loop without a loader."""
    duration = int((data_ms + 10.0) * MS)
    steps, t = [], time.monotonic_ns() - n * duration  # the newest step closed just now
    for i in range(n):
        steps.append(StepRecord(
            step=i, duration_ns=duration, data_ns=int(data_ms * MS), forward_ns=2 * MS,
            backward_ns=7 * MS, optimizer_ns=MS, end_ns=t + duration, implicit=outside,
            input_outside_model=outside, warmup=i < 3))
        t += duration
    return tuple(steps)


def _state(outside: bool) -> AttachState:
    steps = _loop(outside)
    return AttachState(41, TrainerConfig(device="cpu"), 0, steps, summarize(steps))


def _frame(state: AttachState) -> Frame:
    """The trainer's frame as the sampler makes it: its process grouped, no workers."""
    rows, group = trainer_with_workers(state.pid, workers=0, worker_cpu=0.0)
    return frame(processes=rows, trainers=(group,), attach=(state,), cores=8)


def test_the_summary_knows_its_input_is_outside_the_model() -> None:
    s = summarize(_loop(outside=True))
    assert s.input_outside_model and s.verdict == "data-bound"
    assert s.input_bound_percent is not None and round(s.input_bound_percent) == 75
    assert not summarize(_loop(outside=False)).input_outside_model


def test_pane_and_text_say_input_outside_the_model_not_a_loaders_wait() -> None:
    f = _frame(_state(outside=True))
    text = render(f)
    assert "input (outside the model) 75" in text and "input-bound" not in text
    pane = "\n".join(_text(line) for line in step_lines(f.attached, 120, 14))
    assert "input (outside the model) 75" in pane and "input-bound" not in pane
    legend = _text(legend_line(f.attached[0].steps))
    assert "input" in legend and "data" not in legend
    doc = json.loads(dumps(f))["attach"]
    assert doc["summary"]["input_outside_model"] is True
    assert all(step["input_outside_model"] for step in doc["steps"])


def test_a_data_bound_loop_without_a_dataloader_gets_no_dataloader_advice() -> None:
    found = {a.id for a in evaluate(Context(_frame(_state(outside=True)), {}))}
    assert not {"num-workers-zero", "raise-num-workers", "too-many-workers",
                "io-bound-loading", "pin-memory-off"} & found
    # the same window from a DataLoader loop is one the DataLoader rules speak for (whether
    # one fires then rests on the cores and CPU figures: tests/advice/test_worker_advice*)
    assert data_is_the_wait(_state(outside=False))
    assert not data_is_the_wait(_state(outside=True))


def test_pin_memory_advice_is_not_given_without_a_dataloader() -> None:
    state = _state(outside=True)
    steps = tuple(replace(s, h2d_ns=5 * MS) for s in state.steps)
    state = replace(state, steps=steps, summary=summarize(steps),
                    config=TrainerConfig(device="cuda:0", pin_memory=False))
    assert "pin-memory-off" not in {a.id for a in evaluate(Context(_frame(state), {}))}
