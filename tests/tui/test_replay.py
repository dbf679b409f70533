"""`gputop replay`: the live view's app fed by a recording: the REPLAY banner, the keys that
step, jump and change speed, and the panes showing what the live view showed then."""

from __future__ import annotations

import random
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from gputop.core.model import Frame
from gputop.frames.playback import Playback
from gputop.recording.replay import Replay
from gputop.recording.writer import RecordWriter, open_record
from gputop.tui import build_app
from gputop.tui.app import GputopApp
from gputop.tui.views.header import recorded_time
from gputop.tui.widgets.linepane import LinePane
from tests.helpers.tui import (
    FedSampler,
    drawn_lines,
    frames,
    recordable_frames,
    running,
    sync,
)

if TYPE_CHECKING:
    from textual.pilot import Pilot

TICKS = 12
SIZE = (140, 50)


def _recorded(tmp_path: Path) -> tuple[Path, list[Frame]]:
    """A recording of TICKS frames with GPUs, a trainer's steps and advice; the frames as
    the live sampler would have delivered them (derived facts derived)."""
    path = tmp_path / "run.sqlite"
    writer = RecordWriter(open_record(str(path)))
    live = recordable_frames(TICKS)
    for frame in live:
        writer.write(frame)
    writer.db.close()
    return path, live


def _replay(tmp_path: Path) -> tuple[GputopApp, Playback, list[Frame]]:
    """The replay's app over a fresh recording, paused (the keys move it, not the clock);
    its player; the frames recorded."""
    path, live = _recorded(tmp_path)
    playback = Playback(Replay(str(path)))
    playback.set_paused(True)
    return build_app(playback), playback, live


def _text(app: GputopApp, pane: str) -> str:
    return app.query_one(f"#{pane}", LinePane).text


async def _showing(app: GputopApp, pilot: Pilot[int], tick: int, live: list[Frame]) -> None:
    """Wait (a bounded number of UI turns) until the app shows recorded tick `tick` (1-based)."""
    for _ in range(2000):
        if app.frame is not None and app.frame.time == live[tick - 1].time:
            await pilot.pause()
            return
        await pilot.pause(0.01)
    raise AssertionError(f"tick {tick} never shown; showing {app.frame and app.frame.time}")


@sync
async def test_the_banner_says_replay_when_and_where(tmp_path: Path) -> None:
    app, _, live = _replay(tmp_path)
    async with running(app, size=SIZE) as pilot:
        await _showing(app, pilot, 1, live)
        header = _text(app, "header")
        assert (f"REPLAY  recorded {recorded_time(live[0].time)}  tick 1/{TICKS}  speed 1x  "
                "PAUSED") in header
        footer = _text(app, "footer")
        assert "← back  → step  g first  G last  + faster  - slower" in footer
        assert "GPU MEM" not in footer  # g jumps here


@sync
async def test_arrows_step_and_g_jumps(tmp_path: Path) -> None:
    app, playback, live = _replay(tmp_path)
    async with running(app, size=SIZE) as pilot:
        await _showing(app, pilot, 1, live)
        await pilot.press("right", "right", "right")
        await _showing(app, pilot, 4, live)
        await pilot.press("left")
        await _showing(app, pilot, 3, live)
        await pilot.press("G")
        await _showing(app, pilot, TICKS, live)
        assert f"tick {TICKS}/{TICKS}" in _text(app, "header")
        await pilot.press("right")  # past the end: stays
        await pilot.press("g")
        await _showing(app, pilot, 1, live)
        await pilot.press("left")  # before the start: stays
        await _showing(app, pilot, 1, live)
        assert playback.position() == (1, TICKS) and playback.paused
        assert app.state.sort != "gpu"  # g jumped, it did not sort


@sync
async def test_plus_and_minus_change_the_speed_and_p_plays(tmp_path: Path) -> None:
    app, playback, live = _replay(tmp_path)
    async with running(app, size=SIZE) as pilot:
        await _showing(app, pilot, 1, live)
        await pilot.press("plus", "plus", "plus", "plus", "plus", "plus")
        assert playback.speed == 64.0 and "speed 64x" in _text(app, "header")
        await pilot.press("minus")
        assert playback.speed == 32.0
        await pilot.press("p")  # at 32x it may play through before the next line runs:
        await _showing(app, pilot, TICKS, live)  # reaching the newest tick with no key proves it
        for _ in range(1000):
            if playback.paused:
                break
            await pilot.pause(0.01)
        assert playback.paused and "PAUSED" in _text(app, "header")


@sync
async def test_a_replayed_tick_shows_the_panes_the_live_view_showed(tmp_path: Path) -> None:
    app, _, live = _replay(tmp_path)
    shown = build_app(FedSampler())  # the live view, fed the same ticks as they came
    async with running(app, size=SIZE) as pilot:
        await _showing(app, pilot, 1, live)
        for _ in range(7):
            await pilot.press("right")
        await _showing(app, pilot, 8, live)
        replayed = {pane: _text(app, pane) for pane in ("gpus", "steps")}
        advice = [(a.id, a.severity, a.title, a.action) for a in app.shown_advice()]
    async with running(shown, *live[:8], size=SIZE):
        assert "attached 4242" in replayed["steps"] and advice
        for pane, text in replayed.items():
            assert text == _text(shown, pane), pane
        # the same advice; its numbers as stored when it appeared (refreshed once a minute)
        assert advice == [(a.id, a.severity, a.title, a.action) for a in shown.shown_advice()]


