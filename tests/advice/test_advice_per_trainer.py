"""Advice about a trainer names that trainer, and two trainers with the same problem get one
piece of advice each (an exporter labels them `trainer`; neither hides the other)."""

from __future__ import annotations

from gputop.advice import Advisor
from tests.helpers.builders import attached, frame


def test_each_trainer_gets_its_own_advice_with_its_pid() -> None:
    one = attached(100, data_ms=80, compute_ms=20, num_workers=0)
    two = attached(200, data_ms=80, compute_ms=20, num_workers=0)
    shown = Advisor(on_after=1)(frame(attach=(one, two)))
    zero = [a for a in shown if a.id == "num-workers-zero"]
    assert sorted(a.trainer_pid or 0 for a in zero) == [100, 200]  # None would give 0


def test_host_wide_advice_names_no_trainer() -> None:
    shown = Advisor(on_after=1)(frame(attach=(attached(100, data_ms=80, compute_ms=20,
                                                       num_workers=0),), swap_used=1 << 30))
    assert all(a.trainer_pid is None for a in shown if a.id != "num-workers-zero")
    assert [a.trainer_pid for a in shown if a.id == "num-workers-zero"] == [100]
