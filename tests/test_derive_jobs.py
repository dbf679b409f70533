"""The input straggler is named among the ranks of one job, never across unrelated trainers
(an exporter attaches every probed trainer on the host, each its own job)."""

from __future__ import annotations

import time
from dataclasses import replace

from gputop.frames.derive import Derivation, recorded
from tests.helpers.builders import attached


def test_a_slow_loader_in_another_job_is_no_straggler() -> None:
    fast = replace(attached(10, data_ms=1, compute_ms=50, rank=0, world_size=1), job=10)
    slow = replace(attached(20, data_ms=40, compute_ms=50, rank=0, world_size=1), job=20)
    _, straggler = Derivation().attached((fast, slow), time.monotonic_ns())
    assert straggler is None


def test_the_slow_rank_of_one_job_is_its_straggler() -> None:
    fast = replace(attached(10, data_ms=1, compute_ms=50, rank=0, world_size=2), job=10)
    slow = replace(attached(11, data_ms=40, compute_ms=50, rank=1, world_size=2), job=10)
    other = replace(attached(20, data_ms=1, compute_ms=50), job=20)
    _, straggler = Derivation().attached((fast, slow, other), time.monotonic_ns())
    assert straggler is not None and straggler.pid == 11


def test_a_recording_that_does_not_say_whose_job_names_no_straggler() -> None:
    fast = attached(10, data_ms=1, compute_ms=50, rank=0, world_size=2)
    slow = attached(11, data_ms=40, compute_ms=50, rank=1, world_size=2)
    assert recorded((fast, slow))[1] is None  # n/a: ranks of one job, or of two?
    _, straggler = recorded((replace(fast, job=10), replace(slow, job=10)))
    assert straggler is not None and straggler.pid == 11
