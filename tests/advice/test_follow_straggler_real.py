"""input-straggler, followed: a torchrun job of two CPU ranks (DDP over gloo) whose rank 0
has fewer DataLoader workers than rank 1 for I/O-like samples. The advice must name rank 0;
the test then gives rank 0 what the fast rank has, as the advice says, and measures the
job's samples/s before and after, interleaved (tests/helpers/follow.py); followed, the
advice is gone. Ranks fed alike are never named, however their loaders' phases drift.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gputop.analysis.steps import STRAGGLER_FACTOR
from tests.helpers.advice_run import (
    advice,
    followed,
    ids,
    probed_trainer,
    sample_until,
    shows,
    watching,
)
from tests.helpers.follow import PREFETCH, START_STEPS, Setting, interleaved, report

pytestmark = [pytest.mark.slow, pytest.mark.alone]

LOADER = ("--sleep-ms", "10", "--batch-size", "4")  # each sample waits 10 ms, as on storage
SLOW, FAST = 1, 4  # workers: one loads a batch per 40 ms, four overlap their waits
MEASURED_STEPS = 30  # the effect is several-fold: a short run tells
ALIKE_TICKS = 60  # frames of a job fed alike, from its first step: ~2000 steps, several
# times as long as the old median rule took to name one rank or the other wrongly
FOLLOWED_TICKS = 20  # frames of the followed job, from its first steps


def job(workers: tuple[int, ...]) -> Setting:
    """The test trainer under torchrun, rank i with workers[i] DataLoader workers."""
    return Setting(("--rank-workers", ",".join(map(str, workers)), *LOADER),
                   START_STEPS + 2 * PREFETCH * max(workers), ranks=len(workers))


def test_input_straggler_names_the_slow_rank_and_giving_it_what_the_fast_rank_has_pays(
        tmp_path: Path) -> None:
    before, after = job((SLOW, FAST)), job((FAST, FAST))
    with probed_trainer(tmp_path / "advised", *before.args, ranks=2) as trainer, \
            watching(trainer) as sampler:
        frame = sample_until(sampler, shows("input-straggler"))
    assert {s.config.rank: s.config.num_workers for s in frame.attached} == {0: SLOW, 1: FAST}
    straggler = frame.straggler
    assert straggler is not None and (straggler.pid, straggler.rank) == (trainer.pid, 0)
    assert straggler.median_input_ns >= STRAGGLER_FACTOR * straggler.others_median_input_ns
    found = advice(frame, "input-straggler")
    assert found.title.startswith("rank 0 is slowest") and found.evidence == straggler.evidence
    runs = interleaved(tmp_path, before, after, MEASURED_STEPS)
    assert report("input-straggler", f"rank 0's num_workers {SLOW} -> {FAST} (rank 1's)",
                  runs) > 1.1
    frames = followed(tmp_path, after.args, ranks=2, ticks=FOLLOWED_TICKS, min_steps=0)
    assert "input-straggler" not in ids(frames)


def test_ranks_fed_alike_are_never_called_stragglers(tmp_path: Path) -> None:
    """Two ranks with the same loader, watched from their first step: their loaders run out
    of phase (one rank waits for its batch, the other in the all-reduce) for hundreds of
    steps at a time, and that lag must not be taken for a slower loader."""
    frames = followed(tmp_path, job((FAST, FAST)).args, ranks=2, ticks=ALIKE_TICKS,
                      min_steps=0)
    named = [(i, f.straggler) for i, f in enumerate(frames) if f.straggler is not None]
    assert not named, f"named in {len(named)} of {len(frames)} frames, first {named[0]}"
    assert "input-straggler" not in ids(frames)
