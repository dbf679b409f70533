"""GPU pane lines: one row per device, fields dropped by priority as the width shrinks."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

from gputop.core import fmt
from gputop.core.model import GpuSample
from gputop.tui import cells
from gputop.tui.history import History
from gputop.tui.lines import Line, Span, bar_spans, clip, plain

# Optional fields in the order they are given up when space runs out (last given up first).
_TEMP_W, _POWER_W, _PCIE_W = 6, 11, 20


def gpu_lines(
    gpus: Sequence[GpuSample], history: History, width: int, max_rows: int
) -> list[Line]:
    """Rows for every device that fits; two columns or a '+N more' line when rows are short.
    A device whose row would not be shown is not drawn."""
    if not gpus:
        return []
    columns = 2 if len(gpus) > max_rows and width >= 120 else 1
    col_width = width if columns == 1 else (width - 1) // 2
    height = -(-len(gpus) // columns)  # rows the devices take, the second column beside
    limit = max(1, max_rows)
    shown = height if height <= limit else limit - 1

    def row(i: int) -> Line:
        return gpu_row(gpus[i], history, col_width)

    if columns == 1:
        rows = [row(i) for i in range(shown)]
    else:
        pad: Line = ((" " * col_width, "plain"),)
        rows = [row(i) + ((" ", "plain"),) + (row(height + i) if height + i < len(gpus) else pad)
                for i in range(shown)]
    if shown < height:
        rows.append(plain(f"  … {height - shown} more GPU rows (enlarge the terminal)", "dim"))
    return rows


def gpu_row(gpu: GpuSample, history: History, width: int) -> Line:
    """One device in `width` cells."""
    label = f"{gpu.index:>2} "
    if gpu.lost:
        return clip(((label, "bold"), ("LOST ", "banner-crit"),
                     (f"{gpu.name} — no longer answering, not polled", "dim")), width)
    util_frac = None if gpu.util_percent is None else gpu.util_percent / 100
    mem_frac = (
        gpu.memory_used_bytes / gpu.memory_total_bytes
        if gpu.memory_used_bytes is not None and gpu.memory_total_bytes
        else None
    )
    mem_text = f" {_mem(gpu)}"
    shape = _shape(width, len(label) + len(mem_text))
    util_style = _util_style(util_frac, mem_frac)
    mem_style = cells.level(mem_frac)
    spans: list[Span] = [(label, "bold")]
    if shape.name:
        spans.append((_name_cell(gpu.name, shape.name), "dim"))
    spans += [
        (" ", "plain"),
        *bar_spans(cells.bar_parts(util_frac, shape.util), util_style),
        (f"{fmt.percent(gpu.util_percent):>5} ", util_style),
    ]
    if shape.spark:
        spans.append((cells.sparkline(history.util(gpu.index), shape.spark) + " ", "accent"))
    spans += [
        ("mem ", "dim"), *bar_spans(cells.bar_parts(mem_frac, shape.mem), mem_style),
        (mem_text, mem_style),
    ]
    if shape.temp:
        spans.append((f"{_temp(gpu.temperature_c):>{_TEMP_W}}", _temp_style(gpu.temperature_c)))
    if shape.power:
        spans.append((f"{_power(gpu):>{_POWER_W}}", "plain"))
    if shape.pcie:
        rx, tx = fmt.short_rate(gpu.pcie_rx_bytes_per_s), fmt.short_rate(gpu.pcie_tx_bytes_per_s)
        pcie = f"↓{rx} ↑{tx}"
        spans.append((f"{pcie:>{_PCIE_W}}", "dim"))
    return clip(tuple(spans), width)


class _Shape(NamedTuple):
    """Where a device row's cells go: each field's width (0: left out), or whether shown."""

    name: int
    util: int
    spark: int
    mem: int
    temp: bool
    power: bool
    pcie: bool


@functools.lru_cache(maxsize=64)
def _shape(width: int, fixed: int) -> _Shape:
    """The row's shape at `width` cells with `fixed` cells of label and memory text: the same
    for every device and tick at one size, so worked out once."""
    # label, util brackets, " 64% ", "mem", mem brackets, the used/total text, two 6-cell bars
    room = width - (fixed + 2 + 5 + 3 + 2 + 12)
    optional = []
    for name, need in (("temp", _TEMP_W), ("power", _POWER_W), ("spark", 12),
                       ("name", 13), ("pcie", _PCIE_W)):
        if room >= need:
            optional.append(name)
            room -= need
    # Share what is left: bars first (to 20 cells each), then history, then the name.
    util_w = 6 + min(14, room // 3)
    room -= util_w - 6
    mem_w = 6 + min(14, room // 2)
    room -= mem_w - 6
    spark_w = name_w = 0
    if "spark" in optional:
        spark_w = 11 + min(room, 49)
        room -= spark_w - 11
    if "name" in optional:
        name_w = 12 + min(room, 10)
    return _Shape(name_w, util_w, spark_w, mem_w, "temp" in optional, "power" in optional,
                  "pcie" in optional)


@functools.lru_cache(maxsize=64)
def _name_cell(name: str, width: int) -> str:
    """The device's name cut to `width` cells and a space (the same every tick)."""
    return cells.fit(_short_name(name), width) + " "


def _mem(gpu: GpuSample) -> str:
    used, total = fmt.short_size(gpu.memory_used_bytes), fmt.short_size(gpu.memory_total_bytes)
    return f"{used}/{total}".rjust(11)


def _temp(value: float | None) -> str:
    return fmt.NA if value is None else f"{value:.0f}°C"


def _power(gpu: GpuSample) -> str:
    if gpu.power_w is None:
        return "n/a W"
    limit = "n/a" if gpu.power_limit_w is None else f"{gpu.power_limit_w:.0f}"
    return f"{gpu.power_w:.0f}/{limit}W"


def _short_name(name: str) -> str:
    for prefix in ("NVIDIA ", "Tesla "):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name


def _util_style(util_frac: float | None, mem_frac: float | None) -> str:
    """Idle compute while memory is held is the case to flag; an idle, empty GPU is fine."""
    if util_frac is None:
        return "dim"
    if util_frac < 0.1 and (mem_frac or 0.0) > 0.1:
        return "warn"
    return "ok"


def _temp_style(value: float | None) -> str:
    return cells.level(None if value is None else value / 100, warn=0.8, crit=0.87)
