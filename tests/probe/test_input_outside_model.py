"""Issue 13, in-process: a loop without a DataLoader gets its input from the gap before the
stepped model's forward, the forward is timed in zero-code mode, and a probed process that
closed no step yet has a ring that says so."""

from __future__ import annotations

from itertools import pairwise
from time import perf_counter_ns

from gputop.probe import ring as ring_format
from gputop.probe.reader import RingReader
from gputop.probe.steps import BACKWARD, Recorder
from tests.helpers.probe import published_records


def _meta(rec: Recorder) -> dict[str, object]:
    assert rec.ring is not None
    reader = RingReader(rec.ring.path)
    try:
        return reader.read_meta()
    finally:
        reader.close()


def _loaderless_step(rec: Recorder) -> None:
    """What the torch patch reports for one step of a nanoGPT-style loop."""
    rec.forward_begin(perf_counter_ns())
    rec.forward_done(300)
    rec.auto_phase(BACKWARD, 500)
    rec.auto_optimizer_done(100)


def test_without_a_loader_the_gap_before_the_forward_is_the_steps_input(rec: Recorder) -> None:
    for _ in range(8):
        _loaderless_step(rec)
    got = published_records(rec)
    assert len(got) == 8
    # the first step opened at its backward (no optimizer step had ended before it)
    assert got[0].data_ns == ring_format.NONE
    assert not got[0].flags & ring_format.F_INPUT_OUTSIDE_MODEL
    for previous, step in pairwise(got):
        assert step.start_ns == previous.start_ns + previous.duration_ns  # whole steps
        assert step.flags & ring_format.F_INPUT_OUTSIDE_MODEL
        assert step.flags & ring_format.F_IMPLICIT
        assert 0 <= step.data_ns <= step.duration_ns
        assert (step.forward_ns, step.backward_ns, step.optimizer_ns) == (300, 500, 100)


def test_only_the_first_forward_of_a_step_ends_its_input(rec: Recorder) -> None:
    """Gradient accumulation: several forwards per optimizer step, all of them forward time;
    the input is the gap to the first (the later ones start a second on: were one to end the
    input, the step's data wait would include that second)."""
    firsts: list[int] = []
    for _ in range(4):
        firsts.append(perf_counter_ns())
        rec.forward_begin(firsts[-1])
        rec.forward_done(100)
        rec.auto_phase(BACKWARD, 200)
        for _ in range(2):
            rec.forward_begin(perf_counter_ns() + 10**9)
            rec.forward_done(100)
            rec.auto_phase(BACKWARD, 200)
        rec.auto_optimizer_done(50)
    # Before the first optimizer step each backward closed a step (issue 38): not these.
    got = [r for r in published_records(rec) if not r.flags & ring_format.F_AT_BACKWARD][1:]
    assert len(got) == 3
    assert all(r.forward_ns == 300 and r.backward_ns == 600 for r in got)
    for step, first in zip(got, firsts[1:], strict=True):
        assert step.data_ns == first - step.start_ns


def test_a_loader_step_gets_its_forward_and_keeps_its_loaders_wait(rec: Recorder) -> None:
    rec.iteration_begin(1)
    for _ in range(5):
        rec.fetch_begin()
        rec.fetch_end(1, 8)
        rec.forward_begin(perf_counter_ns())
        rec.forward_done(400)
        rec.auto_phase(BACKWARD, 500)
        rec.auto_optimizer_done(100)
    rec.fetch_begin()
    rec.fetch_stop()
    got = published_records(rec)
    assert len(got) == 5 and all(r.forward_ns == 400 for r in got)
    marks = ring_format.F_INPUT_OUTSIDE_MODEL | ring_format.F_IMPLICIT
    assert not any(r.flags & marks for r in got)


def test_a_forward_outside_any_step_opens_none(rec: Recorder) -> None:
    rec.forward_begin(perf_counter_ns())
    rec.forward_done(100)
    assert not rec.open


