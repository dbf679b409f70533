"""A trainer's step window kept classified and summarized as steps arrive and leave.

The sampler sees a window of the newest steps each tick, most of it the same step objects
as the tick before. Classifying and summarizing it from scratch (steps.summarize) walks and
sorts every step each tick; this keeps each step's verdict and the window's sorted values
and sums, so a tick costs the steps that closed or left, not the window; a tick's steps go
into each sorted list and sum together. It yields the same StepSummary as steps.summarize
(the from-scratch reference, which replay and reports use) and, while it keeps its values,
the same PartTotals as steps.part_totals.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from collections import deque
from collections.abc import Sequence
from functools import partial
from operator import attrgetter, itemgetter, lt
from typing import Any

from gputop.analysis import steps
from gputop.core.model import InputWaits, PartTotals, StepRecord, StepSummary

_COMPUTE = itemgetter(0)
_PHASES = attrgetter(*(f"{name}_ns" for name in steps.PHASE_NAMES))  # other_ns: never None
_DATA = steps.PHASE_NAMES.index("data")
_WAITED = partial(lt, steps.WAIT_FLOOR_NS)  # a wait over the floor: the step waited
_SORT_FROM = 4  # more new values than this go into a sorted list by one sort, not insort


class _Entry:
    """One step in the window: what it counts toward and the values it put into the sorted
    lists (taken out again when it leaves)."""

    __slots__ = ("counted", "log", "parts", "phases", "split", "step", "timed", "wait")

    def __init__(self, step: StepRecord, previous: StepRecord | None) -> None:
        self.step = step
        self.split = steps.split(step)  # (input, compute), or None
        self.parts = steps.parts(step)  # (input, host, compute), or None
        self.counted = not step.warmup
        # a whole step (see steps._bounded), not warm-up; it may lose that, never gain it
        self.timed = self.counted and _linked(step, previous)
        self.wait = steps._wait_ns(step)
        self.phases = _PHASES(step) if self.counted else ()
        self.log = _log(step.duration_ns) if self.timed else 0.0


class StepWindow:
    """One trainer's window: its raw steps, them classified, their summary and part totals."""

    def __init__(self) -> None:
        self.raw: tuple[StepRecord, ...] = ()
        self.classified: tuple[StepRecord, ...] = ()
        self._clear()
        self._kept = True  # whether the values below are the window's
        self.summary = self._summary()  # of no steps, as steps.summarize(())
        self.totals: PartTotals | None = self._totals()  # as steps.part_totals(())
        self.waits: InputWaits | None = self._waits()  # as steps.input_waits(())

    def _clear(self) -> None:
        """Forget every value: no steps."""
        self._entries: deque[_Entry] = deque()
        # counted (non-warm-up) steps; the data phase's values are also its p95's
        self._counted = 0
        self._phases: tuple[list[int], ...] = tuple([] for _ in steps.PHASE_NAMES)
        self._known_waits = 0
        self._waited = 0
        self._measured = 0  # steps with a data phase ...
        self._outside = 0  # ... that got it outside the model
        self._split = 0  # steps with a split, and its parts summed (the advice's mean step)
        self._split_input_ns = 0
        self._split_compute_ns = 0
        self._inputs: list[int] = []  # of the steps with a split, ascending (the straggler's)
        self._samples = 0  # the probe's stack samples, and those of each top site
        self._host_sites: dict[str, int] = {}
        self._data_sites: dict[str, int] = {}
        self._host_sampled = self._data_sampled = 0  # the parts' samples (steps.part_sampled)
        self._counted_durations: list[int] = []
        # timed (whole, non-warm-up) steps
        self._timed = 0
        self._durations: list[int] = []
        self._logs: list[float] = []  # of the durations, for steps._modes
        self._durations_ns = 0
        self._parts: list[tuple[int, int, int]] = []  # (compute, input, host), ascending
        self._input_ns = 0
        self._host_ns = 0
        self._compute_ns = 0
        self._hosted = 0  # steps with parts whose host time the probe measured
        self._data_bound = 0
        self._host_bound = 0
        self._batch = 0
        self._sized_ns = 0

    def update(self, window: tuple[StepRecord, ...]) -> None:
        """Take the window now, classifying only the steps not seen before. The values are
        kept while few steps arrive a tick: slid when the window is the last one with steps
        gone from the front and new ones behind, else rebuilt (a loader's steps left out in
        the middle). When over a quarter of the window is new each tick, summarizing from
        scratch costs less than keeping the values, until under an eighth is."""
        old = self.raw
        if window == old:  # no step closed since (the same objects: compared by identity)
            return
        start = start_in(old, window)
        new = len(window) - (len(old) - start) if start is not None else len(window)
        churn = (start if start is not None else len(old)) + new  # steps gone and come
        self.classified = self._verdicts(window, start, new)
        self.raw = window
        if (self._kept and 2 * churn <= len(window)) or 4 * churn < len(window):
            if self._kept and start is not None:
                self._slide(start, window[len(window) - new:])
            else:
                self._clear()
                self._slide(0, window)
                self._kept = True
            self.summary = self._summary()
            self.totals = self._totals()
            self.waits = self._waits()
        else:
            self._kept = False
            self._clear()
            self.summary = steps.summarize(self.classified)
            self.totals = self.waits = None  # not kept: whoever needs them walks the steps

    def _verdicts(self, window: tuple[StepRecord, ...], start: int | None,
                  new: int) -> tuple[StepRecord, ...]:
        """`window` classified, keeping the verdicts of the steps seen before."""
        if start is not None:
            return (*self.classified[start:], *map(steps.with_verdict, window[len(window) - new:]))
        known = {id(raw): done for raw, done in zip(self.raw, self.classified, strict=True)}
        return tuple(known.get(id(step)) or steps.with_verdict(step) for step in window)

    def _slide(self, gone: int, new: tuple[StepRecord, ...]) -> None:
        """Drop the `gone` oldest steps' values and add those of `new` behind the rest, a
        tick's steps at once: each sorted list and sum is visited once per tick."""
        entries = self._entries
        left = [entries.popleft() for _ in range(gone)]
        untimed = [e for e in left if e.timed]
        if gone and entries:
            first = entries[0]  # its predecessor left: whole only when not implicit
            if first.timed and first.step.implicit:
                untimed.append(first)
                first.timed = False
        self._count([e for e in left if e.counted], -1)
        self._time(untimed, -1)
        previous = entries[-1].step if entries else None
        added = []
        for step in new:
            added.append(_Entry(step, previous))
            previous = step
        entries.extend(added)
        self._count([e for e in added if e.counted], 1)
        self._time([e for e in added if e.timed], 1)

    def _count(self, entries: list[_Entry], sign: int) -> None:
        """Add (sign 1) or take out (-1) non-warm-up steps' values."""
        if not entries:
            return
        change = _put if sign > 0 else _take
        columns = zip(*[e.phases for e in entries], strict=True)  # each phase's values
        for values, column in zip(self._phases, columns, strict=True):
            change(values, column if None not in column else [v for v in column if v is not None])
        self._counted += sign * len(entries)
        change(self._counted_durations, [e.step.duration_ns for e in entries])
        measured = [e.step.input_outside_model for e in entries if e.step.data_ns is not None]
        self._measured += sign * len(measured)
        self._outside += sign * sum(measured)
        waits = [e.wait for e in entries if e.wait is not None]
        self._known_waits += sign * len(waits)
        self._waited += sign * sum(map(_WAITED, waits))
        for e in entries:
            step = e.step
            self._samples += sign * step.samples
            if step.host_site is not None and step.host_site_samples > 0:
                _add(self._host_sites, step.host_site, sign * step.host_site_samples)
            if step.data_site is not None and step.data_site_samples > 0:
                _add(self._data_sites, step.data_site, sign * step.data_site_samples)
            self._host_sampled += sign * steps.part_sampled(
                step.host_samples, step.host_site, step.host_site_samples)
            self._data_sampled += sign * steps.part_sampled(
                step.data_samples, step.data_site, step.data_site_samples)
        parts = [e.split for e in entries if e.split is not None]
        if parts:
            inputs, computes = zip(*parts, strict=True)
            self._split += sign * len(parts)
            self._split_input_ns += sign * sum(inputs)
            self._split_compute_ns += sign * sum(computes)
            change(self._inputs, inputs)

    def _time(self, entries: list[_Entry], sign: int) -> None:
        """Add (sign 1) or take out (-1) whole steps' time, split and batch."""
        if not entries:
            return
        change = _put if sign > 0 else _take
        durations = [e.step.duration_ns for e in entries]
        change(self._durations, durations)
        self._durations_ns += sign * sum(durations)
        change(self._logs, [e.log for e in entries])
        self._timed += sign * len(entries)
        found = [e for e in entries if e.parts is not None]
        if found:
            parts = [e.parts for e in found if e.parts is not None]
            inputs, hosts, computes = zip(*parts, strict=True)
            change(self._parts, list(zip(computes, inputs, hosts, strict=True)))
            self._input_ns += sign * sum(inputs)
            self._host_ns += sign * sum(hosts)
            self._compute_ns += sign * sum(computes)
            self._hosted += sign * sum(e.step.host_ns is not None for e in found)
            verdicts = [steps.verdict_of_parts(*p) for p in parts]
            self._data_bound += sign * verdicts.count("data-bound")
            self._host_bound += sign * verdicts.count("host-bound")
        sized = [e.step for e in entries
                 if e.step.batch_size is not None and e.step.batch_size > 0]
        if sized:
            self._batch += sign * sum(s.batch_size or 0 for s in sized)
            self._sized_ns += sign * sum(s.duration_ns for s in sized)

    def _totals(self) -> PartTotals:
        """What steps.part_totals says of the window, from the kept sums."""
        return PartTotals(self._split, self._split_input_ns, self._split_compute_ns)

    def _waits(self) -> InputWaits:
        """What steps.input_waits says of the window, from the kept sorted values."""
        return steps.waits_of(self._inputs, self._counted_durations)

    def _summary(self) -> StepSummary:
        """What steps.summarize says of the window, from the kept values."""
        kept, outliers = self._robust_parts()
        durations, percentile = self._durations, steps._percentile
        return steps.window_summary(
            StepSummary(
                steps=self._counted,
                input_bound_percent=None,
                band="unknown",
                verdict="unknown",
                median_step_ns=percentile(durations, 50),
                p95_step_ns=percentile(durations, 95),
                samples_per_s=self._batch * 1e9 / self._sized_ns if self._sized_ns > 0 else None,
                waited_percent=(100.0 * self._waited / self._known_waits
                                if self._known_waits else None),
                p95_data_ns=percentile(self._phases[_DATA], 95),
                median_phase_ns=tuple((name, percentile(values, 50)) for name, values in zip(
                    steps.PHASE_NAMES, self._phases, strict=True)),
                input_time_percent=_ratio(self._input_ns, self._host_ns + self._compute_ns),
                outlier_steps=outliers,
                data_bound_steps=self._data_bound,
                compute_bound_steps=len(self._parts) - self._data_bound - self._host_bound,
                step_modes=steps._modes(durations, self._logs),
                unmeasured_reason=steps.UNBOUNDED if self._counted and not self._timed else None,
                input_outside_model=2 * self._outside > self._measured,
                host_bound_steps=self._host_bound,
                mean_step_ns=round(self._durations_ns / self._timed) if self._timed else None,
                stack_samples=self._samples,
            ),
            kept, self._hosted > 0, self._host_sites, self._data_sites,
            (self._host_sampled, self._data_sampled))

    def _robust_parts(self) -> tuple[steps.Parts | None, int]:
        """steps._robust_parts from the parts kept ordered by compute: the runaway ones
        are the tail past OUTLIER_FACTOR times the median."""
        parts = self._parts
        if not parts:
            return None, 0
        whole = (self._input_ns, self._host_ns, self._compute_ns)
        median = steps._percentile(parts, 50)
        if not median or not median[0]:
            return whole, 0
        cut = bisect_right(parts, steps.OUTLIER_FACTOR * median[0], key=_COMPUTE)
        left_out = len(parts) - cut
        if left_out > steps.MAX_OUTLIER_SHARE * len(parts):
            return whole, 0
        runaway = parts[cut:]
        return (self._input_ns - sum(p[1] for p in runaway),
                self._host_ns - sum(p[2] for p in runaway),
                self._compute_ns - sum(p[0] for p in runaway)), left_out


