"""A trainer's step window kept classified and summarized as steps arrive and leave.

The sampler sees a window of the newest steps each tick, most of it the same step objects
as the tick before. Classifying and summarizing it from scratch (steps.summarize) walks and
sorts every step each tick; this keeps each step's verdict and the window's sorted values
and sums, so a tick costs the steps that closed or left, not the window. It yields the same
StepSummary as steps.summarize (the from-scratch reference, which replay and reports use).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections import deque
from operator import attrgetter, itemgetter
from typing import Any

from gputop.analysis import steps
from gputop.model import StepRecord, StepSummary, Verdict

_COMPUTE = itemgetter(0)
_PHASES = attrgetter(*(f"{name}_ns" for name in steps.PHASE_NAMES))  # other_ns: never None


class _Entry:
    """One step in the window and the values it puts into the window's sorted lists."""

    __slots__ = ("counted", "counted_into", "parts", "step", "timed", "timed_into", "wait")

    def __init__(self, step: StepRecord, parts: tuple[int, int] | None, linked: bool) -> None:
        self.step = step
        self.parts = parts  # (input, compute), or None
        self.counted = not step.warmup
        self.timed = linked and self.counted  # a whole step (see steps._bounded), not warm-up
        self.wait = steps._wait_ns(step)
        # (sorted list, value) pairs, filled by the window that holds the lists
        self.counted_into: list[tuple[list[Any], Any]] = []
        self.timed_into: list[tuple[list[Any], Any]] = []


