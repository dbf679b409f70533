"""A recorder that fails shows one line in the live view, as a failing source does."""

from __future__ import annotations

from dataclasses import replace

from gputop.core.model import SourceError
from gputop.tui import build_app
from gputop.tui.widgets.linepane import LinePane
from tests.helpers.tui import FedSampler, frames, sync


@sync
async def test_a_stopped_recording_is_one_line_in_the_header() -> None:
    app = build_app(FedSampler())
    stopped = SourceError("record", "database or disk is full (run.sqlite); 812 ticks "
                          "recorded before it", 1, 0.0, None, stopped=True)
    async with app.run_test(size=(120, 40)) as pilot:
        frame = frames("idle", 1)[0]
        app.show_frame(replace(frame, errors=(stopped,)))
        await pilot.pause()
        header = app.query_one("#header", LinePane).text
        assert ("record stopped: database or disk is full (run.sqlite); 812 ticks recorded "
                "before it") in header
        assert app.query_one("#procs").display  # the monitor goes on
