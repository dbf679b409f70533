"""The first screen, drawn with plain ANSI text while Textual loads (stdlib only, no Textual).

Textual takes about half a second to import; the sampler's first Frame is ready long
before. `render` turns a Frame into one full-screen paint; `Splash` owns the terminal
until the app's driver takes it over: alternate screen, hidden cursor, no echo. It draws
on the terminal (`terminal_stream`), in the terminal's `TerminalCaps`: ASCII, or no colour.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import termios
import threading
import tty
from types import FrameType
from typing import Any

from gputop.core import fmt
from gputop.core.model import Frame, GpuSample, ProcessSample
from gputop.tui.cells import ascii_cells
from gputop.tui.terminal_caps import PLAIN, TerminalCaps

ENTER = "\x1b[?1049h\x1b[?25l\x1b[?7l"  # alternate screen, no cursor, no autowrap (Textual
LEAVE = "\x1b[?7h\x1b[?1049l\x1b[?25h"  # sets the same and restores wrapping at its exit)
LOADING = "starting the full view…"
_BOLD, _REVERSE, _YELLOW, _DIM, _RESET = "\x1b[1m", "\x1b[7m", "\x1b[33m", "\x1b[2m", "\x1b[0m"
_UNPRINTABLE = dict.fromkeys([*range(32), 127, *range(0x80, 0xA0)], " ")


def terminal_stream() -> Any:
    """Where the screen goes: stdout when it is a terminal, else stderr when that is one
    (`gputop 2>err.log` and `gputop >out.txt` both still draw on the terminal); else None."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None and os.isatty(stream.fileno()):
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    return None


def render(frame: Frame, width: int, height: int, *, rates: bool = True,
           look: TerminalCaps = PLAIN) -> str:
    """One full-screen paint of `frame`; without `rates` (a first sample) no %CPU is shown."""
    width, height = max(width, 1), max(height, 1)
    lines: list[tuple[str, str]] = [(_header(frame), _REVERSE)]
    banner = fmt.gpu_banner(frame.gpu)
    if banner:
        lines.append((f" {banner}", _BOLD + _REVERSE if look.mono else _YELLOW))
    lines += [(_gpu_line(g), "") for g in frame.gpu.gpus]
    lines.append((LOADING, _DIM))
    room = height - len(lines) - 1
    if rates:
        rows = sorted(frame.processes, key=lambda p: p.cpu_percent or 0.0, reverse=True)
        lines.append((f"{'PID':>7} {'USER':<9} {'%CPU':>6} {'THR':>4} {'RSS':>10}  COMMAND",
                      _BOLD))
        lines += [(_process_line(p), "") for p in rows[:max(room, 0)]]
    else:
        lines.append((f"{len(frame.processes)} processes; measuring %CPU…", _DIM))
    out = ["\x1b[H"]
    for text, style in lines[:height]:
        cut = text.translate(_UNPRINTABLE)[:width]
        if look.ascii:
            cut = ascii_cells(cut)
        out.append(f"{style}{cut}{_RESET if style else ''}\x1b[K\r\n")
    out[-1] = out[-1].removesuffix("\r\n")
    out.append("\x1b[J")
    return "".join(out)


def _header(frame: Frame) -> str:
    host = frame.host
    mem_used = host.memory_total_bytes - host.memory_available_bytes
    load = " ".join(f"{value:.2f}" for value in host.load_average)
    return (f"gputop  {host.hostname}  CPU {fmt.percent(host.cpu_percent)} of {host.cpu_count}"
            f"  mem {fmt.size(mem_used)}/{fmt.size(host.memory_total_bytes)}  load {load}")


def _gpu_line(g: GpuSample) -> str:
    if g.lost:
        return f"GPU {g.index} {g.name}  LOST"
    memory = f"{fmt.size(g.memory_used_bytes)}/{fmt.size(g.memory_total_bytes)}"
    temp = fmt.NA if g.temperature_c is None else f"{g.temperature_c:.0f}C"
    power = fmt.NA if g.power_w is None else f"{g.power_w:.0f}W"
    return (f"GPU {g.index} {g.name:<24} util {fmt.percent(g.util_percent):>4}"
            f"  mem {memory}  {temp}  {power}")


def _process_line(p: ProcessSample) -> str:
    cpu = fmt.NA if p.cpu_percent is None else f"{p.cpu_percent:.1f}"
    threads = fmt.NA if p.num_threads is None else str(p.num_threads)
    command = " ".join(p.cmdline) if p.cmdline else f"[{p.name}]"
    return (f"{p.pid:>7} {(p.username or '—')[:9]:<9} {cpu:>6} {threads:>4} "
            f"{fmt.size(p.rss_bytes):>10}  {command}")