def start_in(old: tuple[StepRecord, ...], window: tuple[StepRecord, ...]) -> int | None:
    """Where in `old` the new window starts when it is old's tail followed by new steps
    (how many steps left), else None."""
    if not window:
        return None
    first = window[0]
    for start, step in enumerate(old):
        if step is first:
            kept = len(old) - start
            return start if window[:kept] == old[start:] else None
    return 0 if not old else None  # nothing kept: start over (as cheap as sliding)


def _linked(step: StepRecord, previous: StepRecord | None) -> bool:
    """Whether `step` is a whole step after `previous` (steps._bounded for one step)."""
    if not step.implicit:
        return True
    start = None if step.end_ns is None else step.end_ns - step.duration_ns
    return start is not None and previous is not None and start == previous.end_ns


def _log(duration_ns: int) -> float:
    """The logarithm steps._modes takes of a step time (-inf for none: it then has no modes)."""
    return math.log(duration_ns) if duration_ns > 0 else -math.inf


def _ratio(input_ns: int, compute_ns: int) -> float | None:
    """steps._ratio from the sums."""
    total = input_ns + compute_ns
    return 100.0 * input_ns / total if total > 0 else None


def _add(counts: dict[str, int], key: str, change: int) -> None:
    """Add `change` to `counts[key]`, dropping a key that falls to 0."""
    left = counts.get(key, 0) + change
    if left:
        counts[key] = left
    else:
        del counts[key]


def _put(values: list[Any], new: Sequence[Any]) -> None:
    """Insert each of `new` into the ascending `values`."""
    if len(new) > _SORT_FROM:
        values += new
        values.sort()  # a sorted run and a short one: merged, not sorted from scratch
        return
    for value in new:
        insort(values, value)


def _take(values: list[Any], gone: Sequence[Any]) -> None:
    """Take one of each of `gone` out of the ascending `values`."""
    for value in gone:
        del values[bisect_left(values, value)]