class StepWindow:
    """One trainer's window: its raw steps, them classified, and their summary."""

    def __init__(self) -> None:
        self.raw: tuple[StepRecord, ...] = ()
        self.classified: tuple[StepRecord, ...] = ()
        self._clear()
        self._kept = True  # whether the values below are the window's
        self.summary = self._summary()  # of no steps, as steps.summarize(())

    def _clear(self) -> None:
        """Forget every value: no steps."""
        self._entries: deque[_Entry] = deque()
        # counted (non-warm-up) steps
        self._counted = 0
        self._data: list[int] = []
        self._phases: tuple[list[int], ...] = tuple([] for _ in steps.PHASE_NAMES)
        self._known_waits = 0
        self._waited = 0
        self._measured = 0  # steps with a data phase ...
        self._outside = 0  # ... that got it outside the model
        # timed (whole, non-warm-up) steps
        self._timed = 0
        self._durations: list[int] = []
        self._parts: list[tuple[int, int]] = []  # (compute, input), ascending
        self._input_ns = 0
        self._compute_ns = 0
        self._data_bound = 0
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
                for step in window:
                    self._add(step)
                self._kept = True
            self.summary = self._summary()
        else:
            self._kept = False
            self._clear()
            self.summary = steps.summarize(self.classified)

    def _verdicts(self, window: tuple[StepRecord, ...], start: int | None,
                  new: int) -> tuple[StepRecord, ...]:
        """`window` classified, keeping the verdicts of the steps seen before."""
        if start is not None:
            return (*self.classified[start:], *map(steps.with_verdict, window[len(window) - new:]))
        known = {id(raw): done for raw, done in zip(self.raw, self.classified, strict=True)}
        return tuple(known.get(id(step)) or steps.with_verdict(step) for step in window)

    def _slide(self, gone: int, new: tuple[StepRecord, ...]) -> None:
        """Drop the `gone` oldest steps' values and add those of `new` behind the rest."""
        for _ in range(gone):
            self._remove(self._entries.popleft())
        if gone and self._entries:
            first = self._entries[0]  # its predecessor left: whole only when not implicit
            if first.timed and first.step.implicit:
                self._time(first, -1)
                first.timed = False
        for step in new:
            self._add(step)

    def _add(self, step: StepRecord) -> None:
        """Count `step`'s values in behind the window's newest."""
        previous = self._entries[-1].step if self._entries else None
        entry = _Entry(step, steps.split(step), _linked(step, previous))
        if entry.counted:
            entry.counted_into = [(values, value) for values, value in zip(
                (self._data, *self._phases), (step.data_ns, *_PHASES(step)), strict=True)
                if value is not None]
            self._count(entry, 1)
        entry.timed_into = [(self._durations, step.duration_ns)]
        if entry.parts is not None:
            entry.timed_into.append((self._parts, entry.parts[::-1]))
        if entry.timed:
            self._time(entry, 1)
        self._entries.append(entry)

    def _remove(self, entry: _Entry) -> None:
        """Take a step that left out of the window's values."""
        if entry.counted:
            self._count(entry, -1)
        if entry.timed:
            self._time(entry, -1)

    def _count(self, entry: _Entry, sign: int) -> None:
        """Add (sign 1) or take out (-1) a non-warm-up step's values."""
        step = entry.step
        _put(entry.counted_into) if sign > 0 else _take(entry.counted_into)
        self._counted += sign
        if step.data_ns is not None:
            self._measured += sign
            self._outside += sign * step.input_outside_model
        if entry.wait is not None:
            self._known_waits += sign
            self._waited += sign * (entry.wait > steps.WAIT_FLOOR_NS)

    def _time(self, entry: _Entry, sign: int) -> None:
        """Add (sign 1) or take out (-1) a whole step's time, split and batch."""
        step = entry.step
        _put(entry.timed_into) if sign > 0 else _take(entry.timed_into)
        self._timed += sign
        if entry.parts is not None:
            input_ns, compute_ns = entry.parts
            self._input_ns += sign * input_ns
            self._compute_ns += sign * compute_ns
            self._data_bound += sign * (input_ns >= compute_ns)
        if step.batch_size is not None and step.batch_size > 0:
            self._batch += sign * step.batch_size
            self._sized_ns += sign * step.duration_ns

    def _summary(self) -> StepSummary:
        """What steps.summarize says of the window, from the kept values."""
        share, outliers = self._robust_share()
        verdict: Verdict = "unknown"
        if share is not None:
            verdict = "data-bound" if share >= steps.DATA_BOUND_PERCENT else "compute-bound"
        durations, percentile = self._durations, steps._percentile
        return StepSummary(
            steps=self._counted,
            input_bound_percent=share,
            band=steps.band(share),
            verdict=verdict,
            median_step_ns=percentile(durations, 50),
            p95_step_ns=percentile(durations, 95),
            samples_per_s=self._batch * 1e9 / self._sized_ns if self._sized_ns > 0 else None,
            waited_percent=(100.0 * self._waited / self._known_waits
                            if self._known_waits else None),
            p95_data_ns=percentile(self._data, 95),
            median_phase_ns=tuple((name, percentile(values, 50)) for name, values in zip(
                steps.PHASE_NAMES, self._phases, strict=True)),
            input_time_percent=_ratio(self._input_ns, self._compute_ns),
            outlier_steps=outliers,
            data_bound_steps=self._data_bound,
            compute_bound_steps=len(self._parts) - self._data_bound,
            step_modes=steps._modes(durations),
            unmeasured_reason=steps.UNBOUNDED if self._counted and not self._timed else None,
            input_outside_model=2 * self._outside > self._measured,
        )

    def _robust_share(self) -> tuple[float | None, int]:
        """steps._robust_share from the parts kept ordered by compute: the runaway ones
        are the tail past OUTLIER_FACTOR times the median."""
        parts = self._parts
        median = steps._percentile(parts, 50)
        if not median or not median[0]:
            return _ratio(self._input_ns, self._compute_ns), 0
        cut = bisect_right(parts, steps.OUTLIER_FACTOR * median[0], key=_COMPUTE)
        left_out = len(parts) - cut
        if left_out > steps.MAX_OUTLIER_SHARE * len(parts):
            return _ratio(self._input_ns, self._compute_ns), 0
        runaway = parts[cut:]
        return _ratio(self._input_ns - sum(i for _, i in runaway),
                      self._compute_ns - sum(c for c, _ in runaway)), left_out


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


def _ratio(input_ns: int, compute_ns: int) -> float | None:
    """steps._ratio from the sums."""
    total = input_ns + compute_ns
    return 100.0 * input_ns / total if total > 0 else None


def _put(into: list[tuple[list[Any], Any]]) -> None:
    """Insert each value into its ascending list."""
    for values, value in into:
        insort(values, value)


def _take(into: list[tuple[list[Any], Any]]) -> None:
    """Take one of each value out of its ascending list."""
    for values, value in into:
        del values[bisect_left(values, value)]
