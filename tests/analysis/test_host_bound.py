"""Issue 38: a step is input, host code and compute; the largest part is its verdict, the
window names the host function, and the header, the exit summary and the JSON say one
verdict with the share of its own part and one step time, over one window."""

from __future__ import annotations

import random
import re
from dataclasses import replace

import pytest

from gputop.advice.context import Context
from gputop.advice.host_code_rules import host_bound
from gputop.analysis.step_window import StepWindow
from gputop.analysis.steps import (
    STEP_STATISTIC,
    classify,
    parts,
    summarize,
    verdict_of,
    with_trainer_verdict,
)
from gputop.core.model import AttachState, StepRecord, StepSummary, TrainerConfig
from gputop.export.snapshot import summary_json
from gputop.export.text import attach_summary
from gputop.tui.views.steps import summary_lines
from tests.helpers.builders import frame

MS = 1_000_000
GET_BATCH = "get_batch (train.py:116)"
COLLATE = "slow_collate (train.py:40)"


def _step(n: int, data: float, host: float | None, compute: float, *, site: str = GET_BATCH,
          samples: int = 34, site_samples: int = 30, outside: bool = False,
          batch: int | None = 32, end: int | None = None) -> StepRecord:
    duration = int((data + (host or 0) + compute) * MS)
    return StepRecord(
        step=n, duration_ns=duration, data_ns=int(data * MS), forward_ns=int(compute * MS) // 2,
        backward_ns=int(compute * MS) // 2, batch_size=batch, end_ns=end,
        input_outside_model=outside, host_ns=None if host is None else int(host * MS),
        samples=samples if host is not None else 0,
        host_site=site if host is not None else None,
        host_site_samples=site_samples if host is not None else 0,
        data_site="read_shard (data.py:12)" if outside else None,
        data_site_samples=site_samples if outside else 0)


def _window(n: int, data: float, host: float | None, compute: float, **kw: object
            ) -> list[StepRecord]:
    return [_step(i, data, host, compute, **kw) for i in range(n)]  # type: ignore[arg-type]


def _text(line: tuple[tuple[str, str], ...]) -> str:
    return "".join(text for text, _ in line)


def _pane(s: StepSummary) -> str:
    return " / ".join(_text(line) for line in summary_lines(s, 0))


def _exit_summary(s: StepSummary, steps: list[StepRecord]) -> str:
    """What `gputop run` prints at exit for a trainer with this summary."""
    state = AttachState(7, TrainerConfig(), 0, tuple(steps), s)
    return attach_summary(replace(frame(), attached=(state,)))


# -- one step -------------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "host", "compute", "verdict"), [
    (1, 30, 3, "host-bound"),  # nanoGPT's shape: get_batch between forward and backward
    (30, 1, 3, "data-bound"),
    (1, 2, 30, "compute-bound"),
    (10, 10, 5, "data-bound"),  # ties go to input ...
    (2, 10, 10, "host-bound"),  # ... then to host
    (10, 2, 10, "data-bound"),
    (12, 11, 11, "data-bound"),
])
def test_the_largest_part_is_the_steps_verdict(data: float, host: float, compute: float,
                                               verdict: str) -> None:
    assert classify(_step(0, data, host, compute)) == verdict


@pytest.mark.parametrize(("data", "compute", "verdict"), [
    (30, 3, "data-bound"), (3, 30, "compute-bound"), (10, 10, "data-bound")])
def test_without_host_time_the_verdict_is_the_two_part_one(data: float, compute: float,
                                                           verdict: str) -> None:
    step = _step(0, data, None, compute)
    assert step.host_ns is None
    assert classify(step) == verdict
    assert verdict_of(step.duration_ns, step.data_ns, None, None, None) == verdict
    assert parts(step) == (int(data * MS), 0, int(compute * MS))


def test_the_gpu_gap_is_split_between_input_and_host_as_their_host_times_are() -> None:
    step = replace(_step(0, 10, 30, 5), gpu_gap_ns=20 * MS, gpu_ns=8 * MS)
    assert parts(step) == (5 * MS, 15 * MS, 8 * MS)
    assert classify(step) == "host-bound"


# -- the window -----------------------------------------------------------------------------


