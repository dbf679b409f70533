"""Attach pane lines: the last steps as stacked phase bars, the rolling summary, the settings.

The pane is drawn each frame, and a frame differs from the last by the few steps that closed
since: step lines and each trainer's phase counts (the legend's) are kept from the last
call (_LAST), so a frame costs the steps that came and went, not the window.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from operator import attrgetter

from gputop.analysis.step_window import start_in
from gputop.analysis.steps import (
    BAND_WORDS,
    NO_DATA_PHASE,
    bimodal_note,
    other_parts,
    part_words,
    share_of,
    step_figure,
    step_time_words,
    steps_of_verdict,
    verdict_share,
    verdict_site,
)
from gputop.core import fmt
from gputop.core.model import AttachState, StepRecord, StepSummary, TrainerConfig
from gputop.tui.lines import Line, Span, clip, width_of

PHASES = ("data", "h2d", "forward", "backward", "optimizer", "host", "other")
_LABELS = {"data": "data", "h2d": "h2d", "forward": "fwd", "backward": "bwd",
           "optimizer": "opt", "host": "host", "other": "other"}
HEAD_LINES = 5
MIN_COLUMN = 40
_TIMED = attrgetter("data_ns", "h2d_ns", "forward_ns", "backward_ns", "optimizer_ns")


def _phase_times(step: StepRecord) -> tuple[int | None, ...]:
    """Each drawn phase's time in a step, in PHASES order (None: not measured); host code
    is drawn apart from the rest of the time no phase accounts for (device waits)."""
    other = step.other_ns
    if step.host_ns is None:
        return (*_TIMED(step), None, other)
    return (*_TIMED(step), step.host_ns, max(0, other - step.host_ns))


_PHASE_TIMES = _phase_times
_PHASE_STYLES = tuple("warn" if phase == "host" else f"phase-{phase}" for phase in PHASES)
_LineKey = tuple[int, int, int, bool]  # id(step), width, longest shown, untimed


class PhaseCounts:
    """Which phases the steps of a window measured (and whether their input came from
    outside the model), kept as the window slides: an update walks the steps that came and
    went. Steps are counted by their pattern of measured phases: a loop has one or two."""

    def __init__(self) -> None:
        self.window: tuple[StepRecord, ...] = ()
        self.patterns: dict[tuple[bool, ...], int] = {}  # pattern -> steps with it
        self._each: deque[tuple[bool, ...]] = deque()  # each step's pattern, in window order

    def update(self, window: tuple[StepRecord, ...]) -> None:
        """Count `window`: its steps behind the last window's, else all of them again."""
        old = self.window
        if window is old:
            return
        start = start_in(old, window)
        patterns, each = self.patterns, self._each
        if start is None:
            patterns.clear()
            each.clear()
            start = 0
            new = window
        else:
            new = window[len(old) - start:]
        for _ in range(start):
            pattern = each.popleft()
            left = patterns[pattern] - 1
            if left:
                patterns[pattern] = left
            else:
                del patterns[pattern]
        for step in new:
            pattern = _pattern(step)
            patterns[pattern] = patterns.get(pattern, 0) + 1
            each.append(pattern)
        self.window = window

    def legend(self) -> Line:
        """Which colour is which phase, for the phases measured in the window only."""
        columns = zip(*self.patterns, strict=True)  # each phase's flag, over the patterns
        seen = [any(column) for column in columns] or [False] * (len(PHASES) + 1)
        outside = seen[-1]  # no loader: not its wait
        spans: list[Span] = []
        for phase, measured in zip(PHASES, seen[:-1], strict=True):
            if measured:
                label = "input" if outside and phase == "data" else _LABELS[phase]
                spans += [("█", _PHASE_STYLES[PHASES.index(phase)]), (f"{label} ", "dim")]
        return tuple(spans)


def _pattern(step: StepRecord) -> tuple[bool, ...]:
    """Which phases `step` measured, in PHASES order, then whether its input came from
    outside the model."""
    return (*map(bool, _PHASE_TIMES(step)), step.input_outside_model)


class _Drawn:
    """What the last step_lines call drew: step lines by (step, width, longest shown
    duration, untimed), which is all a step line depends on, and each trainer's phase
    counts. Only the last call's are kept, so it holds about the lines on screen."""

    def __init__(self) -> None:
        self.lines: dict[_LineKey, tuple[StepRecord, Line]] = {}
        self.counts: dict[int, PhaseCounts] = {}
        self._lines_before: dict[_LineKey, tuple[StepRecord, Line]] = {}
        self._counts_before: dict[int, PhaseCounts] = {}

    def start(self) -> None:
        """A new call: what is drawn now is kept, the rest forgotten at the end."""
        self._lines_before, self.lines = self.lines, {}
        self._counts_before, self.counts = self.counts, {}

    def end(self) -> None:
        """Forget what this call did not draw."""
        self._lines_before, self._counts_before = {}, {}

    def step_line(self, step: StepRecord, width: int, longest: int, untimed: bool) -> Line:
        """step_line's, drawn anew only for a step not drawn so last call."""
        key = (id(step), width, longest, untimed)
        kept = self.lines.get(key) or self._lines_before.get(key)
        if kept is None or kept[0] is not step:  # (a kept step is alive: the id is its own)
            kept = (step, step_line(step, width, longest, untimed))
        self.lines[key] = kept
        return kept[1]

    def legend(self, pid: int, steps: tuple[StepRecord, ...]) -> Line:
        """legend_line(steps), counted from the steps that came and went since last call."""
        counts = self.counts.get(pid) or self._counts_before.get(pid) or PhaseCounts()
        counts.update(steps)
        self.counts[pid] = counts
        return counts.legend()


