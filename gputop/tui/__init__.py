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
    """The app users run. Sampling starts first, so Textual loads while frame one is measured.

    `attach_pid` (or else the demo trainer) is attached now if its ring exists, otherwise
    as soon as a frame shows it with a probe.
    """
    from gputop.tui.slot import FrameSlot

    slot = FrameSlot()
    pending = attach_pid if attach_pid is not None else (demo.pid if demo else None)
    if start:
        pending = _attach_now(sampler, pending)
        sampler.start(slot.put)
    from gputop.tui.app import GputopApp
    from gputop.tui.driver import QuietLinuxDriver

    return GputopApp(sampler, attach_pid=pending, demo=demo, slot=slot,
                     driver_class=QuietLinuxDriver)


def _attach_now(sampler: FrameFeed, pid: int | None) -> int | None:
    """Attach to `pid` now; return it when that has to wait for its ring to appear."""
    if pid is None:
        return None
    try:
        sampler.attach(pid)
    except (ValueError, OSError):
        return pid
    return None


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
