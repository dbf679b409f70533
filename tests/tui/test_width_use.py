"""Every cell used: GPU names whole where the row has room, a short membw line when there is
no figure (the reason one key away), header fields never run together."""

from __future__ import annotations

import html
import re
from dataclasses import replace

import pytest

from gputop.core.model import Frame, MemoryBandwidthSample
from gputop.sources.simulated import NAME
from gputop.tui import build_app
from gputop.tui.history import History
from gputop.tui.lines import Line
from gputop.tui.views.gpus import gpu_lines
from gputop.tui.views.header import ReplayPlace, header_lines
from gputop.tui.views.host import membw_line
from gputop.tui.widgets.help import HelpScreen
from tests.helpers.tui import FedSampler, frames, running, screen_text, sync

WIDTHS = (24, 40, 60, 79, 80, 81, 99, 100, 120, 160, 200, 240)
HOSTNAMES = ("trainbox", "gpu-node-0042.training-cluster.us-east-2.internal.example.com",
             "a", "x" * 200)
WHY = ("canary off: it would need 960 MiB (2x the 480 MiB LLC), over its 16 MiB budget; "
       "resctrl: not mounted or no monitoring; perf uncore: no memory-controller PMU")
LONG_NAME = "NVIDIA GeForce RTX 4090 Laptop GPU"  # 'GeForce RTX 4090 Laptop GPU' on screen


def _text(line: Line) -> str:
    return "".join(text for text, _ in line)


def _read_span_by_span(line: Line) -> str:
    """The line as a screenshot's reader gets it: each span's text, trimmed, at the column
    the span starts (Textual's SVG writes one <text> per span, none for blank ones)."""
    cells = [" "] * sum(len(text) for text, _ in line)
    at = 0
    for text, _ in line:
        word = text.strip()
        cells[at:at + len(word)] = word
        at += len(text)
    return "".join(cells)


def _words(text: str) -> str:
    """`text` with every run of blanks one space: where words are apart, not how far."""
    return " ".join(text.split())


def _frame(hostname: str) -> Frame:
    frame = frames("data-starved", 2)[-1]
    return replace(frame, host=replace(frame.host, hostname=hostname))


def _fields(frame: Frame) -> set[str]:
    """The header's fields after the hostname, as the widest and a narrow header show them."""
    return {part for width in (400, 99) for part in _text(header_lines(frame, width)[0])
            .split("  ")[1:]}


@pytest.mark.parametrize("hostname", HOSTNAMES)
@pytest.mark.parametrize("paused", [False, True])
def test_header_reads_the_same_span_by_span_as_on_screen(hostname: str, paused: bool) -> None:
    frame = _frame(hostname)
    place = ReplayPlace(tick=3, ticks=70, speed=2.0, paused=True)
    for width in WIDTHS:
        for line in (*header_lines(frame, width, paused=paused),
                     *header_lines(frame, width, replay=place)):
            assert _words(_read_span_by_span(line)) == _words(_text(line)), width
    waiting = header_lines(None, 80)[0]
    assert _words(_read_span_by_span(waiting)) == _words(_text(waiting))


@pytest.mark.parametrize("hostname", HOSTNAMES)
def test_header_fields_are_whole_and_apart_at_every_width(hostname: str) -> None:
    frame = _frame(hostname)
    fields = _fields(frame)
    for width in WIDTHS:
        text = _text(header_lines(frame, width)[0])
        assert len(text) <= width
        parts = text.split("  ")
        assert parts[0].startswith("gputop ")
        for part in parts[1:]:
            assert part in fields, (width, part, text)  # a field whole, never cut or glued
        if width >= 80:  # a long hostname is cut so that CPU and memory still show
            assert " CPU " in text and " mem " in text, (width, text)
        if width >= 160 and len(hostname) < 80:  # and whole where there is room
            assert f"gputop {hostname}  up " in text, (width, text)


def test_gpu_names_whole_where_the_row_has_room_and_cut_with_an_ellipsis_where_not() -> None:
    gpus = frames("data-starved", 2)[-1].gpu.gpus
    assert len(NAME) > 22  # longer than the old 22-cell name column
    history = History()
    wide = [_text(line) for line in gpu_lines(gpus, history, 200, 8)]
    assert all(f" {NAME} " in row for row in wide), wide
    for width in (80, 100, 120):
        rows = [_text(line) for line in gpu_lines(gpus, history, width, 8)]
        assert all(re.search(r"^ *\d+ Simulat[^…]*… ", row) and NAME not in row
                   for row in rows), (width, rows)
        assert all(len(row) <= width for row in rows)
    laptop = [replace(gpu, name=LONG_NAME) for gpu in gpus]
    rows = [_text(line) for line in gpu_lines(laptop, history, 200, 8)]
    assert all(" GeForce RTX 4090 Laptop GPU " in row for row in rows), rows


