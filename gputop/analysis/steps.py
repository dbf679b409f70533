"""Step classification: did each step wait for data, for host code or for compute, and what
does a window say.

Per step, input = data wait + host-to-device copy, host = the Python outside the model and
the loader (where the probe partitioned the step: host_ns) and compute = the rest (forward,
backward, optimizer, waiting on the device). The largest part is the step's verdict; ties go
to input, then host (input >= host and input >= compute: data-bound; else host >= compute:
host-bound). Without host_ns, host is 0: data-bound when input >= compute, as before. On
CUDA, when the probe resolved the GPU timeline, the GPU's idle gap before the step stands for
input and host (split between them as their host times are) and its busy time for compute
(host wait can overstate starvation while queued work still runs).

A window's share is the input time over the step time of its steps, leaving out the few
whose compute ran away (over OUTLIER_FACTOR times the median compute: CPU contention, a
checkpoint, a GC pause), so a burst of slow steps cannot swing the verdict. Input waits are
never left out: a loader's workers deliver in bursts, and those waits are the finding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import fields, replace
from operator import attrgetter, sub
from typing import Any, NamedTuple, TypeVar

from gputop.core.model import (
    AttachState,
    Band,
    CpuStarvation,
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


def part_words(s: StepSummary) -> str:
    """What the verdict's share is a share of: the input (a loader's wait, or the time outside
    the model), the host code, the compute, or a trainer-level verdict's own part."""
    if s.verdict == "data-bound":
        return input_words(s)
    return {"host-bound": "host", "compute-bound": "compute"}.get(s.verdict,
                                                                  s.verdict_part or "")


def verdict_site(s: StepSummary) -> str | None:
    """'get_batch (train.py:116) 84%': the function the probe sampled most in the verdict's
    part (host code; input outside the model), with its share of the window's samples."""
    if s.verdict == "host-bound" and s.host_site and s.host_site_percent is not None:
        return f"{s.host_site} {s.host_site_percent:.0f}%"
    if (s.verdict == "data-bound" and s.input_outside_model and s.data_site
            and s.data_site_percent is not None):
        return f"{s.data_site} {s.data_site_percent:.0f}%"
    return None


def other_parts(s: StepSummary) -> str:
    """The parts the verdict does not name: 'input 48%, host 10%'."""
    words = [f"input {s.input_bound_percent:.0f}%"] if s.input_bound_percent is not None else []
    if s.host_percent is not None:
        words.append(f"host {s.host_percent:.0f}%")
    return ", ".join(words)


def steps_of_verdict(s: StepSummary) -> float | None:
    """Of the steps judged one by one, the share whose verdict is the window's."""
    return {"data-bound": s.data_bound_steps_percent,
            "compute-bound": s.compute_bound_steps_percent,
            "host-bound": s.host_bound_steps_percent}.get(s.verdict)


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


Parts = tuple[int, int, int]  # (input, host, compute) ns of a step, or of a window summed


def parts(step: StepRecord) -> Parts | None:
    """(input, host, compute) that decide the verdict, or None without a data phase (and
    without the probe's partition)."""
    return parts_of(step.duration_ns, step.data_ns, step.h2d_ns, step.gpu_ns, step.gpu_gap_ns,
                    step.host_ns)


def parts_of(duration_ns: int, data_ns: int | None, h2d_ns: int | None, gpu_ns: int | None,
             gpu_gap_ns: int | None, host_ns: int | None = None) -> Parts | None:
    """parts() from the fields it reads, before there is a record."""
    if host_ns is None:
        two = split_of(duration_ns, data_ns, h2d_ns, gpu_ns, gpu_gap_ns)
        return None if two is None else (two[0], 0, two[1])
    input_ns = (data_ns or 0) + (h2d_ns or 0)
    if gpu_gap_ns is not None and gpu_ns is not None:
        waited = input_ns + host_ns  # the gap split as the host's own times are
        host_part = gpu_gap_ns * host_ns // waited if waited > 0 else 0
        return gpu_gap_ns - host_part, host_part, gpu_ns
    return input_ns, host_ns, max(0, duration_ns - input_ns - host_ns)


