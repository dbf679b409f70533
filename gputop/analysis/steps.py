"""Step classification: did each step wait for data or for compute, and what does a window say.

Per step, input = data wait + host-to-device copy and compute = the rest. On CUDA, when the
probe resolved the GPU timeline, the GPU's idle gap before the step is the input and its
busy time the compute (host wait can overstate starvation while queued work still runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from gputop.model import (
    AttachState,
    Band,
    InputStraggler,
    StepRecord,
    StepSummary,
    TrainerState,
    Verdict,
)

HIGHLY_PERCENT = 20.0
MODERATELY_PERCENT = 5.0
DATA_BOUND_PERCENT = 50.0
WAIT_FLOOR_NS = 200_000  # a next() faster than this did not wait: the batch was ready
PHASE_NAMES = ("data", "h2d", "forward", "backward", "optimizer", "gpu", "gpu_gap", "other")
STRAGGLER_FACTOR = 2.0
STRAGGLER_MIN_SHARE = 0.10
STALL_MIN_S = 5.0
STALL_STEPS = 10


def split(step: StepRecord) -> tuple[int, int] | None:
    """(input_ns, compute_ns) that decide the verdict, or None without a data phase."""
    if step.gpu_gap_ns is not None and step.gpu_ns is not None:
        return step.gpu_gap_ns, step.gpu_ns
    if step.data_ns is None:
        return None
    input_ns = step.data_ns + (step.h2d_ns or 0)
    return input_ns, max(0, step.duration_ns - input_ns)


def classify(step: StepRecord) -> Verdict:
    """data-bound when input ≥ compute, compute-bound otherwise, unknown without data."""
    parts = split(step)
    if parts is None:
        return "unknown"
    return "data-bound" if parts[0] >= parts[1] else "compute-bound"


def classified(steps: Iterable[StepRecord]) -> tuple[StepRecord, ...]:
    """The steps with their verdicts filled in."""
    return tuple(replace(s, verdict=classify(s)) for s in steps)


def band(input_percent: float | None) -> Band:
    """The TensorFlow profiler's input-bound bands."""
    if input_percent is None:
        return "unknown"
    if input_percent >= HIGHLY_PERCENT:
        return "highly"
    if input_percent >= MODERATELY_PERCENT:
        return "moderately"
    return "not"


def summarize(steps: Sequence[StepRecord]) -> StepSummary:
    """The window's non-warm-up steps reduced to share, band, verdict and their evidence."""
    counted = [s for s in steps if not s.warmup]
    parts = [p for p in (split(s) for s in counted) if p is not None]
    total = sum(i + c for i, c in parts)
    share = 100.0 * sum(i for i, _ in parts) / total if parts and total > 0 else None
    verdict: Verdict = "unknown"
    if share is not None:
        verdict = "data-bound" if share >= DATA_BOUND_PERCENT else "compute-bound"
    durations = sorted(s.duration_ns for s in counted)
    sized = [s for s in counted if s.batch_size is not None and s.batch_size > 0]
    sized_ns = sum(s.duration_ns for s in sized)
    waits = [_wait_ns(s) for s in counted]
    known_waits = [w for w in waits if w is not None]
    data = sorted(s.data_ns for s in counted if s.data_ns is not None)
    return StepSummary(
        steps=len(counted),
        input_bound_percent=share,
        band=band(share),
        verdict=verdict,
        median_step_ns=_percentile(durations, 50),
        p95_step_ns=_percentile(durations, 95),
        samples_per_s=(
            sum(s.batch_size or 0 for s in sized) * 1e9 / sized_ns if sized_ns > 0 else None
        ),
        waited_percent=(
            100.0 * sum(w > WAIT_FLOOR_NS for w in known_waits) / len(known_waits)
            if known_waits else None
        ),
        p95_data_ns=_percentile(data, 95),
        median_phase_ns=tuple((name, _median_phase(counted, name)) for name in PHASE_NAMES),
    )


def _wait_ns(step: StepRecord) -> int | None:
    """What the step waited for its batch: the GPU's idle gap on CUDA, else the host wait."""
    return step.gpu_gap_ns if step.gpu_gap_ns is not None else step.data_ns


def _median_phase(steps: Sequence[StepRecord], name: str) -> int | None:
    if name == "other":
        values = sorted(s.other_ns for s in steps)
    else:
        values = sorted(v for v in (getattr(s, f"{name}_ns") for s in steps) if v is not None)
    return _percentile(values, 50)


def _percentile(ordered: Sequence[int], q: float) -> int | None:
    """Nearest-rank percentile of an ascending sequence."""
    if not ordered:
        return None
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def input_straggler(ranks: Sequence[AttachState]) -> InputStraggler | None:
    """The rank that waits for input much longer than the rest (never a compute straggler).

    A compute straggler cannot be named: the all-reduce makes every rank's backward as long
    as the slowest one's, so only the input side tells ranks apart.
    """
    medians = []
    for state in ranks:
        inputs = sorted(p[0] for p in (split(s) for s in state.steps if not s.warmup) if p)
        steps = sorted(s.duration_ns for s in state.steps if not s.warmup)
        median_input, median_step = _percentile(inputs, 50), _percentile(steps, 50)
        if median_input is not None and median_step is not None:
            medians.append((median_input, median_step, state))
    if len(medians) < 2:
        return None
    medians.sort(key=lambda m: m[0])
    worst_input, worst_step, worst = medians[-1]
    others = _percentile([m[0] for m in medians[:-1]], 50) or 0
    if worst_input < STRAGGLER_FACTOR * others or worst_input < STRAGGLER_MIN_SHARE * worst_step:
        return None
    return InputStraggler(worst.pid, worst.config.rank, worst_input, others, worst_step)


def trainer_state(state: AttachState, now_ns: int) -> tuple[TrainerState, float | None]:
    """running, stalled (no step closed for max(5 s, 10x the median step)) or exited, and
    the seconds since the newest step closed (None before the first step).

    Both clocks are CLOCK_MONOTONIC (the probe's perf_counter_ns), shared by every process.
    """
    newest = state.steps[-1].end_ns if state.steps else None
    idle_s = None if newest is None else max(0.0, (now_ns - newest) / 1e9)
    if not state.alive:
        return "exited", idle_s
    if idle_s is None:
        return "running", None  # nothing to judge before the first step closes
    median_s = (state.summary.median_step_ns or 0) / 1e9
    return ("stalled" if idle_s > max(STALL_MIN_S, STALL_STEPS * median_s) else "running"), idle_s
