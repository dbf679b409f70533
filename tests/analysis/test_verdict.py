"""Issue 13: a window verdict a burst of slow steps cannot swing, unmeasured step times
shown as n/a, words a user reads without the README, --once advice that agrees with its
verdict, and pin_memory shown as it takes effect."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from itertools import pairwise
from typing import TYPE_CHECKING

from gputop.advice import Advisor, evaluate
from gputop.advice.context import Context
from gputop.analysis.steps import summarize
from gputop.core.model import AttachState, StepRecord, StepSummary, TrainerConfig
from gputop.export.snapshot import dumps
from gputop.export.text import render
from gputop.tui.lines import Line
from gputop.tui.views.steps import legend_line, step_lines, summary_lines
from tests.helpers.builders import attached, frame, process, trainer_with_workers

if TYPE_CHECKING:  # the probe's recorder is imported where a test records
    from gputop.probe.steps import Recorder

MS = 1_000_000
COMPUTE_MS = 10.0  # forward 2 + backward 7 + optimizer 1


def _text(line: Line) -> str:
    return "".join(text for text, _ in line)


def _step(i: int, data_ms: float | None, backward_ms: float = 7.0, batch: int = 32,
          start_ms: float | None = None, implicit: bool = False,
          forward_ms: float | None = 2.0) -> StepRecord:
    """A step whose compute is forward + backward + optimizer (1 ms), nothing else."""
    parts = [data_ms or 0.0, forward_ms or 0.0, backward_ms, 1.0]
    duration = int(sum(parts) * MS)
    start = int((start_ms if start_ms is not None else i * 1000.0) * MS)
    return StepRecord(
        step=i, duration_ns=duration, data_ns=None if data_ms is None else int(data_ms * MS),
        forward_ns=None if forward_ms is None else int(forward_ms * MS),
        backward_ns=int(backward_ms * MS), optimizer_ns=MS, batch_size=batch,
        end_ns=start + duration, implicit=implicit,
    )


def _data_ms(share: float) -> float:
    """The data wait that makes a step's input share `share` (compute is COMPUTE_MS)."""
    return COMPUTE_MS * share / (1.0 - share)


def _issue_window() -> list[StepRecord]:
    """The issue's chargpt window: 167 steps, 113 data-bound with a per-step median near
    62 %, and a burst of 8 steps whose backward took 350-430 ms (CPU contention)."""
    data_bound = [0.55 + 0.25 * k / 112 for k in range(113)]
    compute_bound = [0.35 + 0.14 * k / 45 for k in range(46)]
    shares: list[float] = []
    for n in range(159):
        take_cb = (n % 7 in (1, 4) and compute_bound) or not data_bound
        shares.append(compute_bound.pop(0) if take_cb else data_bound.pop(0))
    steps = [_step(i, _data_ms(s)) for i, s in enumerate(shares)]
    burst = [_step(0, 15.0, backward_ms=350.0 + k * 80.0 / 7) for k in range(8)]
    steps[120:120] = burst
    return [replace(s, step=i) for i, s in enumerate(steps)]


# -- 1. a verdict a burst of slow steps cannot swing ------------------------------------


def test_a_burst_of_slow_backward_steps_does_not_flip_a_data_bound_window() -> None:
    steps = _issue_window()
    s = summarize(steps)
    assert s.steps == 167
    # the plain total-time ratio is what the old code reported: compute-bound
    assert s.input_time_percent is not None and s.input_time_percent < 40.0
    assert s.verdict == "data-bound"
    assert s.input_bound_percent is not None and 58.0 <= s.input_bound_percent <= 68.0
    assert s.band == "highly"
    assert s.outlier_steps == 8
    assert (s.data_bound_steps, s.compute_bound_steps) == (113, 54)
    assert s.data_bound_steps_percent is not None
    assert round(s.data_bound_steps_percent) == 68


def test_scattered_slow_steps_do_not_flip_it_either() -> None:
    steps = _issue_window()
    slow = [i for i, st in enumerate(steps) if (st.backward_ns or 0) > 100 * MS]
    scattered = list(steps)
    for k, i in enumerate(slow):  # move each slow step to a spread-out place
        scattered[i], scattered[10 + 20 * k] = scattered[10 + 20 * k], scattered[i]
    s = summarize(scattered)
    assert s.verdict == "data-bound" and s.outlier_steps == 8