def verdict_of_parts(input_ns: float, host_ns: float, compute_ns: float) -> Verdict:
    """The largest part's verdict; ties go to input, then to host."""
    if input_ns >= host_ns and input_ns >= compute_ns:
        return "data-bound"
    return "host-bound" if host_ns >= compute_ns else "compute-bound"


def classify(step: StepRecord) -> Verdict:
    """The step's largest part: data-bound, host-bound or compute-bound; unknown without data."""
    return verdict_of(step.duration_ns, step.data_ns, step.h2d_ns, step.gpu_ns, step.gpu_gap_ns,
                      step.host_ns)


def verdict_of(duration_ns: int, data_ns: int | None, h2d_ns: int | None, gpu_ns: int | None,
               gpu_gap_ns: int | None, host_ns: int | None = None) -> Verdict:
    """classify() from the fields it reads, before there is a record: the attach source
    classifies each step as it makes it (wiring hands it this), and no second record is made."""
    found = parts_of(duration_ns, data_ns, h2d_ns, gpu_ns, gpu_gap_ns, host_ns)
    return "unknown" if found is None else verdict_of_parts(*found)


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
    found = [p for p in map(parts, timed) if p is not None]
    kept, outliers = _robust_parts(found)
    hosted = sum(s.host_ns is not None for s in timed if parts(s) is not None)
    durations = sorted(s.duration_ns for s in timed)
    sized = [s for s in timed if s.batch_size is not None and s.batch_size > 0]
    sized_ns = sum(s.duration_ns for s in sized)
    waits = [_wait_ns(s) for s in counted]
    known_waits = [w for w in waits if w is not None]
    data = sorted(s.data_ns for s in counted if s.data_ns is not None)
    verdicts = [verdict_of_parts(*p) for p in found]
    host_sites, data_sites, samples, sampled = _site_counts(counted)
    return window_summary(
        StepSummary(
            steps=len(counted),
            input_bound_percent=None,
            band="unknown",
            verdict="unknown",
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
            input_time_percent=_ratio([(i, h + c) for i, h, c in found]),
            outlier_steps=outliers,
            data_bound_steps=verdicts.count("data-bound"),
            compute_bound_steps=verdicts.count("compute-bound"),
            step_modes=_modes(durations),
            unmeasured_reason=UNBOUNDED if counted and not timed else None,
            input_outside_model=_input_outside_model(counted),
            host_bound_steps=verdicts.count("host-bound"),
            mean_step_ns=round(sum(durations) / len(durations)) if durations else None,
            stack_samples=samples,
        ),
        kept, hosted > 0, host_sites, data_sites, sampled)


def window_summary(s: StepSummary, kept: Parts | None, hosted: bool,
                   host_sites: Mapping[str, int], data_sites: Mapping[str, int],
                   sampled: tuple[int, int] = (0, 0)) -> StepSummary:
    """`s` with what the window's summed parts (None: no step has them) decide: the input and
    host shares, the band, the verdict with its own part's share, and the top sites (their
    shares over the host and data parts' `sampled` samples, _site_counts')."""
    total = sum(kept) if kept is not None else 0
    if kept is None or total <= 0:
        return s  # no share: the verdict is unknown, and no part's site has a share
    input_ns, host_ns, compute_ns = kept
    shares = (100.0 * input_ns / total, 100.0 * host_ns / total, 100.0 * compute_ns / total)
    verdict = verdict_of_parts(*kept)
    part = {"data-bound": 0, "host-bound": 1}.get(verdict, 2)
    host_site, host_site_percent = _top_site(host_sites, shares[1] if hosted else None,
                                             sampled[0])
    data_site, data_site_percent = _top_site(data_sites, shares[0], sampled[1])
    return replace(
        s, input_bound_percent=shares[0], band=band(shares[0]), verdict=verdict,
        host_percent=shares[1] if hosted else None, verdict_percent=shares[part],
        verdict_part=("input", "host", "compute")[part], host_site=host_site,
        host_site_percent=host_site_percent, data_site=data_site,
        data_site_percent=data_site_percent)


