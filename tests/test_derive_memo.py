"""A trainer's window costs the sampler only the steps that closed (or left) since the last
tick: an unchanged window is not looked at again, and a step that closed is classified and
summarized in alone, the rest of the window not walked again; counted by calls."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from gputop.analysis import steps
from gputop.frames import derive
from tests.helpers.builders import attached
from tests.helpers.spy import spy

WINDOW = 256


def _counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """Calls of steps.`name` from now on (one entry per call)."""
    calls: list[int] = []
    monkeypatch.setattr(steps, name, spy(getattr(steps, name), lambda *a, **k: calls.append(1)))
    return calls


def test_an_unchanged_window_is_not_summarized_again(monkeypatch: pytest.MonkeyPatch) -> None:
    splits = _counting(monkeypatch, "split")
    derivation = derive.Derivation()
    trainer = attached(10, data_ms=5, compute_ms=50, n=40)
    first, _ = derivation.attached((trainer,), time.monotonic_ns())
    looked = len(splits)
    again, _ = derivation.attached((replace(trainer),), time.monotonic_ns())  # same steps
    assert len(splits) == looked and again[0].summary == first[0].summary
    newer = replace(trainer, steps=(*trainer.steps[1:], replace(trainer.steps[-1], step=999)))
    moved, _ = derivation.attached((newer,), time.monotonic_ns())  # a step closed, one left
    assert moved[0].steps[-1].step == 999
    assert moved[0].summary == steps.summarize(newer.steps)


def test_a_tick_with_one_new_step_looks_at_that_step_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    classified = _counting(monkeypatch, "classify")
    splits = _counting(monkeypatch, "split")
    derivation = derive.Derivation()
    trainer = attached(10, data_ms=5, compute_ms=50, n=WINDOW)
    window = trainer.steps
    derivation.attached((trainer,), time.monotonic_ns())  # a whole window new: from scratch
    for tick in range(6):
        window = (*window[1:], replace(window[-1], step=WINDOW + tick))
        classified.clear()
        splits.clear()
        out, _ = derivation.attached((replace(trainer, steps=window),), time.monotonic_ns())
        if tick == 0:  # the window's values are gathered once, then kept
            continue
        assert len(classified) == 1, "only the new step is classified"
        assert len(splits) <= 2, f"{len(splits)} steps split for one new step"
        assert out[0].summary == steps.summarize(window)
