"""The input straggler on recorded windows of real two-rank jobs (fixtures/
straggler_windows.json): ranks fed alike whose loaders ran out of phase are not named; a
rank with a four times slower loader is, from its first steps."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.analysis.steps import STRAGGLER_MIN_STEPS, input_straggler
from gputop.core.model import AttachState, StepRecord, StepSummary, TrainerConfig

WINDOWS = json.loads((Path(__file__).parent / "fixtures" / "straggler_windows.json").read_text())
US = 1000


def _ranks(name: str, first: int | None = None) -> list[AttachState]:
    """The recorded window `name` as attached ranks (PID 100 + rank), each cut to its
    first `first` steps if given."""
    empty = StepSummary(0, None, "unknown", "unknown", None, None, None)
    return [AttachState(100 + rank, TrainerConfig(rank=rank, world_size=2), 0, tuple(
        StepRecord(step=i, duration_ns=step_us * US, data_ns=data_us * US)
        for i, (data_us, step_us) in enumerate(steps[:first])), empty)
        for rank, steps in enumerate(WINDOWS[name])]


@pytest.mark.parametrize("first", [STRAGGLER_MIN_STEPS, 64, None])
def test_ranks_fed_alike_out_of_phase_are_not_named(first: int | None) -> None:
    # rank 0 lags: median wait 6.7 ms against rank 1's 0.8 ms (8x, named by the old median
    # rule), yet a quarter of its steps waited 1.6 ms or less and rank 1 up to 3.2 ms in 9
    # of 10: their waits overlap, as a lag's do, not a slower loader's
    assert input_straggler(_ranks("fed_alike", first)) is None


@pytest.mark.parametrize("first", [STRAGGLER_MIN_STEPS, None])
def test_a_four_times_slower_loader_is_named_from_its_first_steps(first: int | None) -> None:
    found = input_straggler(_ranks("one_slow_loader", first))
    assert found is not None and (found.pid, found.rank) == (100, 0)
    assert found.median_input_ns > 30_000 * US and found.others_high_input_ns < 5_000 * US


def test_too_few_steps_name_no_one() -> None:
    assert input_straggler(_ranks("one_slow_loader", STRAGGLER_MIN_STEPS - 1)) is None


class _CountingSteps(tuple[StepRecord, ...]):
    """A rank's window that counts the passes made over its steps."""

    passes = 0

    def __iter__(self) -> Iterator[StepRecord]:
        type(self).passes += 1
        return super().__iter__()


def test_the_sampler_keeps_each_ranks_waits_so_no_window_is_walked() -> None:
    """Derived tick after tick, each rank's input quantiles are kept with its summary: the
    straggler search passes over none of the ranks' steps (it walked and sorted every rank's
    window each tick), and names the same rank."""
    from dataclasses import replace

    from gputop.frames.derive import Derivation

    ranks = _ranks("one_slow_loader")
    derivation = Derivation()
    derivation.attached(tuple(replace(r, steps=r.steps[:-5]) for r in ranks), 0)
    derived, found = derivation.attached(tuple(ranks), 0)
    assert all(state.input_waits is not None for state in derived)
    counted = [replace(state, steps=_CountingSteps(state.steps)) for state in derived]
    _CountingSteps.passes = 0
    assert input_straggler(counted) == found == input_straggler(ranks)
    assert found is not None and found.pid == 100
    assert _CountingSteps.passes == 0
