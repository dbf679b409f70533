"""The pure Frame -> Lines layer: formats, degraded fields, narrow widths, ranks, advice order."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gputop.analysis.steps import input_straggler
from gputop.core import fmt
from gputop.core.model import Advice
from gputop.tui import cells
from gputop.tui.history import History
from gputop.tui.lines import width_of
from gputop.tui.views import gpus as gpus_view
from gputop.tui.views.advice import advice_lines
from gputop.tui.views.gpus import gpu_lines, gpu_row
from gputop.tui.views.host import host_lines
from gputop.tui.views.processes import TableState, columns_for, row_line, table_rows
from gputop.tui.views.steps import step_lines
from tests.helpers.tui import frames, steps


def _text(line) -> str:
    return "".join(text for text, _ in line)


def test_compact_units() -> None:
    assert fmt.short_size(1536) == "1.5K" and fmt.short_size(None) == "n/a"
    assert fmt.short_size(512) == "512B"
    assert fmt.short_rate(2.5e9) == "2.5G/s" and fmt.short_duration_ns(1_500_000) == "1.5ms"
    assert fmt.cpu_time(3725.5) == "1:02:05" and fmt.cpu_time(65.25) == "1:05.25"
    assert cells.bar(0.5, 4) == "██  " and cells.bar(None, 3) == "   "
    assert cells.sparkline([0, 50, 100, None], 6) == "  ▁▄█ "


def test_unknown_gpu_fields_show_na_and_a_lost_gpu_says_lost() -> None:
    gpu = frames("compute-bound", 1)[0].gpu.gpus[0]
    blind = replace(gpu, util_percent=None, temperature_c=None, power_w=None,
                    memory_used_bytes=None, pcie_rx_bytes_per_s=None)
    text = _text(gpu_row(blind, History(), 160))
    assert text.count("n/a") >= 4
    assert "LOST" in _text(gpu_row(replace(gpu, lost=True), History(), 80))


def test_sixteen_gpus_fit_in_two_columns_or_say_how_many_are_hidden() -> None:
    gpus = frames("mixed", 1, gpus=16)[0].gpu.gpus
    assert len(gpu_lines(gpus, History(), 200, 8)) == 8
    narrow = gpu_lines(gpus, History(), 80, 5)
    assert len(narrow) == 5 and "12 more GPU rows" in _text(narrow[-1])


@pytest.mark.parametrize(("width", "max_rows", "drawn"), [(80, 4, 3), (200, 3, 4), (80, 9, 8)])
def test_only_the_gpu_rows_shown_are_drawn(monkeypatch, width, max_rows, drawn) -> None:
    gpus = frames("mixed", 1, gpus=8)[0].gpu.gpus
    expected = gpu_lines(gpus, History(), width, max_rows)
    calls = []

    def counted(gpu, history, width, name_len=None):
        calls.append(gpu.index)
        return gpu_row(gpu, history, width, name_len)

    monkeypatch.setattr(gpus_view, "gpu_row", counted)
    assert gpu_lines(gpus, History(), width, max_rows) == expected
    assert len(calls) == drawn


def test_every_line_fits_its_width() -> None:
    frame = frames("data-starved", 1, attach=True, advice=True)[0]
    for width in (40, 80, 250):
        lines = [*gpu_lines(frame.gpu.gpus, History(), width, 4),
                 *host_lines(frame.host, frame.memory_bandwidth, History(), width),
                 *step_lines(frame.attached, width, 10),
                 *advice_lines(frame.advice, width, 4)]
        assert all(width_of(line) <= width for line in lines)


def test_narrow_table_keeps_pid_cpu_and_command() -> None:
    names = [c.name for c in columns_for(40)]
    assert names == ["PID", "%CPU"]
    frame = frames("idle", 1)[0]
    rows = table_rows(frame, TableState())
    line = _text(row_line(rows[0], columns_for(40), 40, False))
    assert "4242" in line and "97.3" in line and "[3w" in line


def test_membw_line_only_with_a_source() -> None:
    frame = frames("idle", 1)[0]
    assert any("membw" in _text(line) for line in
               host_lines(frame.host, frame.memory_bandwidth, History(), 120))
    assert not any("membw" in _text(line) for line in
                   host_lines(frame.host, None, History(), 120))


def test_ranks_side_by_side_flag_the_one_all_wait_for() -> None:
    fast, slow = steps(4242, data_ms=4.0), steps(4243, data_ms=60.0)
    straggler = input_straggler((fast, slow))  # the sampler derives it once per tick
    assert straggler is not None and straggler.pid == 4243
    title = _text(step_lines((fast, slow), 120, 8, straggler.pid)[0])
    assert "attached 4242" in title and "attached 4243" in title
    assert title.index("slowest") > title.index("attached 4243")
    twins = (fast, replace(fast, pid=4243))
    assert input_straggler(twins) is None  # ranks that wait alike have no straggler to name
    assert "slowest" not in _text(step_lines(twins, 120, 8, None)[0])


def test_warmup_steps_are_dimmed_and_labelled() -> None:
    state = steps(4242, n=3)
    lines = step_lines((state,), 100, 10)
    warm = [line for line in lines if "warm-up" in _text(line)]
    inked = [style for line in warm for text, style in line if text.strip()]
    assert len(warm) == 2 and set(inked) == {"dim"}


def test_advice_most_severe_first_evidence_then_action() -> None:
    items = (Advice("a", "info", "A", "ea", "do a"), Advice("b", "critical", "B", "eb", "do b"),
             Advice("c", "warn", "C", "ec", "do c"))
    lines = [_text(line) for line in advice_lines(items, 80, 6)]
    assert lines[0].startswith("✖ B: eb") and lines[1].strip() == "→ do b"
    assert lines[2].startswith("▲ C") and lines[4].startswith("● A")
    assert _text(advice_lines(items, 80, 3)[-1]).strip() == "… 2 more (A shows all)"
