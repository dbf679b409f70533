"""The plain-text first screen: a pure Frame -> ANSI paint, and the terminal it borrows."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from dataclasses import replace
from pathlib import Path

import pytest

from gputop.core.model import Frame
from gputop.tui.splash import ENTER, LEAVE, LOADING, Splash, render
from tests.helpers.spy import spy
from tests.helpers.tui import frames

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _lines(paint: str) -> list[str]:
    return ANSI.sub("", paint).split("\r\n")


def test_paint_fits_the_terminal_and_sorts_by_cpu() -> None:
    frame = frames("data-starved", count=3)[-1]
    for width, height in ((80, 24), (40, 12), (200, 60), (1, 1)):
        lines = _lines(render(frame, width, height))
        assert len(lines) <= height
        assert all(len(line) <= width for line in lines)
    lines = _lines(render(frame, 120, 40))
    assert lines[0].startswith("gputop") and LOADING in lines
    assert "SIMULATED GPUs" in lines[1]
    assert sum(line.startswith("GPU ") for line in lines) == len(frame.gpu.gpus)
    head = next(i for i, line in enumerate(lines) if "%CPU" in line)
    assert "COMMAND" in lines[head]
    cpu = [float(line.split()[2]) for line in lines[head + 1:] if line.strip()]
    assert cpu and cpu == sorted(cpu, reverse=True)
    assert len(lines) == 40  # the rows fill the screen


def test_first_sample_shows_no_cpu_rows() -> None:
    frame = frames("idle", count=1)[0]
    text = "\n".join(_lines(render(frame, 100, 30, rates=False)))
    assert "measuring %CPU" in text and "COMMAND" not in text


def test_banner_for_cpu_only_and_no_escape_from_command_lines() -> None:
    frame = frames("idle", count=2)[-1]
    evil = replace(frame.processes[0], cmdline=("x\x1b]0;owned\x07\x1b[2J",), cpu_percent=999.0)
    frame = replace(frame, gpu=replace(frame.gpu, source="none", gpus=(), note="no driver"),
                    processes=(evil, *frame.processes[1:]))
    paint = render(frame, 100, 30)
    assert "CPU-only mode — no driver" in paint
    assert "owned" in paint and "\x1b]" not in paint and "\x07" not in paint
    assert "\x1b[2J" not in paint


def test_splash_borrows_the_terminal_and_gives_it_back() -> None:
    """Echo off while it shows; the modes from before are restored or handed to the driver."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    try:
        before = termios.tcgetattr(slave)
        with os.fdopen(os.dup(slave), "w") as stream:
            splash = Splash.open(stream)
            assert splash is not None
            assert not termios.tcgetattr(slave)[3] & termios.ECHO
            splash.show(frames("idle", count=2)[-1])
            splash.stop()
            splash.show(frames("idle", count=2)[-1])  # after stop: nothing more is drawn
            splash.close()
            assert termios.tcgetattr(slave) == before
            splash = Splash.open(stream)
            assert splash is not None
            assert splash.take_over() == before
            splash.close()  # a driver took over: it restores the modes at exit, not us
            assert not termios.tcgetattr(slave)[3] & termios.ECHO
        out = b""
        while select.select([master], [], [], 0.2)[0]:
            out += os.read(master, 1 << 16)
        text = out.decode()
        first, second = text.split(LEAVE)
        assert first.startswith(ENTER) and first.count("\x1b[7mgputop") == 1
        assert second == ENTER  # taken over: left on the alternate screen for the app
    finally:
        os.close(master)
        os.close(slave)


def test_no_splash_without_a_terminal() -> None:
    with open(os.devnull, "w") as stream:
        assert Splash.open(stream) is None


def test_splash_module_loads_no_textual() -> None:
    code = "import gputop.tui.splash, sys; print(any(m.startswith('textual') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_deferred_sources_join_after_the_priming_sample() -> None:
    """The live view primes from GPUs, host and processes; the rest joins before frame one."""
    import threading

    from gputop.app.wiring import build_sampler

    sampler = build_sampler(demo="idle", membw="estimate", defer=True)
    primed = threading.Event()
    primed_pids: set[int] = set()
    frames_seen: list = []
    got = threading.Event()
    assert sampler.membw is None and sampler.attach_source is None and sampler.advisor is None

    def on_frame(frame) -> None:
        frames_seen.append(frame)
        got.set()

    try:
        def on_prime(frame) -> None:
            primed_pids.update(p.pid for p in frame.processes)
            # Joined here, on the sampler thread before its gap: from the test's thread the
            # imports raced the 0.1 s gap and lost on a loaded machine.
            sampler.add_deferred_sources()
            primed.set()

        sampler.start(on_frame, on_prime=on_prime)
        assert primed.wait(30)
        assert got.wait(30)
    finally:
        sampler.stop()
    assert frames_seen[0].memory_bandwidth is not None
    assert sampler.attach_source is not None and sampler.advisor is not None
    # Every process the priming sample saw has a %CPU (one born since may be too young).
    assert all(p.cpu_percent is not None for p in frames_seen[0].processes
               if p.in_proc and p.pid in primed_pids)


