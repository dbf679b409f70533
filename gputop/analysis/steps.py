"""Step classification: did each step wait for data or for compute, and what does a window say.

Per step, input = data wait + host-to-device copy and compute = the rest. On CUDA, when the
probe resolved the GPU timeline, the GPU's idle gap before the step is the input and its
busy time the compute (host wait can overstate starvation while queued work still runs).

A window's share is the input time over the step time of its steps, leaving out the few
whose compute ran away (over OUTLIER_FACTOR times the median compute: CPU contention, a
checkpoint, a GC pause), so a burst of slow steps cannot swing the verdict. Input waits are
never left out: a loader's workers deliver in bursts, and those waits are the finding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import fields
from operator import attrgetter, sub
from typing import Any, NamedTuple, TypeVar

from gputop.core.model import (
    AttachState,
    Band,
    InputStraggler,
    InputWaits,
    PartTotals,
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
STRAGGLER_MIN_STEPS = 20  # fewer, and a rank's quartile or 90th percentile is one or two steps
STALL_MIN_S = 5.0
STALL_STEPS = 10
# CPU (% of one core) the trainer and its workers use together above which they make progress
# (the probe's own sampling and an idle interpreter stay far below it)
BUSY_CPU_PERCENT = 5.0
OUTLIER_FACTOR = 4.0  # compute this many times the window's median is not the model's cost
MAX_OUTLIER_SHARE = 0.10  # more such steps than this are how the loop runs: all counted
MODE_MIN_SHARE = 0.15  # each group of a bimodal window holds at least this share of steps
MODE_MIN_RATIO = 2.0  # ... and the groups' medians differ at least this much
BAND_WORDS = {"highly": "high", "moderately": "moderate", "not": "low", "unknown": "n/a"}
NO_DATA_PHASE = "no data wait measured (the probe saw no DataLoader fetch)"
UNBOUNDED = "no DataLoader: steps are timed only from backward to optimizer.step"
INPUT_WORDS = "input-bound"
OUTSIDE_MODEL_WORDS = "input (outside the model)"  # a loop without a DataLoader: not its wait
_T = TypeVar("_T")


def input_words(s: StepSummary) -> str:
    """What the input share is called: a loader's wait, or the time outside the model."""
    return OUTSIDE_MODEL_WORDS if s.input_outside_model else INPUT_WORDS


def split(step: StepRecord) -> tuple[int, int] | None:
    """(input_ns, compute_ns) that decide the verdict, or None without a data phase."""
    return split_of(step.duration_ns, step.data_ns, step.h2d_ns, step.gpu_ns, step.gpu_gap_ns)


def split_of(duration_ns: int, data_ns: int | None, h2d_ns: int | None, gpu_ns: int | None,
             gpu_gap_ns: int | None) -> tuple[int, int] | None:
    """split() from the fields it reads, before there is a record."""
    if gpu_gap_ns is not None and gpu_ns is not None:
        return gpu_gap_ns, gpu_ns
    if data_ns is None:
        return None
    input_ns = data_ns + (h2d_ns or 0)
    return input_ns, max(0, duration_ns - input_ns)


def classify(step: StepRecord) -> Verdict:
    """data-bound when input ≥ compute, compute-bound otherwise, unknown without data."""
    return verdict_of(step.duration_ns, step.data_ns, step.h2d_ns, step.gpu_ns, step.gpu_gap_ns)


def verdict_of(duration_ns: int, data_ns: int | None, h2d_ns: int | None, gpu_ns: int | None,
               gpu_gap_ns: int | None) -> Verdict:
    """classify() from the fields it reads, before there is a record: the attach source
    classifies each step as it makes it (wiring hands it this), and no second record is made."""
    parts = split_of(duration_ns, data_ns, h2d_ns, gpu_ns, gpu_gap_ns)
    if parts is None:
        return "unknown"
    return "data-bound" if parts[0] >= parts[1] else "compute-bound"


def classified(steps: Iterable[StepRecord]) -> tuple[StepRecord, ...]:
    """The steps with their verdicts filled in."""
    return tuple(map(with_verdict, steps))


def with_verdict(step: StepRecord) -> StepRecord:
    """`step` with its verdict filled in: itself where it was classified when made, else
    built from its fields (half what replace() costs, paid for every step that closes)."""
    verdict = classify(step)
    if verdict == step.verdict:
        return step
    values: tuple[Any, ...] = (*_BEFORE_VERDICT(step), verdict, *_AFTER_VERDICT(step))
    return StepRecord(*values)


