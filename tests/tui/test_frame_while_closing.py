"""A frame that arrives while the app closes its screens is dropped. Seen live: a terminal
killed under a running gputop left it showing a frame on an emptied screen stack; the
ScreenStackError went to Textual's fatal-error page, which renders every local of the
traceback (frames of hundreds of rows), once a tick: 73 % of a CPU and 740 MB after 15
minutes, and the process never ended."""

from __future__ import annotations

import asyncio

from gputop.tui import build_app
from tests.helpers.tui import FedSampler, frames, running, sync


@sync
async def test_a_frame_parked_after_the_screens_closed_is_dropped_and_the_app_ends_cleanly(
) -> None:
    later = frames("data-starved", 7)
    app = build_app(FedSampler())
    arrived: list[bool] = []
    async with running(app, *later[:5]):
        close_all = app._close_all

        async def close_all_then_a_frame() -> None:
            await close_all()  # every screen closed, the stack empty; the app's queue not yet
            for frame in later[5:]:
                app.slot.put(frame)  # the sampler thread's hand-off, a tick apart
                arrived.append(bool(app._screen_stack))
                await asyncio.sleep(0.02)  # the loop runs its callbacks meanwhile

        app._close_all = close_all_then_a_frame  # type: ignore[method-assign]
        app.exit()
    assert arrived == [False, False], "no frame arrived after the screens closed"
    assert app._exception is None, f"the app failed as it closed: {app._exception!r}"
    assert app.return_code == 0
    assert not app._exit_renderables