def with_trainer_verdict(s: StepSummary, verdict: Verdict | None, percent: float | None = None,
                         part: str | None = None) -> StepSummary:
    """`s` with a trainer-level verdict in place of the steps' (a cpu-starved finding: `part`
    names what `percent` is a share of, e.g. "run-queue wait"); `s` itself when `verdict` is
    None. The header shows the summary's verdict with its part's share, so it reads this."""
    if verdict is None:
        return s
    return replace(s, verdict=verdict, verdict_percent=percent, verdict_part=part,
                   steps_verdict=s.steps_verdict or s.verdict)


def with_starvation(s: StepSummary, starved: CpuStarvation | None) -> StepSummary:
    """`s` with the cpu-starved verdict where the trainer's main thread waits for a core
    (analysis.starvation's finding), its share of the time named; `s` itself otherwise."""
    if starved is None:
        return s
    return with_trainer_verdict(s, "cpu-starved", starved.main_thread_wait_percent,
                                "main thread waiting for a core")


def share_of(s: StepSummary) -> str:
    """What the verdict's share is of: step time for the steps' own parts, else wall time."""
    return "of step time" if s.verdict in _STEP_VERDICTS else "of the time"


_STEP_VERDICTS = frozenset(("data-bound", "host-bound", "compute-bound"))
STEP_STATISTIC = "mean"  # the one step time every screen, the JSON and the exit summary give


def step_time_words(s: StepSummary, duration: Callable[[int | None], str]) -> str:
    """'mean 18.0ms over the last 256 steps' (or both groups' times where the steps are
    bimodal); 'mean n/a over the last N steps' without one."""
    window = f"over the last {s.steps} steps"
    statistic, step_ns = step_figure(s)
    if step_ns is None:
        return f"{statistic} n/a {window}"
    text = f"{statistic} {duration(step_ns)} {window}"
    return f"{text} ({bimodal_note(s, duration)})" if s.step_modes else text


def step_figure(s: StepSummary) -> tuple[str, int | None]:
    """The window's one step time and its statistic; a summary made without the mean (by
    hand, elsewhere) gives its median, and says so."""
    if s.mean_step_ns is None and s.median_step_ns is not None:
        return "median", s.median_step_ns
    return STEP_STATISTIC, s.mean_step_ns


def verdict_share(s: StepSummary) -> float | None:
    """The share of step time of the verdict's own part (a summary made by hand may not
    carry it: then from its input and host shares)."""
    if s.verdict_percent is not None or s.input_bound_percent is None:
        return s.verdict_percent
    if s.verdict == "data-bound":
        return s.input_bound_percent
    if s.verdict == "host-bound":
        return s.host_percent
    if s.verdict == "compute-bound":
        return 100.0 - s.input_bound_percent - (s.host_percent or 0.0)
    return None


def _site_counts(steps: Iterable[StepRecord]
                 ) -> tuple[dict[str, int], dict[str, int], int, tuple[int, int]]:
    """The stack samples of each step's top host and data sites, summed per site; all the
    steps' samples; and the host and data parts' samples summed (part_sampled's)."""
    host: dict[str, int] = {}
    data: dict[str, int] = {}
    total = host_part = data_part = 0
    for step in steps:
        total += step.samples
        if step.host_site is not None and step.host_site_samples > 0:
            host[step.host_site] = host.get(step.host_site, 0) + step.host_site_samples
        if step.data_site is not None and step.data_site_samples > 0:
            data[step.data_site] = data.get(step.data_site, 0) + step.data_site_samples
        host_part += part_sampled(step.host_samples, step.host_site, step.host_site_samples)
        data_part += part_sampled(step.data_samples, step.data_site, step.data_site_samples)
    return host, data, total, (host_part, data_part)