class Splash:
    """Owns the terminal from the first Frame until Textual's driver takes it over.

    `open` switches to the alternate screen and turns echo, line editing and Ctrl-C as a
    signal off (Ctrl-C then reaches the app as a key; SIGTERM and SIGHUP still interrupt
    until the app installs its own handlers); `stop`
    ends painting; `take_over` hands the saved terminal modes to the driver, which
    restores them at exit; `close` puts everything back unless the driver did.
    """

    def __init__(self, fd: int, attrs: list[Any], look: TerminalCaps = PLAIN) -> None:
        self._fd = fd
        self._attrs = attrs
        self._look = look
        self._lock = threading.Lock()
        self._painting = True
        self._painted = threading.Event()
        self._rows_painted = threading.Event()
        self._taken = False
        self._closed = False
        self._signals: dict[int, Any] = {}

    @classmethod
    def open(cls, stream: Any = None, look: TerminalCaps = PLAIN) -> Splash | None:
        """A splash on `stream` (the terminal_stream) when it is a terminal, else None."""
        stream = terminal_stream() if stream is None else stream
        try:
            fd = stream.fileno()
            if not os.isatty(fd) or os.environ.get("TERM", "dumb") == "dumb":
                return None
            attrs = termios.tcgetattr(fd)
        except (AttributeError, OSError, ValueError, termios.error):
            return None
        splash = cls(fd, attrs, look)
        try:
            mode = termios.tcgetattr(fd)
            mode[tty.IFLAG] &= ~termios.IXON  # Ctrl-S must not stall a paint (and our stop)
            # No ISIG: a Ctrl-C typed now waits in the input queue as a key and the app
            # quits on it once it reads input, instead of interrupting start-up halfway.
            mode[tty.LFLAG] &= ~(termios.ECHO | termios.ICANON | termios.ISIG)
            mode[tty.CC][termios.VMIN], mode[tty.CC][termios.VTIME] = 1, 0
            termios.tcsetattr(fd, termios.TCSANOW, mode)
            splash._write(ENTER)
            splash._trap_signals()
        except BaseException:
            splash.close()
            raise
        return splash

    def show(self, frame: Frame, *, rates: bool = True) -> None:
        """Paint `frame` unless painting has stopped (called on the sampler thread)."""
        with self._lock:
            if not self._painting:
                return
            try:
                width, height = os.get_terminal_size(self._fd)
                self._write(render(frame, width, height, rates=rates, look=self._look))
            except OSError:
                self._painting = False
        self._painted.set()
        if rates:
            self._rows_painted.set()

    def wait_painted(self, timeout_s: float) -> None:
        """Wait until the first paint is out, so importing Textual does not hold it up (GIL)."""
        self._painted.wait(timeout_s)

    def wait_rows_painted(self, timeout_s: float) -> None:
        """Wait until processes sorted by %CPU are out: the sample behind them, measured
        while Textual imports, took several times as long (both want the GIL)."""
        self._rows_painted.wait(timeout_s)

    def stop(self) -> None:
        """Paint no more: Textual is about to draw."""
        with self._lock:
            self._painting = False

    def take_over(self) -> list[Any]:
        """The terminal modes from before the splash, for the driver that now owns the tty."""
        self._taken = True
        return self._attrs

    def close(self, *, failed: bool = False) -> None:
        """Give the signals back and restore the terminal, unless a driver took it over and
        the app ended normally (the driver restores it then)."""
        self.stop()
        self._restore_signals()
        if self._closed or (self._taken and not failed):
            return
        self._closed = True
        with contextlib.suppress(OSError, termios.error):
            termios.tcsetattr(self._fd, termios.TCSANOW, self._attrs)
        with contextlib.suppress(OSError):
            self._write(LEAVE)

    def _write(self, text: str) -> None:
        data = text.encode("utf-8", "replace")
        while data:
            data = data[os.write(self._fd, data):]

    def _trap_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self._signals[sig] = signal.signal(sig, _interrupt)

    def _restore_signals(self) -> None:
        signals, self._signals = self._signals, {}
        for sig, handler in signals.items():
            signal.signal(sig, handler)


def _interrupt(_signum: int, _frame: FrameType | None) -> None:
    """SIGTERM or SIGHUP before the app is up: unwind like Ctrl-C, restoring the terminal."""
    raise KeyboardInterrupt
