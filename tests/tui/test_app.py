"""Pilot tests: every binding, driven through the app users run, fed recorded frames."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gputop.core.model import Frame, GpuReport
from gputop.tui import build_app
from gputop.tui.app import GputopApp
from gputop.tui.widgets.help import HelpScreen
from gputop.tui.widgets.linepane import LinePane
from gputop.tui.widgets.table import ProcessTable
from tests.helpers.spy import spy
from tests.helpers.tui import FedSampler, first_frames, frames, running, sync


def _app() -> tuple[GputopApp, FedSampler]:
    sampler = FedSampler()
    return build_app(sampler), sampler


def _pids(app: GputopApp) -> list[int]:
    return [row.process.pid for row in app.query_one(ProcessTable).rows]


def _text(app: GputopApp, pane: str) -> str:
    return app.query_one(f"#{pane}", LinePane).text


@sync
async def test_sampling_starts_before_mount_and_an_early_frame_is_shown() -> None:
    app, sampler = _app()
    assert sampler.started  # build_app starts the sampler before Textual mounts anything
    assert sampler.on_frame is not None
    sampler.on_frame(frames("compute-bound", 1)[0])  # arrives before the app runs
    async with running(app):
        assert "SIMULATED GPUs — scenario compute-bound" in _text(app, "header")
        assert 4242 in _pids(app)


def _deliver_from_a_thread(sampler: FedSampler, frame: Frame) -> None:
    """Hand `frame` to the app as the sampler thread does: from a thread of its own."""
    import threading

    assert sampler.on_frame is not None
    thread = threading.Thread(target=sampler.on_frame, args=(frame,))
    thread.start()
    thread.join()


@sync
async def test_frames_from_the_sampler_thread_are_rendered() -> None:
    app, sampler = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        _deliver_from_a_thread(sampler, frames("idle", 1)[0])
        for _ in range(20):
            await pilot.pause()
            if app.frame is not None:
                break
        assert "scenario idle" in _text(app, "header")


@sync
async def test_a_bug_drawing_a_frame_from_the_sampler_thread_ends_the_app_loudly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The frame is shown by a callback on the app's loop, not a message handler: a bug in
    it still ends the app with its traceback (exit code 1), never a frozen screen."""
    app, sampler = _app()

    def broken(frame: Frame) -> None:
        raise RuntimeError("a bug drawing the frame")

    with pytest.raises(RuntimeError, match="a bug drawing the frame"):
        async with app.run_test(size=(120, 40)) as pilot:
            monkeypatch.setattr(app, "show_frame", broken)
            _deliver_from_a_thread(sampler, frames("idle", 1)[0])
            for _ in range(20):
                await pilot.pause()
    assert app.return_code == 1


@pytest.mark.parametrize(("key", "first"), [("n", 1), ("m", 5310), ("g", 4242), ("c", 4242)])
@sync
async def test_sort_keys(key: str, first: int) -> None:
    app, _ = _app()
    async with running(app, *first_frames()) as pilot:
        await pilot.press("T", key)  # from another key, so the key sorts rather than reverses
        assert _pids(app)[0] == first
        header = app.query_one(ProcessTable).lines[0]
        assert "▼" in "".join(t for t, _ in header) or "▲" in "".join(t for t, _ in header)


@sync
async def test_same_sort_key_twice_reverses() -> None:
    app, _ = _app()
    async with running(app, *first_frames()) as pilot:
        await pilot.press("n")
        ascending = _pids(app)
        await pilot.press("n")
        top_level = [row.process.pid for row in app.query_one(ProcessTable).rows
                     if row.depth == 0]
        assert top_level[0] == max(p for p in ascending)
        assert app.state.ascending is False


@sync
async def test_filter_narrows_and_escape_clears() -> None:
    app, _ = _app()
    async with running(app, *first_frames()) as pilot:
        everything = len(_pids(app))
        await pilot.press("slash")
        await pilot.press(*"lr 3e")
        await pilot.press("enter")
        assert _pids(app) == [5310, 5322, 5321]  # the trainer matches; its workers come along
        assert app.query_one(ProcessTable).has_focus
        await pilot.press("escape")
        assert len(_pids(app)) == everything


@sync
async def test_filter_by_worker_keeps_its_trainer_row() -> None:
    app, _ = _app()
    async with running(app, *first_frames()) as pilot:
        await pilot.press("slash", *"4252", "enter")
        assert _pids(app)[0] == 4242 and 4252 in _pids(app)