_FIELDS = [f.name for f in fields(StepRecord)]
_BEFORE_VERDICT = attrgetter(*_FIELDS[:_FIELDS.index("verdict")])
_AFTER_VERDICT = attrgetter(*_FIELDS[_FIELDS.index("verdict") + 1:])


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
    """The window's non-warm-up steps reduced to share, band, verdict and their evidence.

    Step time, samples/s and the share come only from steps with real boundaries; a loop
    whose steps all lack one gets None for them and the reason.
    """
    bounded = _bounded(steps)
    counted = [s for s in steps if not s.warmup]
    timed = [s for s, real in zip(steps, bounded, strict=True) if real and not s.warmup]
    parts = [p for p in map(split, timed) if p is not None]
    share, outliers = _robust_share(parts)
    verdict: Verdict = "unknown"
    if share is not None:
        verdict = "data-bound" if share >= DATA_BOUND_PERCENT else "compute-bound"
    durations = sorted(s.duration_ns for s in timed)
    sized = [s for s in timed if s.batch_size is not None and s.batch_size > 0]
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
        input_time_percent=_ratio(parts),
        outlier_steps=outliers,
        data_bound_steps=sum(i >= c for i, c in parts),
        compute_bound_steps=sum(i < c for i, c in parts),
        step_modes=_modes(durations),
        unmeasured_reason=UNBOUNDED if counted and not timed else None,
        input_outside_model=_input_outside_model(counted),
    )


def input_waits(steps: Iterable[StepRecord]) -> InputWaits:
    """The non-warm-up steps' input quantiles and median step time (the straggler rule's)."""
    counted = [s for s in steps if not s.warmup]
    inputs = sorted(p[0] for p in map(split, counted) if p)
    return waits_of(inputs, sorted(s.duration_ns for s in counted))


def waits_of(inputs: Sequence[int], durations: Sequence[int]) -> InputWaits:
    """InputWaits from the ascending inputs and step times of a window's non-warm-up steps."""
    low, median, high = (_percentile(inputs, q) or 0 for q in (25, 50, 90))
    return InputWaits(len(inputs), low, median, high, _percentile(durations, 50) or 0)


def part_totals(steps: Iterable[StepRecord]) -> PartTotals:
    """The non-warm-up steps that have a split, and their input and compute summed."""
    parts = [p for p in map(split, (s for s in steps if not s.warmup)) if p is not None]
    return PartTotals(len(parts), sum(i for i, _ in parts), sum(c for _, c in parts))


def _input_outside_model(steps: Sequence[StepRecord]) -> bool:
    """Whether most steps with an input got it from the gap before the model's forward (a
    loop without a DataLoader), not from a loader's wait."""
    measured = [s.input_outside_model for s in steps if s.data_ns is not None]
    return 2 * sum(measured) > len(measured)


def _bounded(steps: Sequence[StepRecord]) -> list[bool]:
    """Per step, whether its duration is a whole step: a loader opened it, or it opened
    where the previous step closed (gputop.step_end()). A step the zero-code probe opened
    at backward and closed at optimizer.step leaves the fetch and forward outside it."""
    out = []
    previous_end = None
    for step in steps:
        start = None if step.end_ns is None else step.end_ns - step.duration_ns
        out.append(not step.implicit or (start is not None and start == previous_end))
        previous_end = step.end_ns
    return out


def _ratio(parts: Sequence[tuple[int, int]]) -> float | None:
    """Total input over total time, in percent; None without time."""
    total = sum(i + c for i, c in parts)
    return 100.0 * sum(i for i, _ in parts) / total if total > 0 else None


def _robust_share(parts: Sequence[tuple[int, int]]) -> tuple[float | None, int]:
    """The input share without the steps whose compute ran away, and how many those were.

    When more than MAX_OUTLIER_SHARE of the steps are that slow, they are the loop's own
    rhythm (a heavy step every few), not outliers: every step counts then.
    """
    median = _percentile(sorted(c for _, c in parts), 50)
    if not median:
        return _ratio(parts), 0
    kept = [p for p in parts if p[1] <= OUTLIER_FACTOR * median]
    left_out = len(parts) - len(kept)
    if left_out > MAX_OUTLIER_SHARE * len(parts):
        return _ratio(parts), 0
    return _ratio(kept), left_out


def _modes(ordered: Sequence[int], logs: Sequence[float] | None = None
           ) -> tuple[tuple[float, int], ...]:
    """(% of steps, median ns) of the fast and the slow group when step times fall into two
    clear groups (the widest gap, in log time, wider than either group's spread), else ().
    `logs`: the step times' logarithms where the caller keeps them (positive times)."""
    n = len(ordered)
    least = max(2, math.ceil(MODE_MIN_SHARE * n))
    if n < 2 * least or ordered[0] <= 0:
        return ()
    if logs is None:
        logs = list(map(math.log, ordered))
    gaps = list(map(sub, logs[least:n - least + 1], logs[least - 1:n - least]))  # k, k - 1
    cut = least + gaps.index(max(gaps))  # the first widest gap
    gap = logs[cut] - logs[cut - 1]
    spread = max(_spread(logs[:cut]), _spread(logs[cut:]))
    low, high = _percentile(ordered[:cut], 50), _percentile(ordered[cut:], 50)
    if gap <= spread or low is None or high is None or high < MODE_MIN_RATIO * low:
        return ()
    return ((100.0 * cut / n, low), (100.0 * (n - cut) / n, high))


def _spread(ordered: Sequence[float]) -> float:
    """The 10th-to-90th percentile range of an ascending sequence."""
    low, high = ordered[max(0, math.ceil(0.1 * len(ordered)) - 1)], ordered[
        max(0, math.ceil(0.9 * len(ordered)) - 1)]
    return high - low


