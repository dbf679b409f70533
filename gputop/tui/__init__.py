"""The live TUI. Importing this package is cheap; Textual loads only when an app is built."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from textual.theme import Theme

    from gputop.core.model import Frame
    from gputop.tui.app import GputopApp
    from gputop.tui.feeds import FrameFeed
    from gputop.tui.modes import Command, Signaller
    from gputop.tui.splash import Splash
    from gputop.tui.terminal_caps import TerminalCaps

__all__ = ["build_app", "run_tui"]

SPLASH_WAIT_S = 0.5  # at most this long for the splash's first paint before importing Textual
ROWS_WAIT_S = 0.5  # and at most this long for its rows (the first %CPU), after the sources
ANSI_THEME = "gputop-ansi"  # the terminal's own palette: for NO_COLOR and 8/16 colours


def build_app(
    sampler: FrameFeed,
    *,
    attach_pid: int | None = None,
    start: bool = True,
    splash: Splash | None = None,
    command: Command | None = None,
    look: TerminalCaps | None = None,
    signaller: Signaller | None = None,
) -> GputopApp:
    """The app users run. Sampling starts first, so Textual loads while frame one is measured.

    `attach_pid` is attached from the first tick on (its rings are read as they appear).
    A `splash` shows the frames until the app draws; its driver takes the terminal over.
    `command` is `gputop run`'s: q asks before leaving it, Ctrl-C is forwarded to it.
    `look` is the terminal's (see gputop.tui.terminal_caps); by default Unicode in full colour.
    `signaller` lets `k` send signals (gputop.app.signalling's); without one the app is read-only.
    """
    from gputop.tui.slot import FrameSlot

    slot = FrameSlot()
    pending = attach_pid
    if start:
        if splash is None:
            sampler.add_deferred_sources()  # attach first, so the first frame has steps
        # With a splash, an attach waits for the deferred sources (their import would hold
        # the first paint up), which join after it and tick again at once with the steps.
        pending = _attach_now(sampler, pending)
        if splash is None:
            sampler.start(slot.put)
        else:
            sampler.start(_splash_then(slot.put, splash),
                          on_prime=lambda frame: splash.show(frame, rates=False))
            splash.wait_painted(SPLASH_WAIT_S)
            sampler.add_deferred_sources()  # while the first real frame is measured
            splash.wait_rows_painted(ROWS_WAIT_S)
    _import_asyncio_without_tls()
    from gputop.tui.app import GputopApp
    from gputop.tui.driver import QuietLinuxDriver
    from gputop.tui.terminal_caps import PLAIN

    look = look or PLAIN
    app = GputopApp(sampler, attach_pid=pending, slot=slot, command=command,
                    signaller=signaller, driver_class=QuietLinuxDriver,
                    ansi_color=True if look.ansi else None)
    app.splash = splash
    app.look = look
    if look.ansi:  # with NO_COLOR set, Textual then drops every colour (its NoColor filter)
        app.register_theme(ansi_theme())
        app.theme = ANSI_THEME
    if look.mono:
        app.add_class("-mono")  # gputop.tcss: attributes stand in for colours
    return app


def _import_asyncio_without_tls() -> None:
    """Import asyncio (Textual's loop) with its TLS support left out: the app's loop never
    speaks TLS, and asyncio's eager `import ssl` maps OpenSSL for nothing (4.2 MiB resident,
    ~17 ms at start). `ssl` is refused for this import only: the exporter's TLS and the
    fleet's HTTPS import it on their own, before the app or after this."""
    if "asyncio" in sys.modules or "ssl" in sys.modules:
        return
    sys.modules["ssl"] = None  # type: ignore[assignment]  # `import ssl` raises ImportError
    try:
        import asyncio  # noqa: F401
    finally:
        del sys.modules["ssl"]


def ansi_theme() -> Theme:
    """Textual's ANSI theme with an accent of its own (magenta, apart from success's green)."""
    from dataclasses import replace

    from textual.theme import BUILTIN_THEMES

    return replace(BUILTIN_THEMES["ansi-dark"], name=ANSI_THEME, accent="ansi_magenta")


def _splash_then(deliver: Callable[[Frame], None], splash: Splash) -> Callable[[Frame], None]:
    """Paint each frame on the splash (until the app draws), then hand it to the app."""

    def on_frame(frame: Frame) -> None:
        splash.show(frame)
        deliver(frame)

    return on_frame


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
    sampler: FrameFeed, *, attach_pid: int | None = None, command: Command | None = None,
    on_exit: Callable[[Frame], None] | None = None, ascii: bool = False,
    signaller: Signaller | None = None, splash: bool = True,
) -> int:
    """Run the TUI until q, Ctrl-C, SIGHUP or SIGTERM, then stop the sampler.

    On a terminal a plain-text splash shows the first frames while Textual imports; Ctrl-C,
    SIGHUP or SIGTERM before the app is up end the run as q would, with the terminal restored.
    `on_exit` gets the last frame with the advice then on screen, once the terminal is back.
    `ascii` draws with ASCII only (as does a locale that is not UTF-8).
    `signaller` lets `k` send signals; None (--readonly) turns `k` off.
    `splash`: False for feeds with nothing to show before the app draws (the fleet).
    """
    from gputop.tui.splash import Splash
    from gputop.tui.terminal_caps import terminal_caps_of

    look = terminal_caps_of(ascii=ascii)
    opened = Splash.open(look=look) if splash else None
    failed = False
    try:
        try:
            app = build_app(sampler, attach_pid=attach_pid, splash=opened, command=command,
                            look=look, signaller=signaller)
            if opened is not None:
                opened.stop()
            failed = True
            app.run()
            failed = False
        except KeyboardInterrupt:  # Ctrl-C before the app reads keys: quit, as it would then
            return 0
    finally:
        if opened is not None:
            opened.close(failed=failed)
        sampler.stop()
    final = app.summary_frame()
    if on_exit is not None and final is not None:
        on_exit(final)
    return app.return_code or 0