def test_a_host_bound_window_names_the_function_with_its_share() -> None:
    steps = _window(64, 1, 30, 3)  # a sample a ms: 30 of a step's 34 in get_batch
    s = summarize(steps)
    assert s.verdict == "host-bound" and s.host_bound_steps == 64
    assert s.host_percent == pytest.approx(100 * 30 / 34)
    assert s.verdict_percent == s.host_percent and s.verdict_part == "host"
    # every sample of the host time named get_batch: it takes all of the host's 88%
    assert s.host_site == GET_BATCH and s.host_site_percent == pytest.approx(100 * 30 / 34)
    assert s.mean_step_ns == 34 * MS
    pane = _pane(s)
    assert f"host-bound  host 88% of step time: {GET_BATCH} 88%" in pane
    assert "input-bound" not in pane and "data-bound" not in pane
    assert f"{STEP_STATISTIC} 34.0ms over the last 64 steps" in pane
    text = _exit_summary(s, steps)
    assert f"verdict host-bound over the last 64 steps, host 88.2% of step time: {GET_BATCH} 88%" \
        in text
    assert f"step time: {STEP_STATISTIC} 34.0 ms over the last 64 steps" in text
    js = summary_json(s)
    assert js["verdict"] == "host-bound" and js["step_ns"] == 34 * MS
    assert js["host_site"] == GET_BATCH and js["step_statistic"] == STEP_STATISTIC


def test_the_top_site_is_the_most_sampled_over_the_window() -> None:
    steps = (_window(10, 1, 30, 3, site=COLLATE, site_samples=9)
             + _window(30, 1, 30, 3, site=GET_BATCH, site_samples=5))
    s = summarize(steps)
    assert s.host_site == GET_BATCH  # 150 samples against 90: 150/240 of the host's time
    assert s.host_site_percent == pytest.approx(100 * 30 / 34 * 150 / 240)


def test_input_outside_the_model_names_its_data_site() -> None:
    s = summarize(_window(40, 30, 1, 3, outside=True))
    assert s.verdict == "data-bound" and s.data_site == "read_shard (data.py:12)"
    assert "read_shard (data.py:12) 88%" in _pane(s)  # all the input's samples: its 88%


def test_a_compute_bound_header_says_the_compute_share_not_the_input_share() -> None:
    """The issue's 'compute-bound  input-bound 48% of step time (high)'."""
    s = summarize(_window(40, 48, None, 52))
    pane = _pane(s)
    assert s.verdict == "compute-bound"
    assert pane.startswith("compute-bound  compute 52% of step time")
    assert "input-bound" not in pane and "(high)" not in pane
    assert "ATTACHED 7: verdict compute-bound over the last 40 steps, compute 52.0% of step " \
        "time" in _exit_summary(s, _window(40, 48, None, 52))


def test_the_header_share_is_the_share_of_the_verdicts_part_in_random_windows() -> None:
    rng = random.Random(38)
    for _ in range(200):
        steps = [_step(i, rng.uniform(0, 20), rng.choice((None, rng.uniform(0, 20))),
                       rng.uniform(0.1, 20)) for i in range(rng.randrange(1, 40))]
        s = summarize(steps)
        head = _text(summary_lines(s, 0)[0])
        assert head.startswith(s.verdict)
        share = re.search(r"(\d+)% of step time", head)
        assert share is not None
        part = {"data-bound": s.input_bound_percent, "host-bound": s.host_percent}.get(
            s.verdict, 100 - (s.input_bound_percent or 0) - (s.host_percent or 0))
        assert part is not None and int(share.group(1)) == round(part)
        assert all(part >= p - 1e-9 for p in (s.input_bound_percent or 0, s.host_percent or 0))


def test_a_trainer_level_verdict_replaces_the_steps_one_in_the_header() -> None:
    s = with_trainer_verdict(summarize(_window(40, 1, 2, 30)), "cpu-starved", 71.0,
                             "run-queue wait")
    head = _text(summary_lines(s, 0)[0])
    assert head.startswith("cpu-starved  run-queue wait 71% of the time")
    assert "compute-bound" not in head
    assert with_trainer_verdict(s, None) is s


def test_samples_per_s_whenever_the_batch_size_is_in_the_steps() -> None:
    s = summarize(_window(20, 1, 30, 3, batch=16))
    assert s.samples_per_s == pytest.approx(16 / 0.034)
    assert "471 samples/s" in _pane(s)
    assert summarize(_window(20, 1, 30, 3, batch=None)).samples_per_s is None


