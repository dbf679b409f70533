"""`make bench`: a tick's step analysis for one attached trainer, kept window vs from scratch.

A 256-step window (the attach source's), 18 steps closing per 1 s tick (the demo trainer's
rate): CPU per tick of Derivation.attached, which keeps the window classified and summarized
as steps arrive and leave (gputop.analysis.step_window), beside the path it replaced
(reference, same run): each step's verdict looked up by object, the window summarized from
scratch by steps.summarize. Both are fed the same windows; medians of rounds taken in turns.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gputop.analysis import steps
from gputop.core.model import AttachState, StepRecord, TrainerConfig
from gputop.frames.derive import Derivation

WINDOW = 256
MS = 1_000_000


def _windows(ticks: int, per_tick: int, seed: int = 1) -> list[tuple[StepRecord, ...]]:
    """Each tick's window of a trainer closing `per_tick` steps a tick."""
    rng = random.Random(seed)
    ring: deque[StepRecord] = deque(maxlen=WINDOW)
    clock, out = 0, []
    for n in range((WINDOW // per_tick + 1 + ticks) * per_tick):
        data = rng.randrange(0, 20 * MS)
        duration = data + rng.randrange(35 * MS, 60 * MS)
        clock += duration
        ring.append(StepRecord(
            step=n, duration_ns=duration, data_ns=data, h2d_ns=rng.randrange(MS),
            forward_ns=duration // 3, backward_ns=duration // 3, optimizer_ns=duration // 10,
            batch_size=64, warmup=n < 3, end_ns=clock))
        if (n + 1) % per_tick == 0:
            out.append(tuple(ring))
    return out[-ticks:]


class FromScratch:
    """The per-tick step work gputop did before the kept window (the reference)."""

    def __init__(self) -> None:
        self.verdicts: dict[int, tuple[StepRecord, StepRecord]] = {}

    def attached(self, states: list[AttachState], now_ns: int) -> None:
        verdicts: dict[int, tuple[StepRecord, StepRecord]] = {}
        for state in states:
            done = []
            for step in state.steps:
                raw, known = self.verdicts.get(id(step), (None, step))
                if raw is not step:
                    known = replace(step, verdict=steps.classify(step))
                verdicts[id(step)] = (step, known)
                done.append(known)
            summary = steps.summarize(tuple(done))
            state = replace(state, steps=tuple(done), summary=summary)
            steps.trainer_state(state, now_ns)
        self.verdicts = verdicts


def _per_tick_us(make: Callable[[], object], windows: list[tuple[StepRecord, ...]]) -> float:
    """CPU µs per tick of a fresh deriver's `attached` over `windows` (after a first tick)."""
    deriver = make()
    state = AttachState(pid=1, config=TrainerConfig(), dropped_records=0, steps=windows[0])
    deriver.attached([state], 0)  # type: ignore[attr-defined]
    states = [replace(state, steps=w) for w in windows[1:]]
    began = time.process_time_ns()
    for s in states:
        deriver.attached([s], 0)  # type: ignore[attr-defined]
    return (time.process_time_ns() - began) / 1e3 / len(states)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--ticks", type=int, default=60)
    args = parser.parse_args()
    print(f"window {WINDOW} steps; CPU µs per tick, median of {args.rounds} rounds "
          f"of {args.ticks} ticks, taken in turns")
    print(f"{'steps/tick':>10} {'from scratch':>12} {'kept':>8} {'kept/scratch':>12}")
    for per_tick in (1, 18, 100):
        windows = _windows(args.ticks + 1, per_tick)
        scratch, kept = [], []
        for _ in range(args.rounds):
            scratch.append(_per_tick_us(FromScratch, windows))
            kept.append(_per_tick_us(Derivation, windows))
        s, k = statistics.median(scratch), statistics.median(kept)
        print(f"{per_tick:>10} {s:>12.0f} {k:>8.0f} {k / s:>12.2f}")
    print("from scratch: every step's verdict looked up, steps.summarize over the window; "
          "kept: Derivation.attached (step_window: the new and gone steps only)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