@sync
async def test_space_folds_the_group_under_the_cursor_and_z_folds_all() -> None:
    app, _ = _app()
    async with running(app, *first_frames()) as pilot:
        assert _pids(app)[:4] == [4242, 4253, 4252, 4251]
        await pilot.press("space")
        assert _pids(app)[:2] == [4242, 5310]
        assert "▸" in app.query_one(ProcessTable).text
        await pilot.press("space")
        assert _pids(app)[:4] == [4242, 4253, 4252, 4251]
        await pilot.press("z")
        assert not {4251, 4252, 4253, 5321, 5322} & set(_pids(app))
        await pilot.press("z")
        assert {4251, 5321} <= set(_pids(app))


@sync
async def test_enter_attaches_a_probed_trainer_and_folds_one_without_probe() -> None:
    app, sampler = _app()
    async with running(app, *first_frames()) as pilot:
        await pilot.press("enter")  # cursor on 4242, which runs the probe
        assert sampler.attached == [4242]
        table = app.query_one(ProcessTable)
        while table.selected is not None and table.selected.process.pid != 5310:
            await pilot.press("down")
        await pilot.press("enter")
        assert sampler.attached == [4242]
        assert 5321 not in _pids(app)


@sync
async def test_o_shows_only_gpu_and_trainer_processes() -> None:
    app, _ = _app()
    async with running(app, *first_frames()) as pilot:
        await pilot.press("o")
        assert set(_pids(app)) == {4242, 4251, 4252, 4253, 5300, 5310, 5321, 5322}
        await pilot.press("o")
        assert 1 in _pids(app)


