"""The live TUI. Importing this package is cheap; Textual loads only when an app is built."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gputop.tui.app import FrameFeed, GputopApp
    from gputop.tui.demo import DemoTrainer

__all__ = ["build_app", "run_tui"]


def build_app(
    sampler: FrameFeed,
    *,
    attach_pid: int | None = None,
    demo: DemoTrainer | None = None,
    start: bool = True,
) -> GputopApp:
    """The app users run: sampling starts here, before Textual mounts, for an early first frame."""
    from gputop.tui.app import GputopApp
    from gputop.tui.driver import QuietLinuxDriver

    app = GputopApp(sampler, attach_pid=attach_pid, demo=demo, driver_class=QuietLinuxDriver)
    if start:
        app.start_sampling()
    return app


def run_tui(
    sampler: FrameFeed, *, attach_pid: int | None = None, demo: DemoTrainer | None = None
) -> int:
    """Run the TUI until q, Ctrl-C, SIGHUP or SIGTERM; stop the sampler and any demo trainer."""
    app = build_app(sampler, attach_pid=attach_pid, demo=demo)
    try:
        app.run()
    finally:
        sampler.stop()
        if demo is not None:
            demo.stop()
    return app.return_code or 0