def test_uniform_windows_give_the_total_time_ratio() -> None:
    for share in (0.10, 0.30, 0.70, 0.95):
        steps = [_step(i, _data_ms(share) * (0.9 + 0.2 * (i % 5) / 4)) for i in range(60)]
        s = summarize(steps)
        assert s.outlier_steps == 0
        assert s.input_bound_percent == s.input_time_percent
        assert s.input_bound_percent is not None
        assert abs(s.input_bound_percent - 100 * share) < 2.0


def test_worker_bursts_stay_data_bound() -> None:
    """Eight workers deliver in bursts: one long wait, seven ready batches. The time-weighted
    share says data-bound (the median step, which did not wait, would say otherwise)."""
    steps = [_step(i, 320.0 if i % 8 == 0 else 0.1) for i in range(160)]
    s = summarize(steps)
    assert s.verdict == "data-bound" and s.input_bound_percent is not None
    assert s.input_bound_percent > 75.0 and s.outlier_steps == 0
    assert (s.data_bound_steps, s.compute_bound_steps) == (20, 140)


def test_many_slow_steps_are_the_loop_not_outliers() -> None:
    """A third of the steps with a heavy optimizer step is how the loop runs: all counted."""
    steps = [_step(i, 12.0, backward_ms=60.0 if i % 3 == 0 else 7.0) for i in range(90)]
    s = summarize(steps)
    assert s.outlier_steps == 0 and s.input_bound_percent == s.input_time_percent


# -- 2. unmeasured is not a number --------------------------------------------------------


def _implicit_loop(n: int = 40) -> list[StepRecord]:
    """A loop without a DataLoader under the zero-code probe: each step opens at backward
    and closes at optimizer.step, the batch fetch and forward fall between steps."""
    return [_step(i, None, forward_ms=None, start_ms=i * 42.0, implicit=True)
            for i in range(n)]


def test_a_loop_without_a_dataloader_has_no_step_time() -> None:
    s = summarize(_implicit_loop())
    assert s.steps == 40
    assert s.median_step_ns is None and s.p95_step_ns is None and s.samples_per_s is None
    assert s.input_bound_percent is None and s.verdict == "unknown"
    assert s.unmeasured_reason is not None and "DataLoader" in s.unmeasured_reason
    assert dict(s.median_phase_ns)["backward"] == 7 * MS  # phases are still measured


def test_step_end_bounds_a_loop_without_a_dataloader() -> None:
    """gputop.step_end() closes one step where the next opens: those boundaries are real."""
    steps, t = [], 0.0
    for i in range(30):
        steps.append(_step(i, None, start_ms=t, implicit=True))
        t += 10.0
    s = summarize(steps)
    assert s.median_step_ns == 10 * MS and s.samples_per_s is not None
    assert s.unmeasured_reason is None


def test_unmeasured_step_time_shows_na_with_the_reason_everywhere() -> None:
    steps = tuple(_implicit_loop())
    state = AttachState(77, TrainerConfig(device="cpu"), 0, steps, summarize(steps))
    f = frame(attach=(state,))
    text = render(f)
    assert "step time: mean n/a" in text and "samples/s n/a" not in text
    assert "DataLoader" in text
    doc = json.loads(dumps(f))["attach"]["summary"]
    assert doc["median_step_ns"] is None and doc["samples_per_s"] is None
    assert doc["input_bound_percent"] is None and "DataLoader" in doc["unmeasured_reason"]
    pane = "\n".join(_text(line) for line in step_lines(f.attached, 120, 12))
    assert "DataLoader" in pane and "step time n/a" in pane


