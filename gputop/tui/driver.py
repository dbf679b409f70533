"""A Linux driver whose input thread sleeps in select() until a key arrives or the app exits.

Textual's stock input loop wakes ten times a second to poll; at a 1 Hz refresh those
wake-ups cost more CPU than drawing. Here select() blocks with no timeout on the
terminal and on a pipe that the exit event writes to; a timeout is used only while the
key parser waits to tell a lone Escape from the start of a sequence.

It draws on the terminal, not on stderr as Textual's driver does: `gputop 2>err.log`
keeps the screen on the terminal and the file free of it. In an ASCII look every glyph
is swapped for an ASCII one, cell for cell, on its way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import selectors
import sys
import threading
from codecs import getincrementaldecoder
from typing import TYPE_CHECKING, Any

from gputop.tui.cells import ascii_cells
from gputop.tui.splash import terminal_stream
from gputop.tui.terminal_caps import PLAIN, TerminalCaps
from gputop.tui.textual_adapter import LinuxDriverHooks, XTermParser, parser_timeout

if TYPE_CHECKING:
    from textual.app import App


class _WakingEvent(threading.Event):
    """An Event that also writes a byte to a pipe when set, waking a select()."""

    def __init__(self, wake_fd: int) -> None:
        super().__init__()
        self._wake_fd = wake_fd

    def set(self) -> None:
        super().set()
        if self._wake_fd >= 0:
            with contextlib.suppress(OSError):
                os.write(self._wake_fd, b"x")

    def detach(self) -> None:
        """Forget the pipe (it is being closed; its fd number may be reused)."""
        self._wake_fd = -1


class _AsciiScreen(io.TextIOWrapper):
    """The terminal for an ASCII look: each glyph leaves as its ASCII stand-in."""

    def write(self, text: str) -> int:
        """Write `text` with ASCII look-alikes for every other character."""
        return super().write(ascii_cells(text))


def screen_file(look: TerminalCaps) -> io.TextIOWrapper:
    """The terminal as a text file to draw on; stderr (Textual's choice) if there is none."""
    stream = terminal_stream()
    if stream is None:
        return sys.__stderr__  # type: ignore[return-value]  # Textual's own choice
    raw = io.BufferedWriter(io.FileIO(stream.fileno(), "w", closefd=False))
    if look.ascii:
        return _AsciiScreen(raw, encoding="ascii", errors="replace")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace")


class QuietLinuxDriver(LinuxDriverHooks):
    """LinuxDriver with an input thread that does not poll, drawing on the terminal.

    It writes on the caller's thread, not through Textual's writer thread: a frame a second
    is a few KiB, and handing it over cost a wake-up of the writer and a pass of the GIL
    between the two threads each frame.
    """

    def __init__(self, app: App[Any], *, debug: bool = False, mouse: bool = True,
                 size: tuple[int, int] | None = None) -> None:
        self._gputop_app = app
        self._app_loop = asyncio.get_running_loop()
        self._debug_keys = debug
        look = getattr(app, "look", None)
        self._screen = screen_file(look if isinstance(look, TerminalCaps) else PLAIN)
        # The app's size until the first resize event arrives: Textual would take it from
        # COLUMNS and LINES where they are set, and lay out the first frame at theirs.
        if size is None:
            size = self.terminal_size()
        super().__init__(app, debug=debug, mouse=mouse, size=size)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self.exit_event: _WakingEvent = _WakingEvent(self._wake_w)

    def write(self, data: str) -> None:
        """Write `data` to the terminal now; a terminal that hung up takes nothing (the input
        thread sees the hang-up and ends the app)."""
        with contextlib.suppress(OSError, ValueError):
            self._screen.write(data)
            self._screen.flush()

    def start_application_mode(self) -> None:
        """Start as usual; after a splash, restore the modes from before it at exit."""
        super().start_application_mode()
        self.retire_stock_writer()
        splash = getattr(self._gputop_app, "splash", None)
        if splash is not None:
            self.attrs_before = splash.take_over()

    def run_input_thread(self) -> None:
        """Wait for input and dispatch events; no periodic wake-ups."""
        self._drain_wake()
        selector = selectors.DefaultSelector()
        selector.register(self.fileno, selectors.EVENT_READ)
        selector.register(self._wake_r, selectors.EVENT_READ)
        parser = XTermParser(self._debug_keys)
        decode = getincrementaldecoder("utf-8")().decode
        try:
            while not self.exit_event.is_set():
                ready = selector.select(parser_timeout(parser))
                for key, _mask in ready:
                    if key.fd != self.fileno:
                        continue
                    try:
                        raw = os.read(self.fileno, 4096)
                    except OSError:
                        raw = b""
                    if not raw:  # the terminal hung up (SSH drop, tmux pane killed)
                        self._hang_up()
                        return
                    data = decode(raw)
                    for event in parser.feed(data):
                        self.process_message(event)
                for event in parser.tick():
                    self.process_message(event)
        finally:
            selector.close()
            self._drain_wake()

    def _hang_up(self) -> None:
        """Ask the app to exit cleanly from its own loop; never block this thread on it."""
        if not self._app_loop.is_closed():
            self._app_loop.call_soon_threadsafe(self._gputop_app.exit)

    def terminal_size(self) -> tuple[int, int]:
        """The size of the terminal we draw on (stdout may be a file)."""
        try:
            columns, lines = os.get_terminal_size(self._screen.fileno())
        except (OSError, ValueError):
            return super().terminal_size()
        return columns or 80, lines or 25

    def close(self) -> None:
        """Close as LinuxDriver does, then release the wake pipe and our handle on the terminal."""
        super().close()
        if self._screen is not sys.__stderr__:
            with contextlib.suppress(OSError, ValueError):
                self._screen.close()
        self.exit_event.detach()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 512):
                pass
        except OSError:
            pass
