"""The incrementally kept window says what steps.summarize says from scratch, tick after
tick as random windows slide: warm-up steps, phases not measured, runaway compute, bimodal
step times, steps without a batch size, implicit steps opened where the last one closed or
not, the GPU timeline present or not, and loaders' steps left out of the middle."""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import replace

import pytest

from gputop.analysis import step_window
from gputop.analysis.step_window import StepWindow
from gputop.analysis.steps import classified, classify, input_waits, part_totals, summarize
from gputop.core.model import StepRecord

MS = 1_000_000


def _maybe(rng: random.Random, value: int, none_share: float = 0.2) -> int | None:
    return None if rng.random() < none_share else value


class _Trainer:
    """Random steps, each closing after the last, in one of a few regimes."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.n = 0
        self.clock = 1_000 * MS
        self.regime = rng.choice(("plain", "bimodal", "outliers", "gpu", "sparse", "ties",
                                  "host", "host-gpu"))

    def step(self) -> StepRecord:
        rng, regime = self.rng, self.regime
        self.n += 1
        if regime == "bimodal":
            duration = rng.choice((2 * MS, 125 * MS)) + rng.randrange(MS // 10)
        elif regime == "ties":
            duration = rng.choice((0, 10 * MS, 10 * MS, 20 * MS))
        else:
            duration = rng.randrange(5 * MS, 50 * MS)
            if regime == "outliers" and rng.random() < 0.08:
                duration *= 20
        data = _maybe(rng, rng.randrange(duration + 1) // 2,
                      0.6 if regime == "sparse" else 0.15)
        gpu = regime in ("gpu", "host-gpu") and rng.random() < 0.8
        host = regime.startswith("host") and rng.random() < 0.9
        samples = rng.randrange(6) if host else 0
        host_site, data_site = rng.choice(SITES), rng.choice(SITES)
        gap = rng.choice((0, rng.randrange(WAIT_NS))) if rng.random() < 0.3 else None
        implicit = rng.random() < 0.3
        self.clock += duration + (0 if rng.random() < 0.7 else rng.randrange(1, MS))
        return StepRecord(
            step=self.n, duration_ns=duration, data_ns=data if gap is None else gap,
            h2d_ns=_maybe(rng, rng.randrange(MS), 0.5),
            forward_ns=_maybe(rng, duration // 3), backward_ns=_maybe(rng, duration // 3),
            optimizer_ns=_maybe(rng, duration // 10, 0.5),
            gpu_ns=rng.randrange(duration + 1) if gpu else None,
            gpu_gap_ns=rng.randrange(duration + 1) // 3 if gpu else None,
            batch_size=rng.choice((None, 0, 32, 64, 64)),
            warmup=self.n <= 3 or rng.random() < 0.03,
            end_ns=None if rng.random() < 0.05 else self.clock, implicit=implicit,
            input_outside_model=rng.random() < 0.4,
            host_ns=rng.randrange(duration + 1) // 2 if host else None,
            samples=samples, host_site=host_site if samples else None,
            host_site_samples=rng.randrange(samples + 1), data_site=data_site if samples else None,
            data_site_samples=rng.randrange(samples + 1))


SITES = ("get_batch (train.py:116)", "collate (data.py:40)", "log (train.py:9)")


WAIT_NS = 400_000  # around steps.WAIT_FLOOR_NS


@pytest.mark.parametrize("seed", range(12))
def test_the_kept_summary_is_the_from_scratch_one_tick_after_tick(seed: int) -> None:
    rng = random.Random(seed)
    trainer = _Trainer(rng)
    size = rng.choice((1, 5, 64, 256))
    ring: deque[StepRecord] = deque(maxlen=size)
    window = StepWindow()
    for _ in range(60):
        for _ in range(rng.choice((0, 1, 1, 2, 18, 18, size + 3))):
            ring.append(trainer.step())
        steps = tuple(ring)
        if rng.random() < 0.1:  # a loader's steps left out: not a slide
            steps = tuple(s for s in steps if s.step % 3)
        window.update(steps)
        assert window.summary == summarize(steps)
        assert window.totals == (part_totals(steps) if window._kept else None)
        assert window.waits == (input_waits(steps) if window._kept else None)
        assert window.classified == classified(steps) == tuple(
            replace(s, verdict=classify(s)) for s in steps)
        # a step is copied only where its verdict was not yet its own
        assert all((a is b) == (a.verdict == b.verdict)
                   for a, b in zip(window.classified, steps, strict=True))


def test_a_first_step_that_loses_its_predecessor_is_no_longer_whole() -> None:
    """An implicit step counts as whole only after the step it opened behind."""
    first = StepRecord(step=1, duration_ns=10 * MS, data_ns=None, end_ns=10 * MS)
    second = StepRecord(step=2, duration_ns=30 * MS, data_ns=None, end_ns=40 * MS,
                        implicit=True)
    third = StepRecord(step=3, duration_ns=20 * MS, data_ns=None, end_ns=60 * MS,
                       implicit=True)
    window = StepWindow()
    for steps in ((first, second), (second, third), (third,), ()):
        window.update(steps)
        assert window.summary == summarize(steps)
        assert window.totals == (part_totals(steps) if window._kept else None)
        assert window.waits == (input_waits(steps) if window._kept else None)


def _full_step(n: int) -> StepRecord:
    """Step `n` of a trainer with every phase measured, closing every 10 ms."""
    return StepRecord(step=n, duration_ns=10 * MS + n, data_ns=MS, h2d_ns=MS, forward_ns=MS,
                      backward_ns=MS, optimizer_ns=MS, gpu_ns=5 * MS, gpu_gap_ns=MS,
                      batch_size=8, end_ns=10 * MS * n)


def _sliding_window(size: int) -> tuple[deque[StepRecord], StepWindow]:
    """A window of `size` steps past the ticks summarized from scratch (the first ones)."""
    ring: deque[StepRecord] = deque((_full_step(n) for n in range(size)), maxlen=size)
    window = StepWindow()
    window.update(tuple(ring))
    for n in range(size, size + 10):
        ring.append(_full_step(n))
        window.update(tuple(ring))
    return ring, window


def test_a_tick_merges_its_steps_into_each_sorted_list_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten steps closing in a tick go into each sorted list by one merge, not an insort
    each (a call per value per list was most of a tick's cost)."""
    ring, window = _sliding_window(256)
    insorts = 0
    real_insort = step_window.insort

    def counting_insort(values: list[float], value: float) -> None:
        nonlocal insorts
        insorts += 1
        real_insort(values, value)

    monkeypatch.setattr(step_window, "insort", counting_insort)
    ring.extend(_full_step(n) for n in range(266, 276))
    window.update(tuple(ring))
    assert window.summary == summarize(tuple(ring))
    assert insorts == 0


def test_a_tick_takes_the_logarithm_of_the_new_step_times_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The step-time modes rest on log step times: the window keeps them, so a tick takes
    the logarithms of the steps that closed, not of the whole window."""
    ring, window = _sliding_window(256)
    logs = 0
    real_log = math.log

    def counting_log(x: float) -> float:
        nonlocal logs
        logs += 1
        return real_log(x)

    monkeypatch.setattr(math, "log", counting_log)
    ring.extend(_full_step(n) for n in range(266, 276))
    window.update(tuple(ring))
    monkeypatch.undo()
    assert window.summary == summarize(tuple(ring))
    assert logs <= 10 * 2  # the steps that came, and at most those that left