def _recorded(steps: Callable[[Recorder], None]) -> list[StepRecord]:
    """A recorder's steps as the attach source reads them, with `implicit` set from the ring's
    F_IMPLICIT flag (the one line sources/attach.py's to_step needs)."""
    import os
    import tempfile

    from gputop.probe import ring as ring_format
    from gputop.probe.reader import RingReader
    from gputop.probe.steps import Recorder
    from gputop.sources.attach import to_step

    with tempfile.TemporaryDirectory() as directory:
        rec = Recorder(lambda: ring_format.RingWriter(ring_format.ring_path(os.getpid(),
                                                                  directory=directory)))
        try:
            steps(rec)
            rec.publish()
            assert rec.ring is not None
            reader = RingReader(rec.ring.path)
            try:
                raws = reader.read_new()
            finally:
                reader.close()
        finally:
            rec.close()
    return [replace(to_step(r), implicit=bool(r.flags & ring_format.F_IMPLICIT)) for r in raws]


def test_the_probes_own_steps_without_a_loader_run_from_optimizer_step_to_optimizer_step(
) -> None:
    """The zero-code probe opens each loader-less step where the previous optimizer step
    ended (issue 13), so its steps are whole, like gputop.step_end()'s."""
    from gputop.probe.steps import BACKWARD, OPTIMIZER

    def zero_code(rec: Recorder) -> None:
        """The torch patch: the first backward opens the first step."""
        for _ in range(12):
            rec.auto_phase(BACKWARD, 1)
            rec.auto_optimizer_done(1)

    def step_end_loop(rec: Recorder) -> None:  # gputop.step_end() marks each boundary
        rec.step_end()
        for _ in range(12):
            rec.add_phase(OPTIMIZER, 1)
            rec.step_end(batch_size=8)

    whole = _recorded(zero_code)
    assert [s.implicit for s in whole] == [True] * 12
    assert all(s.end_ns is not None and s.end_ns - s.duration_ns == p.end_ns
               for p, s in pairwise(whole))
    zero = summarize(whole)
    assert zero.median_step_ns is not None and zero.unmeasured_reason is None
    bounded = summarize(_recorded(step_end_loop))
    assert bounded.median_step_ns is not None and bounded.samples_per_s is not None
    assert bounded.unmeasured_reason is None


# -- 3. words -------------------------------------------------------------------------------


def _summary_text(s: StepSummary) -> str:
    return " / ".join(_text(line) for line in summary_lines(s, 0))


def test_share_is_said_as_a_share_of_step_time_with_a_band_word() -> None:
    s = summarize(_issue_window())
    pane = _summary_text(s)
    assert "input-bound 6" in pane and "% of step time (high)" in pane
    assert "(highly)" not in pane
    assert "last 167 steps" in pane
    assert "68% of steps data-bound" in pane
    text = render(frame(attach=(AttachState(5, TrainerConfig(), 0, tuple(_issue_window()), s),)))
    assert "% of step time (high)" in text and "last 167 steps" in text
    assert "68% of steps data-bound, 32% compute-bound" in text
    assert "8 slow steps" in text


def test_bimodal_step_times_get_a_note() -> None:
    steps = [_step(i, 115.0 if i % 20 < 11 else 0.1, forward_ms=2.0) for i in range(200)]
    s = summarize(steps)
    assert len(s.step_modes) == 2
    (low_pct, low_ns), (high_pct, high_ns) = s.step_modes
    assert (round(low_pct), round(high_pct)) == (45, 55)
    assert low_ns < 11 * MS and high_ns > 120 * MS
    assert "bimodal: 45% of steps ~10.1ms, 55% ~125ms" in _summary_text(s)
    assert "bimodal: 45% of steps ~10.1 ms, 55% ~125.0 ms" in render(
        frame(attach=(AttachState(5, TrainerConfig(), 0, tuple(steps), s),)))
    doc = json.loads(dumps(frame(attach=(AttachState(5, TrainerConfig(), 0, tuple(steps), s),))))
    modes = doc["attach"]["summary"]["step_time_modes"]
    assert [round(m["percent_of_steps"]) for m in modes] == [45, 55]


def test_spread_out_or_noisy_step_times_are_not_bimodal() -> None:
    uniform = [_step(i, 1.0 + 18.0 * i / 199) for i in range(200)]
    assert summarize(uniform).step_modes == ()
    noisy = [_step(i, 20.0 + (i % 7)) for i in range(200)]
    assert summarize(noisy).step_modes == ()
    tail = [_step(i, 5.0 if i % 10 else 40.0 + 30.0 * (i % 30) / 10) for i in range(200)]
    assert summarize(tail).step_modes == ()


