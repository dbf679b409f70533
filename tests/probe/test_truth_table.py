"""Issue 38's truth table: on each loop shape, on two trainers whose host part is pure-Python
functions and on minGPT-, HF-Trainer- and Lightning-style trainers, gputop's verdict, its share
and the function it names agree with hand timers in the same run's loop, over the same steps
(tests/helpers/truth.py). In the same runs, a step is a partition of its wall time (data +
h2d + forward + backward + optimizer + sync + host = duration, to the ns), and the slow
function is named exactly, "function (file:line)" of its def, by the steps' own samples."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from gputop.core.model import StepRecord
from tests.helpers.probe import def_site
from tests.helpers.truth import AGREE_POINTS, SITE_KEY, Row, run_trainer
from tests.helpers.truth_trainers import SHARED_PART, SLOW, TRAINERS

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

CLOSURE = "lbfgs"  # the model's forward and backward run inside optimizer.step(closure)


@pytest.mark.parametrize("name", list(TRAINERS))
def test_gputop_agrees_with_the_timers_and_partitions_each_step(tmp_path: Path,
                                                                name: str) -> None:
    row = run_trainer(name, TRAINERS[name], tmp_path)
    if row.not_run:
        pytest.skip(row.not_run)
    assert_agrees(row)
    assert_partitioned(row.records)
    assert len(row.records) >= row.truth_steps // 2, row
    if name in SLOW:
        assert_slow_function_named(row, *SLOW[name])
    if name in SHARED_PART:  # the part's share is not the answer for its top function
        others = [share for site, share in row.truth_sites if site != row.truth_site]
        assert sum(others) > 2 * AGREE_POINTS, row
    if name == CLOSURE:
        assert all(s.forward_ns and s.backward_ns and s.optimizer_ns for s in row.records)
        assert all(s.input_outside_model for s in row.records)


def assert_agrees(row: Row) -> None:
    """Verdict and share, and for input and host the function exactly and its share."""
    assert row.steps > 0 and row.truth_steps > 0, row
    assert row.gputop_part == row.truth_part, row
    assert row.verdict_percent is not None and row.truth_percent is not None, row
    assert abs(row.verdict_percent - row.truth_percent) <= AGREE_POINTS, row
    if row.truth_part in ("input", "host"):
        assert row.site == row.truth_site, row
        assert row.site_percent is not None and row.truth_site_percent is not None, row
        assert abs(row.site_percent - row.truth_site_percent) <= AGREE_POINTS, row


def assert_partitioned(steps: tuple[StepRecord, ...]) -> None:
    """Every step's phases sum to its wall time, to the ns; nothing waits on a device."""
    assert steps
    for s in steps:
        assert s.host_ns is not None, s
        parts = (s.data_ns, s.h2d_ns, s.forward_ns, s.backward_ns, s.optimizer_ns, s.sync_ns,
                 s.host_ns)
        assert sum(p or 0 for p in parts) == s.duration_ns, s
        assert s.sync_ns == 0, s  # a CPU model
        assert s.samples >= s.host_site_samples + s.data_site_samples, s


def assert_slow_function_named(row: Row, part: str, function: str) -> None:
    """The trainer's slow code is where it was written, by the timers and by the steps."""
    assert row.script is not None
    named = def_site(row.script, function)
    assert row.truth_part == part and row.truth_site == named, row
    kind = SITE_KEY[part]
    assert _top_site(row.records, kind) == named, row
    other = "data" if kind == "host" else "host"
    slow = sum(getattr(s, f"{kind}_ns") or 0 for s in row.records)
    assert slow > sum(getattr(s, f"{other}_ns") or 0 for s in row.records), row


def _top_site(steps: tuple[StepRecord, ...], kind: str) -> str | None:
    """The function most sampled in the steps' `kind` phase (host, data)."""
    tally: Counter[str] = Counter()
    for s in steps:
        site = getattr(s, f"{kind}_site")
        if site is not None:
            tally[site] += getattr(s, f"{kind}_site_samples")
    return tally.most_common(1)[0][0] if tally else None