@sync
async def test_the_live_view_keeps_g_for_sorting() -> None:
    app = build_app(FedSampler())
    async with running(app, frames("data-starved", 1)[0], size=SIZE) as pilot:
        await pilot.press("g")
        assert app.state.sort == "gpu"
        assert "first" not in _text(app, "footer")


async def _live_panes(frames_shown: list[Frame], panes: tuple[str, ...]) -> dict[str, str]:
    """The panes of the live view fed `frames_shown` one after another."""
    shown = build_app(FedSampler())
    async with shown.run_test(size=SIZE) as pilot:
        for frame in frames_shown:
            shown.show_frame(frame)
        await pilot.pause()
        return {pane: _text(shown, pane) for pane in panes}


@sync
async def test_a_jumped_to_or_held_tick_has_the_sparklines_recorded_before_it(
        tmp_path: Path) -> None:
    """The GPU sparklines at a tick are the recorded ticks up to it, however the replay got
    there: jumped (G, g), stepped back, or played to the newest tick and held (shown twice)."""
    app, playback, live = _replay(tmp_path)
    seen: dict[str, str] = {}
    async with app.run_test(size=SIZE) as pilot:
        await _showing(app, pilot, 1, live)
        await pilot.press("G")
        await _showing(app, pilot, TICKS, live)
        seen["G"] = _text(app, "gpus")
        await pilot.press("left")
        await _showing(app, pilot, TICKS - 1, live)
        seen["left"] = _text(app, "gpus")
        await pilot.press("g")
        await _showing(app, pilot, 1, live)
        seen["g"] = _text(app, "gpus")
        await pilot.press(*["plus"] * 6, "p")  # 64x: played through and held at the newest
        await _showing(app, pilot, TICKS, live)
        for _ in range(1000):
            if playback.paused:
                break
            await pilot.pause(0.01)
        await pilot.pause(0.1)
        seen["held"] = _text(app, "gpus")
    assert seen["G"] == seen["held"] == (await _live_panes(live, ("gpus",)))["gpus"]
    assert seen["left"] == (await _live_panes(live[:-1], ("gpus",)))["gpus"]
    assert seen["g"] == (await _live_panes(live[:1], ("gpus",)))["gpus"]


def test_a_recorded_frame_draws_the_lines_the_live_one_drew(tmp_path: Path) -> None:
    """Numbers a recording keeps at a tenth but the screen prints whole (host and worker
    %CPU, GPU watts) read back to the same digit, per-core bars are drawn at the whole
    percent printed beside them, simulated GPUs count memory and PCIe in NVML's units."""
    rng = random.Random(16)
    live = []
    for frame in frames("data-starved", 200, attach=True):
        host = replace(frame.host, cpu_percent=rng.uniform(0, 100),
                       per_cpu_percent=tuple(rng.uniform(0, 100) for _ in range(4)))
        groups = tuple(replace(g, workers_cpu_percent=rng.uniform(0, 300))
                       for g in frame.trainers)
        gpus = tuple(replace(g, power_w=rng.uniform(60, 700)) for g in frame.gpu.gpus)
        live.append(replace(frame, host=host, trainers=groups,
                            gpu=replace(frame.gpu, gpus=gpus)))
    path = tmp_path / "run.sqlite"
    writer = RecordWriter(open_record(str(path)))
    for frame in live:
        writer.write(frame)
    writer.db.close()
    recording = Replay(str(path))
    replayed = [recording.frame(i) for i in range(len(live))]
    kept = [{p.pid for p in frame.processes} for frame in replayed]
    assert all(group.pid in kept[0] for group in live[0].trainers)
    differ = [i for i, frame in enumerate(live)
              if drawn_lines(replayed[i], kept[i]) != drawn_lines(frame, kept[i])]
    assert not differ, (drawn_lines(replayed[differ[0]], kept[0]),
                        drawn_lines(live[differ[0]], kept[0]))


def test_many_cores_are_stored_as_the_glyphs_the_screen_draws(tmp_path: Path) -> None:
    """More than CORES_IN_BYTES CPUs are drawn a glyph each (eight heights, three colours):
    a nibble each keeps what the glyph tells, 101 cores across every whole percent and 64
    random ones draw the same lines replayed as live, in half the bytes."""
    rng = random.Random(16)
    base = frames("data-starved", 2)
    every = tuple(min(100.0, max(0.0, i + rng.uniform(-0.49, 0.49))) for i in range(101))
    live = [replace(base[0], host=replace(base[0].host, per_cpu_percent=every)),
            replace(base[1], host=replace(base[1].host, per_cpu_percent=tuple(
                rng.uniform(0, 100) for _ in range(64))))]
    path = tmp_path / "run.sqlite"
    writer = RecordWriter(open_record(str(path)))
    for frame in live:
        writer.write(frame)
    writer.db.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT per_cpu_percent, length(per_cpu_classes) FROM frames "
                          "ORDER BY id").fetchall() == [(None, 51), (None, 32)]
    recording = Replay(str(path))
    for index, frame in enumerate(live):
        replayed = recording.frame(index)
        kept = {p.pid for p in replayed.processes}
        assert drawn_lines(replayed, kept) == drawn_lines(frame, kept)
