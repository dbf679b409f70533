"""GPU pane lines: one row per device, fields dropped by priority as the width shrinks."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

from gputop.core import fmt
from gputop.core.mig import processes_on
from gputop.core.model import GpuSample
from gputop.tui import cells
from gputop.tui.history import History
from gputop.tui.lines import Line, Span, bar_spans, clip, plain

# Optional fields in the order they are given up when space runs out (last given up first).
_TEMP_W, _POWER_W, _PCIE_W = 6, 11, 20
_NAME_MIN = 9  # the narrowest name cell, where 12 cells do not fit


def gpu_lines(
    gpus: Sequence[GpuSample], history: History, width: int, max_rows: int
) -> list[Line]:
    """Rows for every device that fits; two columns or a '+N more' line when rows are short.
    A device whose row would not be shown is not drawn."""
    if not gpus:
        return []
    if any(gpu.mig_instances for gpu in gpus):
        return _rows_with_mig_lines(gpus, history, width, max_rows)
    columns = 2 if len(gpus) > max_rows and width >= 120 else 1
    col_width = width if columns == 1 else (width - 1) // 2
    height = -(-len(gpus) // columns)  # rows the devices take, the second column beside
    limit = max(1, max_rows)
    shown = height if height <= limit else limit - 1
    name_len = max(len(_short_name(gpu.name)) for gpu in gpus)  # one name column for all

    def row(i: int) -> Line:
        return gpu_row(gpus[i], history, col_width, name_len)

    if columns == 1:
        rows = [row(i) for i in range(shown)]
    else:
        pad: Line = ((" " * col_width, "plain"),)
        rows = [row(i) + ((" ", "plain"),) + (row(height + i) if height + i < len(gpus) else pad)
                for i in range(shown)]
    if shown < height:
        rows.append(plain(f"  … {height - shown} more GPU rows (enlarge the terminal)", "dim"))
    return rows


def gpu_row(gpu: GpuSample, history: History, width: int, name_len: int | None = None) -> Line:
    """One device in `width` cells; its name whole where `name_len` cells (the longest name
    in the pane; this one's by default) fit, else cut with '…'."""
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
    if name_len is None:
        name_len = len(_short_name(gpu.name))
    shape = _shape(width, len(label) + len(mem_text), name_len)
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


def gpu_line_count(gpus: Sequence[GpuSample]) -> int:
    """The lines every device takes in one column: its row and one per MIG instance."""
    return len(gpus) + sum(len(gpu.mig_instances) for gpu in gpus)


def _rows_with_mig_lines(
    gpus: Sequence[GpuSample], history: History, width: int, max_rows: int
) -> list[Line]:
    """One column: each device's row, then a line per MIG instance; cut at `max_rows` lines."""
    name_len = max(len(_short_name(gpu.name)) for gpu in gpus)
    lines: list[Line] = []
    for gpu in gpus:
        lines.append(gpu_row(gpu, history, width, name_len))
        lines += mig_lines(gpu, width)
    limit = max(1, max_rows)
    if len(lines) <= limit:
        return lines
    more = len(lines) - limit + 1
    return [*lines[:limit - 1],
            plain(f"  … {more} more GPU lines (enlarge the terminal)", "dim")]


def mig_lines(gpu: GpuSample, width: int) -> list[Line]:
    """A line per MIG instance of a GPU in MIG mode: profile and ids, util ("n/a" where the
    driver gives none, as drivers do per instance), memory, and the PIDs on it."""
    lines: list[Line] = []
    for instance in gpu.mig_instances:
        used, total = instance.memory_used_bytes, instance.memory_total_bytes
        mem_frac = used / total if used is not None and total else None
        mem_style = cells.level(mem_frac)
        gi = fmt.NA if instance.gpu_instance_id is None else instance.gpu_instance_id
        ci = fmt.NA if instance.compute_instance_id is None else instance.compute_instance_id
        pids = " ".join(str(p.pid) for p in processes_on(gpu, instance)) or "-"
        util = instance.util_percent
        spans: list[Span] = [
            ("   └ ", "dim"), (f"MIG {instance.profile} gi {gi} ci {ci} ", "plain"),
            ("util ", "dim"), (f"{fmt.percent(util):>4} ", "dim" if util is None else "ok"),
            ("mem ", "dim"), *bar_spans(cells.bar_parts(mem_frac, 8), mem_style),
            (f" {fmt.short_size(used)}/{fmt.short_size(total)}", mem_style),
            ("  pids ", "dim"), (pids, "accent"),
        ]
        lines.append(clip(tuple(spans), width))
    return lines


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
def _shape(width: int, fixed: int, name_len: int) -> _Shape:
    """The row's shape at `width` cells with `fixed` cells of label and memory text and names
    up to `name_len` cells: the same for every device and tick at one size, so worked out
    once."""
    # label, util brackets, " 64% ", "mem", mem brackets, the used/total text, two 6-cell bars
    room = width - (fixed + 2 + 5 + 3 + 2 + 12)
    optional = []
    for name, need in (("temp", _TEMP_W), ("power", _POWER_W), ("spark", 12),
                       ("name", 13), ("pcie", _PCIE_W)):
        if room >= need:
            optional.append(name)
            room -= need
    name_w = 0
    if "name" not in optional and room >= _NAME_MIN + 1:
        name_w = _NAME_MIN  # a name cut short says more than none
        room -= _NAME_MIN + 1
    # Share what is left: bars first (to 20 cells each), then the whole name, then history.
    util_w = 6 + min(14, room // 3)
    room -= util_w - 6
    mem_w = 6 + min(14, room // 2)
    room -= mem_w - 6
    if "name" in optional:
        name_w = 12 + max(0, min(room, name_len - 12))
        room -= name_w - 12
    spark_w = 11 + min(room, 49) if "spark" in optional else 0
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
