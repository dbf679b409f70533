"""Host pane lines: per-core CPU, memory and swap, and the memory-bandwidth gauge."""

from __future__ import annotations

from gputop.core import fmt
from gputop.core.model import HostSample, MemoryBandwidthSample
from gputop.tui import cells
from gputop.tui.history import History
from gputop.tui.lines import Line, Span, bar_spans, clip

_GLYPHS = "▁▂▃▄▅▆▇█"
_SPACE: Span = (" ", "dim")
_GAP: Span = ("  ", "dim")


def host_lines(
    host: HostSample, membw: MemoryBandwidthSample | None, history: History, width: int,
    max_core_rows: int = 2,
) -> list[Line]:
    """Cores, then memory + swap, then memory bandwidth when a source exists."""
    lines = core_lines(host.per_cpu_percent, width, max_core_rows)
    lines.append(memory_line(host, width))
    if membw is not None:
        lines.append(membw_line(membw, history, width))
    return lines


def core_lines(per_cpu: tuple[float, ...], width: int, max_rows: int) -> list[Line]:
    """Per-core bars when they fit on one row, else one glyph per core."""
    if not per_cpu:
        return [(("cpu ", "dim"), ("n/a", "dim"))]
    label_w = 4
    cell = 11
    if len(per_cpu) * cell <= width - label_w:
        spans: list[Span] = [("cpu", "dim")]
        for index, value in enumerate(per_cpu):
            frac = round(value) / 100  # the bar is the whole percent printed beside it
            style = cells.level(frac)
            spans += [(f"{index:>3} ", "dim"), *bar_spans(cells.bar_parts(frac, 4), style),
                      (f"{value:>3.0f}", style)]
        return [clip(tuple(spans), width)]
    per_row = max(1, width - label_w)
    rows: list[Line] = []
    for start in range(0, len(per_cpu), per_row):
        chunk = per_cpu[start:start + per_row]
        spans = [("cpu " if start == 0 else "    ", "dim")]
        spans += [(_glyph(round(value)), cells.level(round(value) / 100)) for value in chunk]
        rows.append(_merge(spans))
    if len(rows) > max_rows:
        rows = rows[:max_rows]
    return rows