@sync
async def test_help_opens_and_closes() -> None:
    app, _ = _app()
    async with running(app, size=(100, 30)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


@sync
async def test_p_pauses_and_resumes_the_sampler() -> None:
    app, sampler = _app()
    async with running(app, *first_frames(), size=(100, 30)) as pilot:
        await pilot.press("p")
        assert sampler.paused and "PAUSED" in _text(app, "header")
        await pilot.press("p")
        assert not sampler.paused and "PAUSED" not in _text(app, "header")


@pytest.mark.parametrize("key", ["q", "ctrl+c"])
@sync
async def test_quit_keys_end_the_app(key: str) -> None:
    app, _ = _app()
    async with running(app, *first_frames(), size=(100, 30)) as pilot:
        await pilot.press(key)
        await pilot.pause()
        assert not app.is_running


def _with_busy(pid: int) -> Frame:
    """A later data-starved frame in which `pid` jumps to the top by %CPU."""
    busy = frames("data-starved", 6)[-1]
    procs = tuple(replace(p, cpu_percent=500.0) if p.pid == pid else p
                  for p in busy.processes)
    return replace(busy, processes=procs)


@sync
async def test_untouched_cursor_stays_on_the_busiest_row() -> None:
    app, _ = _app()
    async with running(app, *first_frames(), size=(100, 30)) as pilot:
        table = app.query_one(ProcessTable)
        first = table.selected
        app.show_frame(_with_busy(6200))
        await pilot.pause()
        assert first is not None and first.process.pid != 6200
        assert table.selected is not None and table.selected.process.pid == 6200
        assert table.top == 0 and _pids(app)[0] == 6200


@sync
async def test_cursor_follows_its_process_when_rows_reorder() -> None:
    app, _ = _app()
    async with running(app, *first_frames()) as pilot:
        table = app.query_one(ProcessTable)
        while table.selected is not None and table.selected.process.pid != 5310:
            await pilot.press("down")
        app.show_frame(_with_busy(6200))
        await pilot.pause()
        assert _pids(app)[0] == 6200
        assert table.selected is not None and table.selected.process.pid == 5310


@sync
async def test_cpu_only_banner_and_attached_steps_and_advice() -> None:
    app, _ = _app()
    frame = frames("data-starved", 20, attach=True, advice=True)[-1]
    cpu_only = replace(frame, gpu=GpuReport(source="none", note="libnvidia-ml.so.1 not found"))
    async with running(app, cpu_only, size=(160, 48)):
        header = _text(app, "header")
        assert "CPU-only mode — libnvidia-ml.so.1 not found" in header
        steps = _text(app, "steps")
        assert "attached 4242" in steps and "input-bound 52% of step time (high)" in steps
        assert "p95 140ms" in steps and "dropped 0" in steps and "workers 3" in steps
        advice = _text(app, "advice").splitlines()
        assert advice[0].startswith("✖ GPUs are waiting for input")  # critical before warn
        assert any(line.startswith("▲ The workers cannot keep up") for line in advice)
        assert advice[1].strip().startswith("→")


@pytest.mark.parametrize("size", [(40, 12), (80, 24), (250, 70), (55, 17)])
@sync
async def test_any_size_renders_and_keeps_pid_cpu_command(size: tuple[int, int]) -> None:
    app, _ = _app()
    async with running(app, *first_frames(attach=True, advice=True), size=size) as pilot:
        for width, height in ((40, 12), (250, 70), size):
            await pilot.resize_terminal(width, height)
            await pilot.pause()
        header = app.query_one(ProcessTable).text.splitlines()[0]
        assert "PID" in header and "%CPU" in header and "COMMAND" in header
        assert app.query_one(ProcessTable).size.height >= 3


@sync
async def test_the_periodic_full_collection_runs_and_the_app_keeps_going(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The timer that frees Textual's strip cycles fires without ending the app (it once
    crashed it 30 s after start: Textual could not count gc.collect's parameters)."""
    import gc

    import gputop.tui.app as app_module

    full: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            full.append(1)

    monkeypatch.setattr(app_module, "FULL_GC_EVERY_S", 0.02)
    gc.callbacks.append(count)
    try:
        app, sampler = _app()
        async with app.run_test(size=(120, 40)) as pilot:
            assert sampler.on_frame is not None
            sampler.on_frame(frames("compute-bound", 1)[0])
            await pilot.pause(0.3)
            assert full and app.is_running
    finally:
        gc.callbacks.remove(count)


@sync
async def test_the_startup_heap_is_frozen_after_the_first_frames() -> None:
    """The periodic full collection walks only what was made after startup (gc.freeze once,
    a few frames in), not the ~50k objects of Textual and the imports."""
    import gc

    app, _ = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        app.show_frame(frames("compute-bound", 1)[0])
        await pilot.pause()
        assert gc.get_freeze_count() == 0  # not while startup may still be importing
        for frame in frames("compute-bound", 5):
            app.show_frame(frame)
        await pilot.pause()
        assert gc.get_freeze_count() > len(gc.get_objects())


@sync
async def test_rows_never_drawn_are_not_made() -> None:
    """Thousands of processes, a screenful drawn: the table holds a Row object for the rows
    on screen at most (not one per process, each tick), with a trainer group among them."""
    import gc

    from gputop.tui.views.processes import Row
    from tests.helpers import builders

    rows, group = builders.trainer_with_workers(50_000, 4, worker_cpu=10.0)
    others = [builders.process(pid, cpu=float(pid % 7)) for pid in range(100, 3100)]
    app, _ = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        app.show_frame(builders.frame(processes=[*others, *rows], trainers=(group,)))
        await pilot.pause()
        table = app.query_one(ProcessTable)
        assert len(table.rows) == 3005
        # by exact type: isinstance asks a foreign object its __class__, and torch's
        # deprecated module attributes warn when asked (a FutureWarning in every CI log)
        made = sum(type(o) is Row for o in gc.get_objects())
        assert made <= 24
        await pilot.press("end")  # the last row, reached through the same lazy rows
        assert table.selected is not None
        assert table.selected.process.pid == table.rows[-1].process.pid


@sync
async def test_a_pane_asks_one_refresh_for_all_its_changed_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every visible row changes each tick (%CPU): one refresh call for them all, since each
    call clears the widget's caches and checks for idle again."""
    app, _ = _app()
    async with running(app, *first_frames(), size=(80, 24)):
        table = app.query_one(ProcessTable)
        calls: list[int] = []
        monkeypatch.setattr(table, "refresh", spy(
            table.refresh, lambda *regions, **kw: calls.append(len(regions))))
        table.set_lines([((f"row {i} of tick 2", "plain"),) for i in range(20)])
        assert calls == [20]


@sync
async def test_a_frame_works_out_no_key_of_the_footer_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Which keys the footer names is fixed for the app's life (a replay's, the live view's,
    `k` where signals may go): asked once, not once per key per frame."""
    app, _ = _app()
    async with running(app, *first_frames(), size=(80, 24)) as pilot:
        asked: list[str] = []
        monkeypatch.setattr(app, "check_action", spy(
            app.check_action, lambda action, parameters: asked.append(action)))
        for frame in frames("data-starved", 10)[5:]:
            app.show_frame(frame)
        await pilot.pause()
        assert asked == []


@sync
async def test_a_tick_formats_only_the_rows_that_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A quiet process keeps its sample object from tick to tick (the source hands back the
    same one): its row is not formatted again, wherever the sort moves it."""
    from gputop.tui.widgets import table as table_module
    from tests.helpers import builders

    quiet = [builders.process(pid, cpu=0.0) for pid in range(100, 140)]
    busy = [builders.process(pid, cpu=50.0 + pid) for pid in (200, 201)]
    app, _ = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        app.show_frame(builders.frame(processes=[*busy, *quiet]))
        await pilot.pause()
        formatted: list[int] = []
        monkeypatch.setattr(table_module, "row_line", spy(
            table_module.row_line, lambda row, *args: formatted.append(row.process.pid)))
        moved = [replace(busy[0], cpu_percent=1.0), busy[1]]  # now below the other
        app.show_frame(builders.frame(processes=[*moved, *quiet]))
        await pilot.pause()
        assert formatted == [200]