def part_sampled(part_samples: int, site: str | None, site_samples: int) -> int:
    """A step's samples in one part: all its sites' where the probe counted them, else (a
    probe or recording from before that count) its named top site's alone."""
    return part_samples or (site_samples if site is not None and site_samples > 0 else 0)


def _top_site(sites: Mapping[str, int], part_percent: float | None,
              sampled: int = 0) -> tuple[str | None, float | None]:
    """The most sampled site of a part (ties: the first by name) and its share of step time:
    the part's share (measured by the probe's clocks) times the site's samples over the
    part's `sampled` samples, every site's in the window's steps (part_sampled). Exact where
    the site is on top in every step it runs in (one sample a step at short steps; a second
    site beside it in the same steps); steps from before the probe counted the part's
    samples count their top site's alone, the rest of their part unseen, so a site there
    gets the share of the top sites' samples (too high beside a second site). Samples are
    not compared across parts: the thread sampler (the fallback trigger) sees C calls that
    let go of the GIL more often than their time says, but the probe's clocks, not
    samples, measure each part."""
    named = sum(count for count in sites.values() if count > 0)
    if not named or part_percent is None:
        return None, None
    site, count = min(sites.items(), key=_MOST_SAMPLED)
    return site, part_percent * min(1.0, count / max(sampled, named))


def _most_sampled(item: tuple[str, int]) -> tuple[int, str]:
    return -item[1], item[0]


_MOST_SAMPLED = _most_sampled


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


def _robust_parts(found: Sequence[Parts]) -> tuple[Parts | None, int]:
    """The parts summed without the steps whose compute ran away, and how many those were
    (None without steps).

    When more than MAX_OUTLIER_SHARE of the steps are that slow, they are the loop's own
    rhythm (a heavy step every few), not outliers: every step counts then.
    """
    if not found:
        return None, 0
    median = _percentile(sorted(c for _, _, c in found), 50)
    kept = [p for p in found if p[2] <= OUTLIER_FACTOR * median] if median else list(found)
    left_out = len(found) - len(kept)
    if left_out > MAX_OUTLIER_SHARE * len(found):
        kept, left_out = list(found), 0
    return _summed(kept), left_out


def _summed(found: Iterable[Parts]) -> Parts:
    """Each part summed over the steps."""
    i = h = c = 0
    for a, b, d in found:
        i, h, c = i + a, h + b, c + d
    return i, h, c


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
    """running, evaluating, saving, stalled (no progress for `quiet_limit_s`) or exited, and
    the seconds since the newest step closed (None before the first step).

    Progress is a step closing or the trainer (with its workers) using CPU: `busy_ns` is when
    it was last seen doing so (None: not measured, and the steps alone decide). A long step
    still computing (an LBFGS step) is running, its step in progress. The ring holds no time
    of the probe's last phase event, so phases in flight are not asked. An evaluation the
    probe named is evaluating while it began within the limit or uses CPU (else it hangs:
    stalled); a torch.save is saving however long it takes (it waits on I/O no CPU shows).

    Every clock is CLOCK_MONOTONIC (the probe's perf_counter_ns), shared by every process.
    """
    newest = state.steps[-1].end_ns if state.steps else None
    idle_s = None if newest is None else max(0.0, (now_ns - newest) / 1e9)
    if not state.alive:
        return "exited", idle_s
    limit = quiet_limit_s(state)
    busy = busy_ns is not None and (now_ns - busy_ns) / 1e9 <= limit
    if state.activity == "saving":
        return "saving", idle_s
    if state.activity is not None:
        begun = state.activity_s is not None and state.activity_s <= limit
        return (state.activity if begun or busy else "stalled"), idle_s
    if idle_s is None:
        return "running", None  # nothing to judge before the first step closes
    if idle_s <= limit or busy:
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
