"""A trainer's window is summarized again only when a step closed (or left) since the last
tick: a slow step or a paused trainer costs no summary, counted by calls."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from gputop import derive
from gputop.analysis import steps
from tests.helpers.builders import attached


def test_an_unchanged_window_is_not_summarized_again(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[int] = []
    real = steps.summarize
    monkeypatch.setattr(steps, "summarize", lambda window: (made.append(len(window)),
                                                            real(window))[1])
    derivation = derive.Derivation()
    trainer = attached(10, data_ms=5, compute_ms=50, n=40)
    first, _ = derivation.attached((trainer,), time.monotonic_ns())
    again, _ = derivation.attached((replace(trainer),), time.monotonic_ns())  # same steps
    assert made == [40] and again[0].summary == first[0].summary
    newer = replace(trainer, steps=(*trainer.steps[1:], replace(trainer.steps[-1], step=999)))
    moved, _ = derivation.attached((newer,), time.monotonic_ns())  # a step closed, one left
    assert made == [40, 40] and moved[0].steps[-1].step == 999
