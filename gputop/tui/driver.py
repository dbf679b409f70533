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

import contextlib
import io
import os
import selectors
import sys
import threading
from codecs import getincrementaldecoder
from typing import Any

from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.drivers._writer_thread import WriterThread
from textual.drivers.linux_driver import LinuxDriver

from gputop.tui.cells import ascii_cells
from gputop.tui.look import PLAIN, Look
from gputop.tui.splash import terminal_stream


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


def screen_file(look: Look) -> io.TextIOWrapper:
    """The terminal as a text file for Textual's writer thread; stderr if there is none."""
    stream = terminal_stream()
    if stream is None:
        return sys.__stderr__  # type: ignore[return-value]  # Textual's own choice
    raw = io.BufferedWriter(io.FileIO(stream.fileno(), "w", closefd=False))
    if look.ascii:
        return _AsciiScreen(raw, encoding="ascii", errors="replace")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace")


class DirectWriter(WriterThread):
    """Textual's writer thread, writing on the caller's thread instead (it is never
    started): a frame a second is a few KiB, and handing it over cost a wake-up of the
    writer and a pass of the GIL between the two threads each frame."""

    def write(self, text: str) -> None:
        """Write `text` to the terminal now; a terminal that hung up takes nothing (the input
        thread sees the hang-up and ends the app)."""
        with contextlib.suppress(OSError, ValueError):
            self._file.write(text)
            self._file.flush()

    def flush(self) -> None:
        """Nothing is held back."""

    def stop(self) -> None:
        """Nothing runs to stop."""


class QuietLinuxDriver(LinuxDriver):
    """LinuxDriver with an input thread that does not poll, drawing on the terminal."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        look = getattr(self._app, "look", None)
        self._screen = screen_file(look if isinstance(look, Look) else PLAIN)
        self._file = self._screen
        # The app's size until the first resize event arrives: Textual would take it from
        # COLUMNS and LINES where they are set, and lay out the first frame at theirs.
        if self._size is None:
            self._size = self._get_terminal_size()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self.exit_event: _WakingEvent = _WakingEvent(self._wake_w)

    def start_application_mode(self) -> None:
        """Start as usual; after a splash, restore the modes from before it at exit."""
        super().start_application_mode()
        started = self._writer_thread
        if started is not None:  # it wrote the modes set so far: let it finish, then end it
            started.stop()
        self._writer_thread = DirectWriter(self._screen)
        splash = getattr(self._app, "splash", None)
        if splash is not None:
            self.attrs_before = splash.take_over()

    def run_input_thread(self) -> None:
        """Wait for input and dispatch events; no periodic wake-ups."""
        self._drain_wake()
        selector = selectors.DefaultSelector()
        selector.register(self.fileno, selectors.EVENT_READ)
        selector.register(self._wake_r, selectors.EVENT_READ)
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode
        try:
            while not self.exit_event.is_set():
                ready = selector.select(self._parser_timeout(parser))
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
        loop = getattr(self._app, "_loop", None)
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._app.exit)

    def _get_terminal_size(self) -> tuple[int, int]:
        """The size of the terminal we draw on (stdout may be a file)."""
        try:
            columns, lines = os.get_terminal_size(self._screen.fileno())
        except (OSError, ValueError):
            return super()._get_terminal_size()
        return columns or 80, lines or 25

    def close(self) -> None:
        """Stop the writer and release the wake pipe and our handle on the terminal."""
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

    @staticmethod
    def _parser_timeout(parser: XTermParser) -> float | None:
        """None (block) unless the parser holds a partial sequence it must time out."""
        deadline = getattr(parser, "_timeout_time", None)
        if deadline is None:
            return None
        return max(0.0, deadline - get_time())
