"""A named function's share of step time is its part's share (the probe's clocks) times its
samples over the part's samples, every function's in the part: a second function in the same
steps no longer lifts the top one to the whole part. Steps from a probe that did not count the
part's samples keep the earlier estimate (over the top functions' samples)."""

from __future__ import annotations

import pytest

from gputop.analysis.step_window import StepWindow
from gputop.analysis.steps import summarize
from gputop.core.model import StepRecord, StepSummary

MS = 1_000_000
GET_BATCH = "get_batch (train.py:116)"
TOKENIZE = "tokenize (train.py:40)"


def _step(n: int, *, site: str | None = GET_BATCH, site_samples: int = 4, host_samples: int = 6,
          data_site: str | None = None, data_site_samples: int = 0,
          data_samples: int = 0) -> StepRecord:
    """A 10 ms step: host 6 ms, input 1 ms, compute 3 ms, with its host and data samples."""
    return StepRecord(
        step=n, duration_ns=10 * MS, data_ns=1 * MS, forward_ns=2 * MS, backward_ns=1 * MS,
        host_ns=6 * MS, input_outside_model=data_site is not None,
        samples=host_samples + data_samples, host_site=site, host_site_samples=site_samples,
        data_site=data_site, data_site_samples=data_site_samples, host_samples=host_samples,
        data_samples=data_samples)


def _both(steps: list[StepRecord]) -> StepSummary:
    """The window summarized from scratch, checked equal to the step window's kept sums."""
    s = summarize(steps)
    window = StepWindow()
    for end in range(1, len(steps) + 1):  # a step a tick: the window keeps its sums
        window.update(tuple(steps[:end]))
    assert window.totals is not None and window.summary == s
    return s


def test_a_second_function_in_the_same_steps_is_not_counted_to_the_top_one() -> None:
    """Host 60 %: get_batch 4 samples and another function 2 in every step."""
    s = _both([_step(n) for n in range(40)])
    assert s.verdict == "host-bound" and s.host_percent == pytest.approx(60.0)
    assert s.host_site == GET_BATCH
    assert s.host_site_percent == pytest.approx(40.0)


def test_one_sample_a_step_alternating_functions_gets_each_its_share() -> None:
    """Short steps: one host sample each, get_batch in three steps of four, tokenize in one.
    Over the part's samples get_batch has 3/4 of the host's 60 %."""
    steps = [_step(n, site=TOKENIZE if n % 4 == 3 else GET_BATCH, site_samples=1,
                   host_samples=1) for n in range(40)]
    s = _both(steps)
    assert s.host_site == GET_BATCH
    assert s.host_site_percent == pytest.approx(60.0 * 3 / 4)


def test_a_steps_unnamed_samples_count_to_its_part() -> None:
    """Samples the site table could not name are still the part's time."""
    steps = [_step(n, site_samples=4, host_samples=8) for n in range(20)]
    steps += [_step(n, site=None, site_samples=0, host_samples=8) for n in range(20, 40)]
    s = _both(steps)
    assert s.host_site == GET_BATCH
    assert s.host_site_percent == pytest.approx(60.0 * 80 / 320)


def test_the_data_part_gets_its_share_the_same_way() -> None:
    steps = [_step(n, data_site="read_shard (data.py:12)", data_site_samples=3,
                   data_samples=4) for n in range(40)]
    s = _both(steps)
    assert s.data_site == "read_shard (data.py:12)"
    assert s.data_site_percent == pytest.approx(10.0 * 3 / 4)


def test_steps_without_the_parts_samples_keep_the_top_functions_estimate() -> None:
    """A probe before the count (0 in both): the share over the top functions' samples."""
    steps = [_step(n, site=TOKENIZE if n % 4 == 3 else GET_BATCH, host_samples=0)
             for n in range(40)]
    s = _both(steps)
    assert s.host_site == GET_BATCH
    assert s.host_site_percent == pytest.approx(60.0 * 30 / 40)