def test_a_program_timing_its_own_phases_keeps_them(rec: Recorder) -> None:
    rec.manual = True
    rec.step_end()
    for _ in range(4):
        rec.forward_begin(perf_counter_ns())
        rec.forward_done(100)
        rec.step_end()
    got = published_records(rec)
    assert all(r.forward_ns == ring_format.NONE and r.data_ns == ring_format.NONE for r in got)


def test_a_backward_without_an_optimizer_makes_a_ring_that_says_why_no_step_closed(
    rec: Recorder,
) -> None:
    """A loop that updates its parameters by hand has closed no step at its first backward;
    it is probed all the same, and its second backward closes the first step (issue 38)."""
    rec.auto_phase(BACKWARD, 500)
    assert rec.ring is not None and published_records(rec) == []
    status = _meta(rec)[ring_format.META_STATUS]
    assert isinstance(status, str) and "no optimizer step" in status
    assert "step_end" in status and "backward" in status
    rec.auto_phase(BACKWARD, 500)
    (got,) = published_records(rec)
    assert got.flags & ring_format.F_AT_BACKWARD and got.backward_ns == 500
    assert ring_format.META_STATUS not in _meta(rec)


def test_steps_close_at_backward_only_until_an_optimizer_steps(rec: Recorder) -> None:
    """Issue 38: before any optimizer step each backward closes the loader-less step; from
    the first optimizer step on, steps close there, each backward counted once."""
    for _ in range(4):
        rec.auto_phase(BACKWARD, 100)
    for _ in range(3):
        rec.auto_phase(BACKWARD, 100)
        rec.auto_phase(BACKWARD, 100)  # gradient accumulation: no step closes here
        rec.auto_optimizer_done(50)
    got = published_records(rec)
    by_backward, by_optimizer = got[:5], got[5:]  # six backwards before the first step
    assert all(r.flags & ring_format.F_AT_BACKWARD and r.backward_ns == 100
               and r.optimizer_ns == ring_format.NONE for r in by_backward)
    assert len(by_optimizer) == 3 and not any(
        r.flags & ring_format.F_AT_BACKWARD for r in by_optimizer)
    # From the first optimizer step on, accumulated backwards stay in one step.
    assert [r.backward_ns for r in by_optimizer] == [100, 200, 200]
    assert all(a.start_ns + a.duration_ns == b.start_ns for a, b in pairwise(got))


def test_step_end_stops_backward_from_closing_steps(rec: Recorder) -> None:
    rec.step_end()
    for _ in range(3):
        rec.auto_phase(BACKWARD, 100)
        rec.auto_phase(BACKWARD, 100)
        rec.step_end()
    got = published_records(rec)
    assert [r.backward_ns for r in got] == [200, 200, 200]
    assert not any(r.flags & ring_format.F_AT_BACKWARD for r in got)


def test_a_loader_without_an_optimizer_closes_its_steps_at_each_fetch(rec: Recorder) -> None:
    for _ in range(3):
        rec.fetch_begin()
        rec.fetch_end(1, 8)
        rec.auto_phase(BACKWARD, 100)
    rec.fetch_begin()
    rec.fetch_stop()
    got = published_records(rec)
    assert [r.backward_ns for r in got] == [100] * 3
    assert not any(r.flags & (ring_format.F_AT_BACKWARD | ring_format.F_IMPLICIT) for r in got)


def test_the_first_loader_pass_makes_the_ring_and_the_first_step_clears_the_status(
    rec: Recorder,
) -> None:
    rec.iteration_begin(1, {"num_workers": 0})
    assert rec.ring is not None and ring_format.META_STATUS in _meta(rec)
    for _ in range(2):
        rec.fetch_begin()
        rec.fetch_end(1, 8)
        rec.auto_phase(BACKWARD, 5)
        rec.auto_optimizer_done(5)
    rec.fetch_begin()
    rec.fetch_stop()
    assert len(published_records(rec)) == 2
    meta = _meta(rec)
    assert ring_format.META_STATUS not in meta and meta["num_workers"] == 0