def test_after_an_early_look_the_first_frame_needs_no_priming_sample(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The live view looks at the host and the processes before NVML and the UI load: its
    first frame is the first sample (no priming sample, no gap after it), with rates."""
    import threading

    from gputop.app.wiring import build_sampler

    sampler = build_sampler(demo="idle", defer=True, early=True)
    samples: list[int] = []
    monkeypatch.setattr(sampler, "sample", spy(sampler.sample, lambda: samples.append(1)))
    primed: list[object] = []
    frames_seen: list[Frame] = []
    got = threading.Event()

    def on_frame(frame: Frame) -> None:
        frames_seen.append(frame)
        got.set()

    try:
        sampler.start(on_frame, on_prime=primed.append)
        assert got.wait(30)
    finally:
        sampler.stop()
    assert (len(samples), primed) == (1, [])
    assert frames_seen[0].host.cpu_percent is not None
    assert sum(p.cpu_percent is not None for p in frames_seen[0].processes) > 1


def test_deferring_loads_neither_membw_nor_advice() -> None:
    code = ("import sys; from gputop.app.wiring import build_sampler; "
            "s = build_sampler(demo='idle', defer=True); s.sample(); "
            "print(sorted(m for m in ('gputop.advice', 'gputop.sources.membw', "
            "'gputop.sources.attach') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_live_view_loads_no_recorder_nor_simulated_gpus_on_the_way_to_its_first_frame(
) -> None:
    """Without --record nothing of the recorder (SQLite schema, rings, probe) is imported on
    the way to the first frame (it took as long as every source's module together), nor
    the simulated GPUs without --demo."""
    code = ("import sys, gputop.app.live as live, gputop.app.wiring as wiring\n"
            "def run_live(**kw):\n"
            "    wiring.build_sampler(defer=True)\n"
            "    print(sorted(m for m in ('gputop.recording.writer_thread',\n"
            "                         'gputop.sources.simulated')\n"
            "                 if m in sys.modules))\n"
            "live.run_live = run_live\n"
            "import gputop.app.options as options\n"
            "options.need_terminal = lambda *words: None\n"  # no terminal here
            "from gputop.app.cli import main\n"
            "main([])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=60)
    assert out.stdout.strip() == "[]"


ROWS_FIRST = r"""
import os, pty, sys, threading, time
from gputop.tui import build_app
from gputop.tui.splash import Splash
from tests.helpers.tui import frames

order = []


class SeesTextual:
    def find_spec(self, name, path=None, target=None):
        if name == "textual" and "textual" not in order:
            order.append("textual")
        return None


class Sampler:
    paused = False

    def __init__(self):
        self.deferred = threading.Event()

    def start(self, on_frame, *, on_prime=None):
        shown = frames("idle", count=2)
        on_prime(shown[0])

        def first_rates():  # as the real sampler: a gap after the deferred sources joined
            self.deferred.wait(30)
            time.sleep(0.2)
            order.append("rows")
            on_frame(shown[1])

        threading.Thread(target=first_rates, daemon=True).start()

    def add_deferred_sources(self):
        self.deferred.set()

    def stop(self): pass
    def set_paused(self, paused): pass
    def attach(self, pid): pass
    def detach(self, pid): pass


sys.meta_path.insert(0, SeesTextual())
master, slave = pty.openpty()
with os.fdopen(os.dup(slave), "w") as stream:
    splash = Splash.open(stream)
    build_app(Sampler(), splash=splash)
    splash.close()
print(" ".join(order))
"""


def test_textual_is_imported_after_the_first_rows_are_painted() -> None:
    """The sample behind the first %CPU rows is not measured while Textual imports (they
    share the GIL, and that sample took several times as long): the app waits for those
    rows, at most ROWS_WAIT_S, before it imports Textual."""
    out = subprocess.run([sys.executable, "-c", ROWS_FIRST], capture_output=True, text=True,
                         check=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.split() == ["rows", "textual"]


ATTACH_FIRST_ROWS = r"""
import os, pty, sys
from gputop.tui import build_app
from gputop.tui.splash import Splash
from gputop.app.wiring import build_sampler

DEFERRED = ("gputop.advice", "gputop.sources.attach", "gputop.sources.membw")
real_show = Splash.show


def show(self, frame, *, rates=True):
    real_show(self, frame, rates=rates)
    if rates:
        print(sorted(m for m in DEFERRED if m in sys.modules), flush=True)
        os._exit(0)


Splash.show = show
master, slave = pty.openpty()
with os.fdopen(os.dup(slave), "w") as stream:
    splash = Splash.open(stream)
    build_app(build_sampler(demo="idle", defer=True, early=True), attach_pid=os.getpid(),
              splash=splash)
"""


def test_attaching_holds_up_no_first_rows_with_the_deferred_sources_imports() -> None:
    """`gputop --demo`, `--attach` and `gputop run` paint their first rows before memory
    bandwidth, the rings and the advice are imported (~40 ms of CPU); the attach waits for
    them."""
    out = subprocess.run([sys.executable, "-c", ATTACH_FIRST_ROWS], capture_output=True,
                         text=True, check=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]"