def test_one_long_name_keeps_every_row_aligned() -> None:
    gpus = list(frames("data-starved", 2)[-1].gpu.gpus)
    gpus[1] = replace(gpus[1], name=LONG_NAME)
    rows = [_text(line) for line in gpu_lines(gpus, History(), 200, 8)]
    assert len({row.index(" mem ") for row in rows}) == 1, rows


def _na(psi: float = 2.5) -> MemoryBandwidthSample:
    return MemoryBandwidthSample(source="none", confidence="unavailable", note=WHY,
                                 psi_some_avg10=psi, psi_full_avg10=0.0, swap_in_per_s=0.0,
                                 major_faults_per_s=1.0)


def test_membw_line_is_short_when_there_is_no_figure() -> None:
    for width in (80, 120, 200, 400):
        line = _text(membw_line(_na(), History(), width))
        assert line.startswith("membw n/a (no counters; ? for why)  PSI 2.5/0.0"), line
        assert "canary" not in line and "majflt 1.0/s" in line
        assert _words(_read_span_by_span(membw_line(_na(), History(), width))) == _words(line)


def test_the_reason_for_membw_na_is_in_the_help() -> None:
    frame = replace(frames("idle", 1)[0], memory_bandwidth=_na())
    shown = _help_screen(frame)
    text = _words(" ".join(row.replace("│", " ") for row in shown))
    assert WHY in text, shown


def test_no_membw_reason_in_the_help_when_there_is_a_figure() -> None:
    shown = _help_screen(frames("idle", 1)[0])
    assert not any("membw n/a" in row for row in shown)


def _help_screen(frame: Frame) -> list[str]:
    """The help's rows, scrolled to its end, for an app showing `frame` at 100x60."""
    result: list[str] = []

    @sync
    async def run() -> None:
        app = build_app(FedSampler())
        async with running(app, frame, size=(100, 60)) as pilot:
            await pilot.press("question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            app.screen.query_one("#help-box").scroll_end(animate=False)
            await pilot.pause()
            result.extend(screen_text(app))

    run()
    return result


def test_the_screenshot_header_reads_with_its_fields_apart() -> None:
    """The README's screenshots are Textual's SVG: read as its text elements, trimmed, at
    their columns, the header says 'trainbox  up', never 'trainboxup'."""
    svg: list[str] = []

    @sync
    async def run() -> None:
        app = build_app(FedSampler())
        async with running(app, *frames("data-starved", 3), size=(160, 30)):
            svg.append(app.export_screenshot())

    run()
    header = _svg_rows(svg[0])[0]
    assert "gputop trainbox  up 3d 4h05m  load 3.21 2.87 2.50  CPU" in header, header
    assert re.search(r"CPU \d+% of 8  mem ", header), header


_SVG_TEXT = re.compile(r'<text class="[^"]*" x="([\d.]+)" y="([\d.]+)" textLength="([\d.]+)"'
                       r'[^>]*>([^<]*)</text>')


def _svg_rows(svg: str) -> list[str]:
    """Each row of an SVG screenshot, its text elements trimmed and put at their columns."""
    rows: dict[float, dict[int, str]] = {}
    for x, y, length, raw in _SVG_TEXT.findall(svg):
        text = html.unescape(raw).replace("\xa0", " ")
        cell = float(length) / len(text)
        rows.setdefault(float(y), {})[round(float(x) / cell)] = text.strip()
    out = []
    for y in sorted(rows):
        cells: list[str] = []
        for column, word in sorted(rows[y].items()):
            cells += [" "] * (column - len(cells))
            cells[column:column + len(word)] = word
        out.append("".join(cells))
    return out


def test_first_paint_and_plain_text_show_long_names_whole() -> None:
    from gputop.export.text import render as text_render
    from gputop.tui.splash import render as splash_render

    frame = frames("data-starved", 2)[-1]
    laptop = replace(frame, gpu=replace(frame.gpu, gpus=tuple(
        replace(gpu, name=LONG_NAME) for gpu in frame.gpu.gpus)))
    assert splash_render(laptop, 200, 50).count(f"{LONG_NAME} ") == 4
    text = text_render(laptop, 200)
    rows = [line for line in text.splitlines() if LONG_NAME in line]
    assert len(rows) == 4
    title = next(line for line in text.splitlines() if "NAME" in line and "UTIL" in line)
    assert {row.index("%") - title.index("UTIL") for row in rows} <= set(range(5))
