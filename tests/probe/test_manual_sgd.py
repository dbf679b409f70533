"""Issue 38: a loop that updates its parameters by hand (no optimizer object, as
pytorch/examples' word_language_model) gets one step per backward() under the zero-code
probe. Real torch trainers under `python -m gputop.probe`, judged by their own timers: the
steps are counted exactly and their durations, a partition of the loop's time, sum to the
time the loop's clocks measured."""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import pytest

from gputop.probe import ring as ring_format
from tests.helpers.probe import ROOT, TRAINERS, trainer_env
from tests.helpers.scheduling import favoured

pytest.importorskip("torch")
pytestmark = [pytest.mark.slow]

ITERATIONS = 30
SHARE = 0.02  # the steps' total within 2 % of the loop's clocks (the gap is their call overhead)


def _run(tmp_path: Path, mode: str) -> dict[str, list]:
    out = tmp_path / "out.json"
    cmd = [sys.executable, "-m", "gputop.probe", str(TRAINERS / "manual_sgd.py"), str(out),
           str(ITERATIONS), mode]
    done = subprocess.run(cmd, env=trainer_env(tmp_path), cwd=ROOT, timeout=300,
                          preexec_fn=favoured(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    result: dict[str, list] = json.loads(out.read_text())
    return result


def _assert_partition(records: list[dict[str, int]], clocks: list[int]) -> None:
    """One step between each two of the loop's clocks: contiguous, each holding a backward,
    their durations summing to the clocks' span."""
    assert len(records) == len(clocks) - 1
    assert [r["step"] for r in records] == list(range(len(records)))
    for a, b in pairwise(records):
        assert a["start_ns"] + a["duration_ns"] == b["start_ns"]  # no gap, no overlap
    assert all(r["backward_ns"] > 0 and r["flags"] & ring_format.F_OPTIMIZER for r in records)
    for r in records:  # each step a partition of its own time too (issue 38)
        parts = ("data_ns", "h2d_ns", "forward_ns", "backward_ns", "optimizer_ns", "sync_ns",
                 "host_ns")
        assert sum(max(0, r[name]) for name in parts) == r["duration_ns"], r
    total = sum(r["duration_ns"] for r in records)
    span = clocks[-1] - clocks[0]
    assert abs(total / span - 1) <= SHARE, (total, span)
    for r, (lo, hi) in zip(records, pairwise(clocks), strict=True):  # step by step, as shares
        assert abs(r["duration_ns"] - (hi - lo)) <= SHARE * span, (r, lo, hi)


def test_a_loop_without_an_optimizer_closes_a_step_at_each_backward(tmp_path: Path) -> None:
    got = _run(tmp_path, "loop")
    records, backward_at = got["records"], got["backward_at"]
    assert len(backward_at) == ITERATIONS
    # Each step runs from one backward's start to the next's (the last one stays open).
    _assert_partition(records, backward_at)
    want = ring_format.F_AT_BACKWARD | ring_format.F_IMPLICIT
    assert all(r["flags"] & want == want for r in records)
    assert all(r["loader"] == 0 and r["optimizer_ns"] == ring_format.NONE for r in records)


def test_a_dataloader_without_an_optimizer_closes_a_step_at_each_fetch(tmp_path: Path) -> None:
    got = _run(tmp_path, "loader")
    records, fetch_at = got["records"], got["fetch_at"]
    assert len(got["backward_at"]) == ITERATIONS and len(fetch_at) == ITERATIONS + 1
    # The loader's next() closes each step, the update after backward inside it.
    _assert_partition(records, fetch_at)
    assert not any(r["flags"] & (ring_format.F_AT_BACKWARD | ring_format.F_IMPLICIT)
                   for r in records)
