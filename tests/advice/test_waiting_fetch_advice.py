"""A loop the probe found waiting on its own thread (a prefetch already followed) is told to
give that work more hands or make it cheaper, never to prefetch again, with the step two
producers leave: max(the rest of the step, today's step / 2)."""

from __future__ import annotations

from dataclasses import replace

from gputop.advice.context import Context
from gputop.advice.host_code_rules import host_bound
from gputop.analysis.steps import STEP_STATISTIC, summarize
from gputop.core.model import AttachState, StepRecord, TrainerConfig
from gputop.probe.ring import WAITING
from tests.helpers.builders import frame

MS = 1_000_000
WAITS_IN_GET = f"<module> (train.py:52){WAITING}queue.Queue.get"
PREFETCH = "Prefetch the next batch in a background thread"


def _host_state(wait_ms: float, rest_ms: float) -> AttachState:
    steps = tuple(StepRecord(
        step=i, duration_ns=int((wait_ms + rest_ms) * MS), data_ns=0,
        forward_ns=int(rest_ms * MS) // 2, backward_ns=int(rest_ms * MS) - int(rest_ms * MS) // 2,
        host_ns=int(wait_ms * MS),
        batch_size=8, samples=10, host_site=WAITS_IN_GET, host_site_samples=10)
        for i in range(40))
    return AttachState(7, TrainerConfig(), 0, steps, summarize(steps))


def _input_state(wait_ms: float, rest_ms: float) -> AttachState:
    steps = tuple(StepRecord(
        step=i, duration_ns=int((wait_ms + rest_ms) * MS), data_ns=int(wait_ms * MS),
        forward_ns=int(rest_ms * MS) // 2, backward_ns=int(rest_ms * MS) - int(rest_ms * MS) // 2,
        batch_size=8, input_outside_model=True, samples=10, data_site=WAITS_IN_GET,
        data_site_samples=10)
        for i in range(40))
    return AttachState(7, TrainerConfig(), 0, steps, summarize(steps))


def _advice(state: AttachState) -> str:
    (found,) = host_bound(Context(frame(attach=(state,)), {}), state)
    return f"{found.id} | {found.title} | {found.evidence} | {found.action}"


def test_a_loop_waiting_on_its_prefetch_thread_is_told_to_add_hands_not_to_prefetch() -> None:
    advice = _advice(_host_state(8.0, 4.0))
    assert advice.startswith("host-bound | The loop's own Python is the largest part of the "
                             "step (the loop waits for its own thread, which sets the pace)")
    assert f"{WAITS_IN_GET} takes 67% of step time" in advice
    assert f"{WAITS_IN_GET}: Give that work more hands: two prefetch threads" in advice
    assert PREFETCH.lower() not in advice.lower()
    # Two producers: max(the 4 ms rest, 12 ms / 2) a step
    assert "the pace is the longer of the rest of the step (the step less its 67% wait)" in advice
    assert f"~6.00 ms instead of {STEP_STATISTIC} 12.0 ms (x2.00 the samples/s" in advice


def test_a_wait_that_is_a_part_of_the_host_time_leaves_the_rest_as_the_pace() -> None:
    state = _host_state(6.0, 4.0)
    # the wait 40% of the step, the rest of the host code beside it: the rest is 6 of 10 ms
    state = replace(state, summary=replace(state.summary, host_site_percent=40.0))
    advice = _advice(state)
    assert "(the step less its 40% wait)" in advice
    assert f"~6.00 ms instead of {STEP_STATISTIC} 10.0 ms (x1.67 the samples/s" in advice


def test_an_own_fetch_waiting_on_its_thread_gets_the_same_advice() -> None:
    advice = _advice(_input_state(9.0, 3.0))
    assert advice.startswith("own-fetch | The loop's own input code is the largest part of the "
                             "step (the loop waits for its own thread")
    assert PREFETCH.lower() not in advice.lower()
    assert f"~6.00 ms instead of {STEP_STATISTIC} 12.0 ms (x2.00 the samples/s" in advice