def memory_line(host: HostSample, width: int) -> Line:
    """Memory and swap bars with used/total."""
    used = host.memory_total_bytes - host.memory_available_bytes
    mem_frac = used / host.memory_total_bytes if host.memory_total_bytes else None
    swap_frac = host.swap_used_bytes / host.swap_total_bytes if host.swap_total_bytes else None
    bar_w = max(4, min(24, (width - 44) // 2))
    mem_text = f" {fmt.short_size(used)}/{fmt.short_size(host.memory_total_bytes)}"
    swap_text = f" {fmt.short_size(host.swap_used_bytes)}/{fmt.short_size(host.swap_total_bytes)}"
    return clip((
        ("mem ", "dim"), *bar_spans(cells.bar_parts(mem_frac, bar_w), cells.level(mem_frac)),
        (f"{mem_text:<14}", cells.level(mem_frac)),
        ("swap ", "dim"),
        *bar_spans(cells.bar_parts(swap_frac, bar_w), cells.level(swap_frac, warn=0.25, crit=0.6)),
        (swap_text, cells.level(swap_frac, warn=0.25, crit=0.6)),
    ), width)


def membw_line(sample: MemoryBandwidthSample, history: History, width: int) -> Line:
    """The bandwidth gauge: value or pressure, peak, PSI, swap-in, faults, labelled by source.

    With neither a pressure nor a byte rate it is `membw n/a (<what>; ? for why)`: no bar, no
    number.
    """
    if is_na(sample):
        return na_line(sample, width)
    load = history.membw[-1] if history.membw else None
    frac = None if load is None else load / 100
    style = cells.level(frac, warn=0.6, crit=0.85)
    if sample.read_bytes_per_s is not None:
        total = sample.read_bytes_per_s + (sample.write_bytes_per_s or 0.0)
        value = f" {fmt.short_rate(total)}"
        detail = (f" rd {fmt.short_rate(sample.read_bytes_per_s)}"
                  f" wr {fmt.short_rate(sample.write_bytes_per_s)}"
                  f" peak {fmt.short_rate(sample.peak_bytes_per_s)}")
    elif sample.pressure is None:
        value = f" {fmt.short_rate(sample.total_bytes_per_s)}"
        detail = ""
    else:
        value = f" {fmt.percent(load)} pressure"
        peak = sample.peak_bytes_per_s
        detail = f" peak {fmt.short_rate(peak)}" if peak else ""
    label = f" [{sample.source}, {sample.confidence}]"
    if sample.relative_to:
        label = f" [{sample.source} vs {sample.relative_to}]"
        detail = ""  # the peak is in the label
    spans: list[Span] = [
        ("membw ", "dim"), *bar_spans(cells.bar_parts(frac, 10), style),
        (value, style), (label, "dim"), *_top_spans(sample), *_kernel_spans(sample),
        (detail, "dim"),
    ]
    used = sum(len(text) for text, _ in spans)
    spark_w = min(40, width - used - 2)
    if spark_w >= 8:
        spans.append(("  " + cells.sparkline(history.membw, spark_w), "accent"))
    if sample.note and width - used - 2 - max(spark_w, 0) > 12:
        spans.append((f"  {sample.note}", "dim"))
    return clip(tuple(spans), width)


def na_line(sample: MemoryBandwidthSample, width: int) -> Line:
    """`membw n/a (<what>; ? for why)`, then PSI and faults: the whole reason is long and the
    same every tick, so the help (`?`) carries it (membw_why) and the line stays short."""
    return clip((("membw n/a", "dim"), _SPACE, (f"({na_word(sample)}; ? for why)", "dim"),
                 *_kernel_spans(sample)), width)


def na_word(sample: MemoryBandwidthSample) -> str:
    """Why there is no figure, in a word or two."""
    if sample.source == "none":
        return "no counters"
    return {"calibrating": "calibrating", "uncalibrated": "no idle peak yet"}.get(
        sample.confidence, sample.confidence)


def membw_why(sample: MemoryBandwidthSample | None) -> str | None:
    """The whole reason the bandwidth line says n/a, for the help; None when it has a figure."""
    if sample is None or not is_na(sample):
        return None
    return sample.note or sample.confidence


def is_na(sample: MemoryBandwidthSample) -> bool:
    """Neither a pressure nor a byte rate: nothing to draw a bar from."""
    return (sample.pressure is None and sample.total_bytes_per_s is None
            and sample.read_bytes_per_s is None)


def _top_spans(sample: MemoryBandwidthSample) -> list[Span]:
    """The process that made most of the traffic, where the source can tell."""
    if not sample.top_consumers:
        return []
    top = sample.top_consumers[0]
    return [(f"  top {top.name or '?'} {top.pid} {fmt.short_rate(top.bytes_per_s)}", "accent")]


def _kernel_spans(sample: MemoryBandwidthSample) -> list[Span]:
    """PSI some/full, swap-ins and major faults: the kernel's own pressure signs."""
    psi = f"PSI {_num(sample.psi_some_avg10)}/{_num(sample.psi_full_avg10)}"
    psi_style = cells.level(
        None if sample.psi_some_avg10 is None else sample.psi_some_avg10 / 100,
        warn=0.05, crit=0.2,
    )
    faults = (f"swapin {_num(sample.swap_in_per_s)}/s"
              f"  majflt {_num(sample.major_faults_per_s)}/s")
    fault_style = "warn" if (sample.swap_in_per_s or 0) > 0 else "dim"
    return [_GAP, (psi, psi_style), _GAP, (faults, fault_style)]


def _glyph(value: float) -> str:
    return _GLYPHS[min(7, max(0, int(value / 100 * 8)))]


def _num(value: float | None) -> str:
    if value is None:
        return fmt.NA
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def _merge(spans: list[Span]) -> Line:
    """Join neighbouring spans of one style so a 128-core row stays a handful of segments."""
    out: list[Span] = []
    for text, style in spans:
        if out and out[-1][1] == style:
            out[-1] = (out[-1][0] + text, style)
        else:
            out.append((text, style))
    return tuple(out)
