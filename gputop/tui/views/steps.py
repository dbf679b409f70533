"""Attach pane lines: the last steps as stacked phase bars, the rolling summary, the settings."""

from __future__ import annotations

from collections.abc import Sequence

from gputop import fmt
from gputop.analysis.steps import BAND_WORDS, NO_DATA_PHASE, bimodal_note, input_words
from gputop.model import AttachState, StepRecord, StepSummary, TrainerConfig
from gputop.tui.lines import Line, Span, clip

PHASES = ("data", "h2d", "forward", "backward", "optimizer", "other")
_LABELS = {"data": "data", "h2d": "h2d", "forward": "fwd", "backward": "bwd",
           "optimizer": "opt", "other": "other"}
HEAD_LINES = 5
MIN_COLUMN = 40


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
    columns = [_column(state, col_w, height, state.pid == slowest) for state in shown]
    rows = max(len(column) for column in columns)
    lines: list[Line] = []
    for y in range(rows):
        spans: list[Span] = []
        for i, column in enumerate(columns):
            cell = column[y] if y < len(column) else ()
            used = sum(len(text) for text, _ in cell)
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
    if state.error:
        title.append((f"  {state.error}", "warn"))
    summary = summary_lines(state.summary, state.dropped_records)
    if state.state == "stalled":  # the numbers describe the past: grey them
        summary = [tuple((text, "dim") for text, _ in line) for line in summary]
    lines = [clip(tuple(title), width), *(clip(line, width) for line in summary)]
    if height >= HEAD_LINES + 3:
        lines += [clip(config_line(config), width), clip(legend_line(state.steps), width)]
    room = max(0, height - len(lines))
    steps = list(state.steps[-room:]) if room else []
    longest = max((step.duration_ns for step in steps), default=0)
    unmeasured = state.summary.unmeasured_reason is not None
    lines += [step_line(step, width, longest, unmeasured and step.implicit)
              for step in reversed(steps)]
    return lines


def summary_lines(summary: StepSummary, dropped: int) -> list[Line]:
    """Two lines: the verdict with its input share and the steps' own verdicts, then the
    window's size, step times (with a bimodality note), samples/s and dropped records."""
    return [_verdict_line(summary), _timing_line(summary, dropped)]


def _verdict_line(s: StepSummary) -> Line:
    if s.input_bound_percent is None:
        return ((f"verdict {s.verdict} ({s.unmeasured_reason or NO_DATA_PHASE})", "dim"),)
    band_style = {"highly": "crit", "moderately": "warn", "not": "ok"}.get(s.band, "dim")
    verdict_style = {"data-bound": "crit", "compute-bound": "ok"}.get(s.verdict, "dim")
    spans: list[Span] = [
        (s.verdict, verdict_style), (f"  {input_words(s)} ", "dim"),
        (fmt.percent(s.input_bound_percent), band_style), (" of step time", "dim"),
        (f" ({BAND_WORDS[s.band]})", band_style),
    ]
    mix = s.data_bound_steps_percent
    if mix is not None:
        spans.append((f"  {mix:.0f}% of steps data-bound", "plain"))
    if s.outlier_steps:
        spans.append((f"  ({s.outlier_steps} slow steps left out)", "dim"))
    return tuple(spans)


def _timing_line(s: StepSummary, dropped: int) -> Line:
    spans: list[Span] = [(f"last {s.steps} steps", "plain")]
    if s.median_step_ns is None:
        spans.append(("  step time n/a", "dim"))
    else:
        spans.append((f"  median {fmt.short_duration_ns(s.median_step_ns)}", "plain"))
        if s.step_modes:
            spans.append((f" ({bimodal_note(s, fmt.short_duration_ns)})", "warn"))
        spans.append((f" p95 {fmt.short_duration_ns(s.p95_step_ns)}", "plain"))
    rate = "n/a" if s.samples_per_s is None else f"{s.samples_per_s:.0f}"
    spans += [(f"  {rate} samples/s", "plain" if s.samples_per_s is not None else "dim"),
              (f"  dropped {dropped}", "warn" if dropped else "dim")]
    return tuple(spans)


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
    measured = {phase for step in steps for phase, value in _phases(step).items() if value}
    outside = any(step.input_outside_model for step in steps)  # no loader: not its wait
    spans: list[Span] = []
    for phase in PHASES:
        if phase in measured:
            label = "input" if outside and phase == "data" else _LABELS[phase]
            spans += [("█", f"phase-{phase}"), (f"{label} ", "dim")]
    return tuple(spans)


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
    spans += _stack(step, cells)
    used = sum(len(text) for text, _ in spans) - len(label) - 1
    spans.append((" " * max(0, bar_w - used) + "▏", "dim"))
    verdict_style = "dim" if step.warmup else {"data-bound": "crit",
                                               "compute-bound": "ok"}.get(step.verdict, "dim")
    spans.append((tail, verdict_style))
    if step.warmup:
        spans = [(text, "dim") for text, _ in spans]
    return clip(tuple(spans), width)


def _stack(step: StepRecord, cells: int) -> list[Span]:
    """Phase cells in proportion to their time; rounding keeps the total at `cells`."""
    values = _phases(step)
    total = step.duration_ns or 1
    spans: list[Span] = []
    done = 0
    acc = 0.0
    for phase in PHASES:
        value = values[phase]
        if not value:
            continue
        acc += value / total * cells
        take = round(acc) - done
        if take > 0:
            spans.append(("█" * take, f"phase-{phase}"))
            done += take
    return spans


def _phases(step: StepRecord) -> dict[str, int | None]:
    """Each drawn phase's time in `step` (None: not measured)."""
    return {
        "data": step.data_ns, "h2d": step.h2d_ns, "forward": step.forward_ns,
        "backward": step.backward_ns, "optimizer": step.optimizer_ns, "other": step.other_ns,
    }


def _idle(seconds: float | None) -> str:
    """How long a trainer has been quiet, in the largest fitting unit."""
    if seconds is None:
        return "n/a"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