def test_bimodal_steps_show_both_modes_beside_the_one_step_time() -> None:
    steps = [_step(i, 1, 30 if i % 2 else 1, 3, end=None) for i in range(60)]
    s = summarize(steps)
    assert len(s.step_modes) == 2
    pane = _pane(s)
    assert re.search(r"mean \S+ over the last 60 steps \(bimodal: 50% of steps ~5\.0ms, "
                     r"50% ~34\.0ms\)", pane), pane
    js = summary_json(s)
    assert [m["percent_of_steps"] for m in js["step_time_modes"]] == [50.0, 50.0]


def test_a_narrow_pane_puts_samples_per_s_on_a_line_of_its_own() -> None:
    steps = [_step(i, 1, 30 if i % 2 else 1, 3) for i in range(60)]
    lines = [_text(line) for line in summary_lines(summarize(steps), 0, width=78)]
    assert len(lines) == 3 and "bimodal" in lines[2] and "samples/s" in lines[2]
    assert all(len(line) <= 78 for line in lines[1:])


def test_the_kept_window_says_what_summarize_says_of_host_bound_steps() -> None:
    rng = random.Random(5)
    window = StepWindow()
    ring: list[StepRecord] = []
    for tick in range(40):
        ring += [_step(tick * 10 + i, rng.uniform(0, 9), rng.uniform(0, 30), rng.uniform(1, 9),
                       site=rng.choice((GET_BATCH, COLLATE)), site_samples=rng.randrange(5))
                 for i in range(rng.randrange(1, 6))]
        ring = ring[-50:]
        window.update(tuple(ring))
        assert window.summary == summarize(tuple(ring))


# -- the advice -----------------------------------------------------------------------------


def _advice(s: StepSummary, steps: list[StepRecord]) -> list[str]:
    state = AttachState(7, TrainerConfig(), 0, tuple(steps), s)
    found = host_bound(Context(frame(attach=(state,)), {}), state)
    return [f"{a.title} | {a.evidence} | {a.action}" for a in found]


def test_host_bound_advice_names_the_function_and_predicts_the_overlap() -> None:
    steps = _window(64, 1, 30, 3, batch=32)
    s = summarize(steps)
    (advice,) = _advice(s, steps)
    assert GET_BATCH in advice and f"{GET_BATCH} takes 88% of step time" in advice
    assert "thread" in advice
    assert "DataLoader" not in advice and "num_workers" not in advice
    # One thread brings a batch per 30 ms fetch: max(30, 34 - 30) = 30 ms instead of 34 ms
    assert f"~30.0 ms instead of {STEP_STATISTIC} 34.0 ms (x1.13 the samples/s" in advice
    assert f"{STEP_STATISTIC} step 34.0 ms" in advice


def test_a_collate_function_gets_the_dataloader_words() -> None:
    steps = _window(64, 1, 30, 3, site=COLLATE)
    (advice,) = _advice(summarize(steps), steps)
    assert COLLATE in advice and "DataLoader" in advice


@pytest.mark.parametrize(("data", "host", "compute"), [(30, 1, 3), (1, 2, 30), (30, None, 3)])
def test_host_bound_advice_is_silent_unless_the_window_is_host_bound(
        data: float, host: float | None, compute: float) -> None:
    steps = _window(64, data, host, compute)
    assert _advice(summarize(steps), steps) == []


def test_the_step_bars_draw_host_code_as_a_phase_of_its_own() -> None:
    from gputop.tui.views.steps import legend_line, step_line

    steps = _window(4, 1, 30, 3)
    assert "host" in _text(legend_line(steps))
    assert "host" not in _text(legend_line(_window(4, 1, None, 3)))
    bar = step_line(steps[0], 80, steps[0].duration_ns)
    assert sum(len(text) for text, style in bar if style == "warn" and "█" in text) > 40


def test_a_starvation_finding_is_the_header_verdict_and_the_exit_summarys() -> None:
    from gputop.analysis.steps import with_starvation
    from gputop.core.model import CpuStarvation

    steps = _window(40, 1, 2, 30)
    found = CpuStarvation(main_thread_wait_percent=64.0, main_thread_run_percent=20.0,
                          runqueue_wait_percent=90.0, cores_got=0.2, cores_wanted=1.0,
                          cores_allowed=1)
    s = with_starvation(summarize(steps), found)
    assert _text(summary_lines(s, 0)[0]).startswith(
        "cpu-starved  main thread waiting for a core 64% of the time")
    assert "verdict cpu-starved over the last 40 steps, main thread waiting for a core 64.0% " \
        "of the time" in _exit_summary(s, steps)
    assert summary_json(s)["verdict"] == "cpu-starved"
    assert with_starvation(summarize(steps), None).verdict == "compute-bound"