def test_legend_shows_only_the_phases_measured_in_the_window() -> None:
    zero_code = [_step(i, 3.0, forward_ms=None) for i in range(10)]  # no forward, no h2d
    legend = _text(legend_line(zero_code))
    assert "data" in legend and "bwd" in legend and "opt" in legend
    assert "fwd" not in legend and "h2d" not in legend and "other" not in legend


def test_probe_mark_in_once_text_is_explained() -> None:
    rows, group = trainer_with_workers(100, workers=1, worker_cpu=50.0)
    rows[0] = replace(rows[0], has_probe=True)
    text = render(frame(processes=[*rows, process(300)], trainers=(group,)))
    assert "trainer*" in text
    assert "* = runs under the gputop probe" in text
    plain = render(frame(processes=[process(300)]))
    assert "gputop probe" not in plain


def test_memory_bandwidth_source_is_said_in_words() -> None:
    from gputop.core.model import MemoryBandwidthSample

    m = MemoryBandwidthSample(source="estimate", confidence="estimated", pressure=0.4)
    text = render(frame(membw=m))
    assert "(estimate, estimated)" not in text
    assert "MEMORY BANDWIDTH (estimated" in text


# -- 4. --once advice and pin_memory -----------------------------------------------------


def test_a_one_shot_advisor_shows_only_what_the_last_frame_supports() -> None:
    """--once builds the advisor with advice_after=1 and ticks it twice (prime, then the
    frame it prints): the first tick's data-bound advice must not outlive its verdict."""
    rows, group = trainer_with_workers(10, workers=0, worker_cpu=0.0)
    starved = frame(processes=rows, trainers=(group,),
                    attach=(attached(10, data_ms=60, compute_ms=40, num_workers=0),))
    fed = frame(processes=rows, trainers=(group,),
                attach=(attached(10, data_ms=49.9, compute_ms=50.1, num_workers=0),))
    advisor = Advisor(on_after=1)
    assert "num-workers-zero" in {a.id for a in advisor(starved)}
    final = advisor(fed)
    assert fed.attached[0].summary.verdict == "compute-bound"
    supported = {a.id for a in evaluate(Context(fed, {}))}
    assert {a.id for a in final} <= supported
    assert "num-workers-zero" not in {a.id for a in final}


def test_the_live_advisor_still_keeps_advice_still() -> None:
    rows, group = trainer_with_workers(10, workers=0, worker_cpu=0.0)
    starved = frame(processes=rows, trainers=(group,),
                    attach=(attached(10, data_ms=60, compute_ms=40, num_workers=0),))
    fed = frame(processes=rows, trainers=(group,),
                attach=(attached(10, data_ms=40, compute_ms=60, num_workers=0),))
    advisor = Advisor()
    advisor(starved)
    assert "num-workers-zero" in {a.id for a in advisor(starved)}
    assert "num-workers-zero" in {a.id for a in advisor(fed)}  # hysteresis: not gone at once


def test_pin_memory_without_an_accelerator_is_shown_as_having_no_effect() -> None:
    cpu = TrainerConfig(pin_memory=True, device="cpu")
    assert cpu.pin_memory_effective is False
    assert TrainerConfig(pin_memory=True, device="cuda:0").pin_memory_effective is True
    assert TrainerConfig(pin_memory=True).pin_memory_effective is None
    assert TrainerConfig(pin_memory=False, device="cpu").pin_memory_effective is False
    steps = tuple(_step(i, 3.0) for i in range(10))
    state = AttachState(5, cpu, 0, steps, summarize(steps))
    f = frame(attach=(state,))
    text = render(f)
    assert "pin_memory=True" not in text
    assert "pin_memory on, but no accelerator: has no effect" in text
    pane = "\n".join(_text(line) for line in step_lines(f.attached, 160, 12))
    assert "pin on (no effect: no accelerator)" in pane
    config = json.loads(dumps(f))["attach"]["config"]
    assert config["pin_memory"] is True and config["pin_memory_effective"] is False