def bimodal_note(s: StepSummary, duration: Callable[[int | None], str]) -> str:
    """'bimodal: 45% of steps ~2.0ms, 55% ~125ms' (the groups' shares and median times)."""
    (low_pct, low_ns), (high_pct, high_ns) = s.step_modes
    return (f"bimodal: {low_pct:.0f}% of steps ~{duration(low_ns)}, "
            f"{high_pct:.0f}% ~{duration(high_ns)}")


def _wait_ns(step: StepRecord) -> int | None:
    """What the step waited for its batch: the GPU's idle gap on CUDA, else the host wait."""
    return step.gpu_gap_ns if step.gpu_gap_ns is not None else step.data_ns


def _median_phase(steps: Sequence[StepRecord], name: str) -> int | None:
    return _percentile(sorted([v for v in map(_PHASE_NS[name], steps) if v is not None]), 50)


_PHASE_NS = {name: attrgetter(f"{name}_ns") for name in PHASE_NAMES}  # other_ns: never None


def _percentile(ordered: Sequence[_T], q: float) -> _T | None:
    """Nearest-rank percentile of an ascending sequence."""
    if not ordered:
        return None
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


class _Waits(NamedTuple):
    """One rank's input waits: quartile, median and 90th percentile, and its median step."""

    low: int
    median: int
    high: int
    step: int
    state: AttachState


def input_straggler(ranks: Sequence[AttachState]) -> InputStraggler | None:
    """The rank whose short input waits outlast the other ranks' long ones: its quartile
    at least STRAGGLER_FACTOR times their 90th percentile (never a compute straggler).

    A slower loader makes its rank wait in nearly every step (the others' loaders have slack:
    their batches are ready). Loaders alike but out of phase, for hundreds of steps at a time
    (one rank waits for its batch, the other in the all-reduce), only overlap: the rank behind
    still finds a batch ready in many steps, the one ahead waits in its loader's bursts. The
    all-reduce makes every rank's backward as long as the slowest one's, so only the input
    side tells ranks apart.
    """
    if len(ranks) < 2:  # nothing to compare with (most jobs): no window walked each tick
        return None
    judged = [w for w in map(_rank_waits, ranks) if w is not None]
    if len(judged) < 2:
        return None
    worst = max(judged, key=attrgetter("low"))
    others = [w for w in judged if w is not worst]
    others_median = _percentile(sorted(w.median for w in others), 50) or 0
    others_high = _percentile(sorted(w.high for w in others), 50) or 0
    if (worst.low < STRAGGLER_FACTOR * others_high
            or worst.median < STRAGGLER_MIN_SHARE * worst.step):
        return None
    return InputStraggler(worst.state.pid, worst.state.config.rank, worst.median,
                          others_median, worst.step, worst.low, others_high)


def _rank_waits(state: AttachState) -> _Waits | None:
    """A rank's input waits (kept by the sampler, else from its steps), or None with fewer
    than STRAGGLER_MIN_STEPS steps measured."""
    waits = state.input_waits or input_waits(state.steps)
    if waits.measured < STRAGGLER_MIN_STEPS:
        return None
    return _Waits(waits.low, waits.median, waits.high, waits.step, state)


def quiet_limit_s(state: AttachState) -> float:
    """How long a trainer may close no step before its quiet says anything: max(5 s, 10x its
    median step)."""
    return max(STALL_MIN_S, STALL_STEPS * (state.summary.median_step_ns or 0) / 1e9)


def trainer_state(
    state: AttachState, now_ns: int, busy_ns: int | None = None
) -> tuple[TrainerState, float | None]:
    """running, stalled (no progress for `quiet_limit_s`) or exited, and the seconds since the
    newest step closed (None before the first step).

    Progress is a step closing or the trainer (with its workers) using CPU: `busy_ns` is when
    it was last seen doing so (None: not measured, and the steps alone decide). A long step
    still computing (an LBFGS step, an evaluation) is running, its step in progress. The ring
    holds no time of the probe's last phase event, so phases in flight are not asked.

    Every clock is CLOCK_MONOTONIC (the probe's perf_counter_ns), shared by every process.
    """
    newest = state.steps[-1].end_ns if state.steps else None
    idle_s = None if newest is None else max(0.0, (now_ns - newest) / 1e9)
    if not state.alive:
        return "exited", idle_s
    if idle_s is None:
        return "running", None  # nothing to judge before the first step closes
    limit = quiet_limit_s(state)
    if idle_s <= limit or (busy_ns is not None and (now_ns - busy_ns) / 1e9 <= limit):
        return "running", idle_s
    return "stalled", idle_s


def step_in_progress_s(state: AttachState, kind: TrainerState,
                       idle_s: float | None) -> float | None:
    """How long the open step has run, once a running trainer has closed no step for longer
    than `quiet_limit_s` (it computes: a long step, an evaluation); None otherwise (a step of
    the usual length, a stalled or exited trainer, none closed yet: unknown)."""
    if kind != "running" or idle_s is None or idle_s <= quiet_limit_s(state):
        return None
    return idle_s
