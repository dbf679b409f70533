"""Issue 38's truth table: on each loop shape and on minGPT-, HF-Trainer- and Lightning-style
trainers, gputop's verdict, its share and the function it names agree with hand timers in
the same run's loop, over the same steps (tests/helpers/truth.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.truth import AGREE_POINTS, run_trainer
from tests.helpers.truth_trainers import TRAINERS

pytest.importorskip("torch")
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", list(TRAINERS))
def test_gputop_agrees_with_the_timers_in_the_loop(tmp_path: Path, name: str) -> None:
    row = run_trainer(name, TRAINERS[name], tmp_path)
    if row.not_run:
        pytest.skip(row.not_run)
    assert row.steps > 0 and row.truth_steps > 0, row
    assert row.gputop_part == row.truth_part, row
    assert row.verdict_percent is not None and row.truth_percent is not None, row
    assert abs(row.verdict_percent - row.truth_percent) <= AGREE_POINTS, row
    if row.truth_part in ("input", "host"):
        assert row.site == row.truth_site, row
        assert row.site_percent is not None and row.truth_site_percent is not None, row
        assert abs(row.site_percent - row.truth_site_percent) <= AGREE_POINTS, row