_LAST = _Drawn()


def step_lines(
    attached: Sequence[AttachState], width: int, height: int, slowest: int | None = None
) -> list[Line]:
    """Ranks side by side (as many as fit), each a column of `height` lines at most;
    `slowest` is the input straggler's PID."""
    if not attached:
        return []
    per_row = max(1, min(len(attached), (width + 1) // (MIN_COLUMN + 1)))
    shown = list(attached[:per_row])
    col_w = (width - (per_row - 1)) // per_row
    _LAST.start()
    columns = [_column(state, col_w, height, state.pid == slowest) for state in shown]
    _LAST.end()
    rows = max(len(column) for column in columns)
    lines: list[Line] = []
    for y in range(rows):
        spans: list[Span] = []
        for i, column in enumerate(columns):
            cell = column[y] if y < len(column) else ()
            used = width_of(cell)
            spans += [*cell, (" " * (col_w - used + (1 if i < len(columns) - 1 else 0)),
                              "plain")]
        lines.append(tuple(spans))
    if len(attached) > per_row and lines:
        lines[0] = (*clip(lines[0], width - 12), (f" +{len(attached) - per_row} ranks", "dim"))
    return lines


def _column(state: AttachState, width: int, height: int, slowest: bool) -> list[Line]:
    config = state.config
    rank = "" if config.rank is None else f" rank {config.rank}/{config.world_size or '?'}"
    title: list[Span] = [(f"attached {state.pid}{rank}", "title")]
    if slowest:
        title.append(("  ◀ slowest: waits for input", "crit"))
    if state.state == "exited":
        title.append(("  exited, final summary", "dim"))
    elif state.state == "stalled":
        title.append((f"  STALLED: no step for {_idle(state.idle_s)}", "crit"))
    elif state.state in ("evaluating", "saving"):
        took = "" if state.activity_s is None else f" for {state.activity_s:.1f} s"
        title.append((f"  {state.state}{took}", "dim"))
    elif state.step_in_progress_s is not None:
        title.append((f"  step in progress {state.step_in_progress_s:.1f} s", "dim"))
    if state.error:
        title.append((f"  {state.error}", "warn"))
    # a third line for the step time only where the pane has room for it besides the title
    summary = summary_lines(state.summary, state.dropped_records, width if height > 3 else None)
    if state.state == "stalled":  # the numbers describe the past: grey them
        summary = [tuple((text, "dim") for text, _ in line) for line in summary]
    lines = [clip(tuple(title), width), *(clip(line, width) for line in summary)]
    if height >= HEAD_LINES + 3:
        legend = _LAST.legend(state.pid, state.steps)
        lines += [clip(config_line(config), width), clip(legend, width)]
    room = max(0, height - len(lines))
    steps = list(state.steps[-room:]) if room else []
    longest = max((step.duration_ns for step in steps), default=0)
    unmeasured = state.summary.unmeasured_reason is not None
    lines += [_LAST.step_line(step, width, longest, unmeasured and step.implicit)
              for step in reversed(steps)]
    return lines


def summary_lines(summary: StepSummary, dropped: int, width: int | None = None) -> list[Line]:
    """The verdict with its own part's share and the steps' own verdicts, then the window's
    one step time (its statistic and size, both modes where bimodal), samples/s and dropped
    records: on one line where it fits `width`, else on two."""
    timing = _timing_line(summary, dropped)
    if width is None or width_of(timing) <= width:
        return [_verdict_line(summary), timing]
    modes: Line = ((f"{bimodal_note(summary, fmt.short_duration_ns)}  ", "warn"),) if (
        summary.step_modes and step_figure(summary)[1] is not None) else ()
    return [_verdict_line(summary), _time_spans(summary, modes=not modes),
            (*modes, *_rate_spans(summary, dropped))]


_VERDICT_STYLES = {"data-bound": "crit", "host-bound": "warn", "cpu-starved": "crit",
                   "compute-bound": "ok"}


def _verdict_line(s: StepSummary) -> Line:
    verdict_style = _VERDICT_STYLES.get(s.verdict, "dim")
    share = verdict_share(s)
    if share is None:
        if s.input_bound_percent is None:
            return ((f"verdict {s.verdict} ({s.unmeasured_reason or NO_DATA_PHASE})", "dim"),)
        return ((s.verdict, verdict_style), (f"  ({other_parts(s)})", "dim"))
    spans: list[Span] = [(s.verdict, verdict_style), (f"  {part_words(s)} ", "dim"),
                         (fmt.percent(share), verdict_style),
                         (f" {share_of(s)}", "dim")]
    if s.verdict == "data-bound":
        band_style = {"highly": "crit", "moderately": "warn", "not": "ok"}.get(s.band, "dim")
        spans.append((f" ({BAND_WORDS[s.band]})", band_style))
    site = verdict_site(s)
    if site:
        spans.append((f": {site}", "accent"))
    elif s.verdict == "compute-bound":
        spans.append((f"  ({other_parts(s)})", "dim"))
    mix = steps_of_verdict(s)
    if mix is not None:
        spans.append((f"  {mix:.0f}% of steps {s.verdict}", "plain"))
    if s.outlier_steps:
        spans.append((f"  ({s.outlier_steps} slow steps left out)", "dim"))
    return tuple(spans)


def _timing_line(s: StepSummary, dropped: int) -> Line:
    return (*_time_spans(s), ("  ", "plain"), *_rate_spans(s, dropped))


def _time_spans(s: StepSummary, modes: bool = True) -> Line:
    """'mean 18.0ms over the last 256 steps (bimodal: ...) p95 40ms' (`modes`: with the
    bimodal note)."""
    if step_figure(s)[1] is None:
        return ((f"last {s.steps} steps  step time n/a", "dim"),)
    words = step_time_words(s if modes else replace(s, step_modes=()), fmt.short_duration_ns)
    bimodal = words.find(" (bimodal")
    spans: list[Span] = [(words[:bimodal], "plain"), (words[bimodal:], "warn")] if (
        bimodal >= 0) else [(words, "plain")]
    return (*spans, (f" p95 {fmt.short_duration_ns(s.p95_step_ns)}", "plain"))


def _rate_spans(s: StepSummary, dropped: int) -> Line:
    rate = "n/a" if s.samples_per_s is None else f"{s.samples_per_s:.0f}"
    return ((f"{rate} samples/s", "plain" if s.samples_per_s is not None else "dim"),
            (f"  dropped {dropped}", "warn" if dropped else "dim"))


def config_line(config: TrainerConfig) -> Line:
    """The trainer's own note (annotate(note=...)), if it left one, then its loader settings
    as the probe recorded them; unknown shows n/a."""
    def show(value: object) -> str:
        if value is None:
            return "n/a"
        if isinstance(value, bool):
            return "on" if value else "off"
        return str(value)

    pin = show(config.pin_memory)
    if config.pin_memory_effective is False and config.pin_memory:
        pin += " (no effect: no accelerator)"
    text = (f"workers {show(config.num_workers)}  pin {pin}"
            f"  batch {show(config.batch_size)}  prefetch {show(config.prefetch_factor)}"
            f"  persistent {show(config.persistent_workers)}"
            f"  threads {show(config.num_threads)}  device {show(config.device)}")
    note = dict(config.extra).get("note")
    return ((note, "accent"), (f"  {text}", "dim")) if note else ((text, "dim"),)


def legend_line(steps: Sequence[StepRecord]) -> Line:
    """Which colour is which phase, for the phases measured in `steps` only."""
    counts = PhaseCounts()
    counts.update(tuple(steps))
    return counts.legend()


def step_line(step: StepRecord, width: int, longest: int, untimed: bool = False) -> Line:
    """One step: number, stacked phase bar scaled to the longest shown step, time, verdict;
    `untimed`: its duration is not a whole step's, so no time is shown."""
    verdict = "warm-up" if step.warmup else step.verdict
    time = fmt.NA if untimed else fmt.short_duration_ns(step.duration_ns)
    tail = f" {time:>6} {verdict}"
    label = f"#{step.step:<6}"[:7]
    bar_w = max(4, width - len(label) - len(tail) - 2)
    cells = 0 if longest <= 0 else round(step.duration_ns / longest * bar_w)
    spans: list[Span] = [(label, "dim"), ("▕", "dim")]
    used = _stack(step, cells, spans)
    spans.append((" " * max(0, bar_w - used) + "▏", "dim"))
    verdict_style = "dim" if step.warmup else _VERDICT_STYLES.get(step.verdict, "dim")
    spans.append((tail, verdict_style))
    if step.warmup:
        spans = [(text, "dim") for text, _ in spans]
    drawn = len(label) + 1 + max(used, bar_w) + 1 + len(tail)  # the spans' cells
    return tuple(spans) if drawn <= width else clip(tuple(spans), width)


def _stack(step: StepRecord, cells: int, spans: list[Span]) -> int:
    """Phase cells in proportion to their time, added to `spans`; rounding keeps the total
    at `cells`. Returns the cells added."""
    total = step.duration_ns or 1
    done = 0
    acc = 0.0
    for style, value in zip(_PHASE_STYLES, _PHASE_TIMES(step), strict=True):
        if not value:
            continue
        acc += value / total * cells
        take = round(acc) - done
        if take > 0:
            spans.append(("█" * take, style))
            done += take
    return done


def _idle(seconds: float | None) -> str:
    """How long a trainer has been quiet, in the largest fitting unit."""
    if seconds is None:
        return "n/a"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
