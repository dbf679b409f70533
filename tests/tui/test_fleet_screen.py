"""Pilot tests for the fleet screen (`gputop --fleet URL`): hosts worst first, a down host as
DOWN with no figures, Enter into one host (asked for at once) and Esc back, Prometheus's error
on screen in one line, and the process keys off."""

from __future__ import annotations

import re
import time
from dataclasses import replace

from gputop.core.model import (
    FleetAdvice,
    FleetGpu,
    FleetHost,
    FleetHostDetail,
    FleetReport,
    FleetTrainer,
)
from gputop.tui import build_app
from gputop.tui.app import GputopApp
from gputop.tui.views.fleet import fleet_columns, fleet_row_line, host_lines
from gputop.tui.widgets.fleet import FleetHostScreen, FleetScreen, FleetTable
from tests.helpers.tui import FedFleet, fleet_frame, running, screen_text, sync

URL = "http://prom:9090"
GONE = FleetHost("gone:19400", "gone", up=False)
HELD = FleetHost("held:19400", "held", up=True, gpus=2, gpu_util_ratio=0.0,
                 gpu_memory_used_bytes=60e9, gpu_memory_total_bytes=160e9,
                 idle_gpus_holding_memory=2, trainers=1, probed_trainers=1,
                 data_bound_trainers=1, worst_data_wait_ratio=0.62, stragglers=1,
                 memory_pressure_ratio=0.3, advice=1)
CALM = FleetHost("calm:19400", "calm", up=True, gpus=8, gpu_util_ratio=0.97,
                 idle_gpus_holding_memory=0, trainers=1, data_bound_trainers=0, stragglers=0,
                 worst_data_wait_ratio=0.02, advice=0)
REPORT = FleetReport(URL, (GONE, HELD, CALM), scrape_interval_s=15.0)
DETAIL = FleetHostDetail(
    "held:19400",
    gpus=(FleetGpu("0", "GPU-a", "H100", 0.0, 30e9, 80e9),),
    trainers=(FleetTrainer("4242", "python", "ana", True, workers=2, data_wait_ratio=0.62,
                           verdict="data-bound", state="running", rank="3", world_size="8",
                           rendezvous="job7@node-0:29500", straggler=True,
                           median_step_s=0.12),),
    advice=(FleetAdvice("loader-workers", "warn", "4242"),),
)


def _app() -> tuple[GputopApp, FedFleet]:
    feed = FedFleet()
    return build_app(feed), feed


def _rows(app: GputopApp) -> list[str]:
    return app.screen.query_one(FleetTable).text.splitlines()


@sync
async def test_hosts_are_listed_worst_first_and_a_down_host_shows_no_figures() -> None:
    app, _ = _app()
    async with running(app, fleet_frame(REPORT), size=(160, 30)):
        assert isinstance(app.screen, FleetScreen)
        title, *rows = _rows(app)
        assert "HOST" in title and "WHY" in title
        assert [r.split()[0] for r in rows] == ["gone", "held", "calm"]
        down = rows[0]
        assert "DOWN" in down and not any(ch.isdigit() for ch in down.split("DOWN", 1)[1])
        assert "2 idle GPUs holding memory · 1 data-bound · 1 input straggler" in rows[1]
        assert rows[2].rstrip().endswith("ok")
        head = screen_text(app)[0]
        assert URL in head and "3 hosts, 1 down, 2 want a look" in head
        assert "refresh 15 s (scrape interval)" in head


@sync
async def test_enter_asks_for_the_host_at_once_shows_it_and_escape_comes_back() -> None:
    app, feed = _app()
    async with running(app, fleet_frame(REPORT), size=(140, 30)) as pilot:
        await pilot.press("down", "enter")
        assert isinstance(app.screen, FleetHostScreen)
        assert feed.focused == ["held:19400"]
        assert "asking Prometheus for its GPUs, trainers and advice" in "\n".join(
            screen_text(app))
        app.show_frame(fleet_frame(replace(REPORT, detail=DETAIL)))
        await pilot.pause()
        shown = "\n".join(screen_text(app))
        for words in ("GPUs (1)", "H100", "Trainers (1)", "4242 python", "data-bound",
                      "data wait 62%", "rank 3/8", "INPUT STRAGGLER", "job job7@node-0:29500",
                      "Advice (1)", "loader-workers", "trainer 4242"):
            assert words in shown, words
        await pilot.press("escape")
        assert isinstance(app.screen, FleetScreen)
        assert feed.focused == ["held:19400", None]


@sync
async def test_the_cursor_stays_on_its_host_when_the_order_changes() -> None:
    app, _ = _app()
    async with running(app, fleet_frame(REPORT), size=(140, 30)) as pilot:
        await pilot.press("down", "down")
        table = app.screen.query_one(FleetTable)
        assert table.selected is not None and table.selected.instance == "calm:19400"
        app.show_frame(fleet_frame(replace(REPORT, hosts=(GONE, replace(CALM, stragglers=5),
                                                          HELD))))
        await pilot.pause()
        assert table.selected is not None and table.selected.instance == "calm:19400"


@sync
async def test_an_error_from_prometheus_is_one_line_on_screen() -> None:
    app, _ = _app()
    error = "cannot query http://prom:9090: <urlopen error [Errno 111] Connection refused>"
    async with running(app, fleet_frame(FleetReport(URL, error=error)), size=(120, 24)):
        lines = screen_text(app)
        assert sum(error in line for line in lines) == 1
        assert "no answer from Prometheus yet" in "\n".join(lines)


@sync
async def test_when_prometheus_stops_answering_the_last_hosts_stay_marked_stale() -> None:
    app, _ = _app()
    error = f"Prometheus at {URL} did not answer within 10 s"
    stale = replace(REPORT, error=error, stale_from=time.time() - 42)
    async with running(app, fleet_frame(stale), size=(160, 30)):
        lines = screen_text(app)
        assert re.search(r"stale: the hosts below are 4\d s old", lines[0]), lines[0]
        assert sum(error in line for line in lines) == 1
        assert [r.split()[0] for r in _rows(app)[1:]] == ["gone", "held", "calm"]


@sync
async def test_the_process_keys_are_off_in_the_fleet_view() -> None:
    app, _ = _app()
    async with running(app, fleet_frame(REPORT), size=(120, 24)) as pilot:
        before = screen_text(app)
        await pilot.press("slash", "c", "T", "A", "k")
        assert isinstance(app.screen, FleetScreen) and screen_text(app)[1:] == before[1:]
        await pilot.press("p")
        assert app.sampler.paused and "PAUSED" in screen_text(app)[0]


def test_a_narrow_terminal_keeps_state_and_the_trouble_columns() -> None:
    names = [c.name for c in fleet_columns(80)]
    assert {"HOST", "STATE", "IDLE+MEM", "DATA", "WAIT", "STRAG"} <= set(names)
    line = "".join(text for text, _ in fleet_row_line(HELD, fleet_columns(80), 80, False))
    assert len(line) <= 80 and "idle GPU" in line


def test_a_down_host_in_detail_says_why_it_has_no_figures() -> None:
    text = "\n".join("".join(t for t, _ in line)
                     for line in host_lines(GONE.instance, GONE, None, 100))
    assert "DOWN" in text and "stale is not zero" in text
    gone = host_lines("left:19400", None, None, 100)
    assert "no longer among the fleet's targets" in "".join(t for t, _ in gone[0])
