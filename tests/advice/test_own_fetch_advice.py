"""The loop's own fetch (no DataLoader, input before the forward) as the step's largest part
gets the fetch advice naming its function, with the step one prefetch thread leaves; a
DataLoader's wait does not get it."""

from __future__ import annotations

from gputop.advice.context import Context
from gputop.advice.host_code_rules import host_bound
from gputop.analysis.steps import STEP_STATISTIC, summarize
from gputop.core.model import AttachState, StepRecord, TrainerConfig
from tests.helpers.builders import frame

MS = 1_000_000
READ_SHARD = "read_shard (data.py:12)"


def _state(data_ms: float, compute_ms: float, outside: bool) -> AttachState:
    steps = tuple(StepRecord(
        step=i, duration_ns=int((data_ms + compute_ms) * MS), data_ns=int(data_ms * MS),
        forward_ns=int(compute_ms * MS) // 2, backward_ns=int(compute_ms * MS) // 2,
        batch_size=8, input_outside_model=outside, samples=10,
        data_site=READ_SHARD if outside else None, data_site_samples=7 if outside else 0)
        for i in range(40))
    return AttachState(7, TrainerConfig(), 0, steps, summarize(steps))


def _advice(state: AttachState) -> list[str]:
    found = host_bound(Context(frame(attach=(state,)), {}), state)
    return [f"{a.id} | {a.title} | {a.evidence} | {a.action}" for a in found]


def test_a_slow_fetch_outside_the_model_gets_the_prefetch_advice_with_its_pace() -> None:
    (advice,) = _advice(_state(12.0, 6.0, outside=True))
    assert advice.startswith("own-fetch | The loop's own input code is the largest part")
    assert f"{READ_SHARD} takes 67% of step time" in advice  # all the input's 12 of 18 ms
    assert f"{READ_SHARD}: Prefetch the next batch in a background thread" in advice
    assert "num_workers" not in advice
    # One thread brings a batch per 12 ms fetch: max(12, 6) ms instead of 18 ms
    assert f"~12.0 ms instead of {STEP_STATISTIC} 18.0 ms (x1.50 the samples/s" in advice


def test_host_code_shorter_than_the_rest_is_predicted_to_hide_behind_it() -> None:
    steps = tuple(StepRecord(
        step=i, duration_ns=10 * MS, data_ns=3 * MS, forward_ns=MS, backward_ns=2 * MS,
        host_ns=4 * MS, samples=10, host_site="get_batch (train.py:9)", host_site_samples=4)
        for i in range(40))
    (advice,) = _advice(AttachState(7, TrainerConfig(), 0, steps, summarize(steps)))
    assert advice.startswith("host-bound | ") and "With its 40% overlapped with the model" in advice
    # The rest of the step (6 ms) sets the pace once the 4 ms runs beside it
    assert f"~6.00 ms instead of {STEP_STATISTIC} 10.0 ms (x1.67 the samples/s" in advice


def test_a_dataloaders_wait_and_a_compute_bound_loop_get_none() -> None:
    assert _advice(_state(12.0, 6.0, outside=False)) == []
    assert _advice(_state(2.0, 16.0, outside=True)) == []
