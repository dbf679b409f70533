"""Step classification and window summaries, on hand-made steps."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, TypedDict

import pytest

from gputop.analysis.steps import (
    WAIT_FLOOR_NS,
    band,
    classified,
    classify,
    input_straggler,
    summarize,
    verdict_of,
    with_verdict,
)
from gputop.core.model import AttachState, StepRecord, StepSummary, TrainerConfig, Verdict

if TYPE_CHECKING:
    from typing import Unpack  # Python 3.11+; annotations only

MS = 1_000_000


class StepFields(TypedDict, total=False):
    """StepRecord's other fields, as keyword arguments to `_step`."""

    forward_ns: int | None
    backward_ns: int | None
    optimizer_ns: int | None
    gpu_ns: int | None
    gpu_gap_ns: int | None
    batch_size: int | None
    epoch: int
    verdict: Verdict
    end_ns: int | None
    implicit: bool
    input_outside_model: bool


def _step(i: int, duration: int, data: int | None, h2d: int | None = None,
          warmup: bool = False, **kw: Unpack[StepFields]) -> StepRecord:
    return StepRecord(step=i, duration_ns=duration, data_ns=data, h2d_ns=h2d, warmup=warmup,
                      **kw)


def test_input_is_data_plus_h2d_and_ties_are_data_bound() -> None:
    assert classify(_step(0, 10 * MS, 4 * MS, h2d=1 * MS - 1)) == "compute-bound"
    assert classify(_step(0, 10 * MS, 4 * MS, h2d=1 * MS)) == "data-bound"
    assert classify(_step(0, 10 * MS, 5 * MS)) == "data-bound"
    assert classify(_step(0, 10 * MS, None, forward_ns=3 * MS)) == "unknown"


def test_the_gpu_timeline_decides_when_present() -> None:
    host_says_starved = _step(0, 10 * MS, 8 * MS, gpu_ns=9 * MS, gpu_gap_ns=1 * MS)
    assert classify(host_says_starved) == "compute-bound"
    assert classify(_step(0, 10 * MS, 8 * MS, gpu_ns=2 * MS, gpu_gap_ns=7 * MS)) == "data-bound"


def test_bands_follow_the_profiler_thresholds() -> None:
    assert [band(v) for v in (None, 0.0, 4.99, 5.0, 19.9, 20.0, 90.0)] == [
        "unknown", "not", "not", "moderately", "moderately", "highly", "highly"]


def test_summary_leaves_warm_up_out_and_weights_by_time() -> None:
    steps = [_step(0, 500 * MS, 490 * MS, warmup=True)] + [
        _step(i, 10 * MS, 1 * MS, batch_size=32, forward_ns=4 * MS) for i in range(1, 10)
    ] + [_step(10, 30 * MS, 27 * MS, batch_size=32, forward_ns=2 * MS)]
    s = summarize(steps)
    assert s.steps == 10
    total_input, total = 9 * 1 + 27, 9 * 10 + 30
    assert s.input_bound_percent is not None
    assert abs(s.input_bound_percent - 100 * total_input / total) < 1e-9
    assert s.band == "highly" and s.verdict == "compute-bound"
    assert s.median_step_ns == 10 * MS and s.p95_step_ns == 30 * MS
    assert s.samples_per_s is not None and abs(s.samples_per_s - 320 / 0.120) < 1e-6
    assert s.waited_percent == 100.0 and s.p95_data_ns == 27 * MS
    phases = dict(s.median_phase_ns)
    assert phases["forward"] == 4 * MS and phases["backward"] is None
    assert phases["other"] == 5 * MS


def test_a_data_bound_window() -> None:
    s = summarize([_step(i, 10 * MS, 7 * MS) for i in range(20)])
    assert s.verdict == "data-bound" and s.band == "highly"


def test_waited_share_counts_steps_above_the_floor() -> None:
    steps = [_step(i, 10 * MS, WAIT_FLOOR_NS + 1 if i % 4 == 0 else 10_000) for i in range(8)]
    assert summarize(steps).waited_percent == 25.0


def test_unknown_without_data_phases_and_empty_windows() -> None:
    s = summarize([_step(i, 10 * MS, None, optimizer_ns=MS) for i in range(5)])
    assert (s.input_bound_percent, s.band, s.verdict) == (None, "unknown", "unknown")
    assert s.median_step_ns == 10 * MS
    empty = summarize([])
    assert empty.steps == 0 and empty.median_step_ns is None and empty.samples_per_s is None


def test_classified_fills_verdicts() -> None:
    out = classified([_step(0, 10, 9), _step(1, 10, 1), _step(2, 10, None)])
    assert [s.verdict for s in out] == ["data-bound", "compute-bound", "unknown"]


def _rank(pid: int, rank: int, data_ms: float) -> AttachState:
    steps = tuple(_step(i, 20 * MS, int(data_ms * MS)) for i in range(30))
    empty = StepSummary(0, None, "unknown", "unknown", None, None, None)
    return AttachState(pid, TrainerConfig(rank=rank, world_size=4), 0, steps, empty)


def test_an_input_straggler_is_named_with_its_numbers() -> None:
    ranks = [_rank(100 + r, r, 1.0) for r in range(3)] + [_rank(200, 3, 9.0)]
    s = input_straggler(ranks)
    assert s is not None and s.rank == 3 and s.pid == 200
    assert "rank 3 waits 9.0 ms" in s.evidence and "other ranks 1.0 ms" in s.evidence


def test_no_straggler_when_ranks_wait_alike_or_alone() -> None:
    assert input_straggler([_rank(100 + r, r, 1.0 + r * 0.1) for r in range(4)]) is None
    assert input_straggler([_rank(100, 0, 9.0)]) is None
    # twice the others' wait but a negligible share of the step: not worth naming
    assert input_straggler([_rank(1, 0, 0.1), _rank(2, 1, 0.1), _rank(3, 2, 0.5)]) is None


class _CountedSteps(tuple):
    """A window that counts how often it is walked."""

    walks = 0

    def __iter__(self):
        _CountedSteps.walks += 1
        return super().__iter__()


def test_a_single_rank_is_not_searched_for_a_straggler() -> None:
    """One trainer (most jobs) has no rank to compare with: its window is not walked each
    tick for medians that cannot name a straggler."""
    one = _rank(100, 0, 9.0)
    _CountedSteps.walks = 0
    counted = replace(one, steps=_CountedSteps(one.steps))
    assert input_straggler([counted]) is None
    assert _CountedSteps.walks == 0


@pytest.mark.parametrize("gpu", [None, (300, 700), (700, 300), (500, 500)])
@pytest.mark.parametrize("data", [None, 0, 400, 500, 600, 1200])
@pytest.mark.parametrize("h2d", [None, 0, 100])
def test_a_step_classified_as_it_is_made_gets_the_verdict_classify_gives(
        gpu: tuple[int, int] | None, data: int | None, h2d: int | None) -> None:
    """verdict_of (the attach source's, before the record exists) is classify's rule, and
    with_verdict keeps a step so classified as it is."""
    gpu_ns, gap_ns = gpu if gpu is not None else (None, None)
    step = StepRecord(step=1, duration_ns=1000, data_ns=data, h2d_ns=h2d, gpu_ns=gpu_ns,
                      gpu_gap_ns=gap_ns)
    made = replace(step, verdict=verdict_of(1000, data, h2d, gpu_ns, gap_ns))
    assert made.verdict == classify(step)
    assert with_verdict(made) is made and with_verdict(step) == made
