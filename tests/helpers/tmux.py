"""A real terminal for tests: a detached tmux session, what it shows, and its cell styles."""

from __future__ import annotations

import atexit
import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from gputop.probe.ring import ENV_DIR
from tests.helpers.processes import children

REPO = Path(__file__).resolve().parents[2]
VENV_PYTHON = REPO / ".venv" / "bin" / "python"
PYTHON = str(VENV_PYTHON) if VENV_PYTHON.exists() else sys.executable  # what the panes run

_SGR = re.compile(r"\x1b\[([0-9;:]*)m")
_OTHER_ESCAPE = re.compile(r"\x1b(\[[0-9;?]*[A-Za-z]|\][^\x07]*\x07|[()][0-9A-Za-z])")


# A tmux server of this test run's own: other users of tmux on the box (another test run,
# a person) cannot change its options or window sizes under the tests.
SOCKET = f"gputop-tests-{os.getpid()}"


_server_started = False


def tmux(*args: str) -> str:
    """Run a tmux command on this run's server (started on first use, kept until the run
    ends: a server that exits with its last session races the next test's new one)."""
    global _server_started
    if not _server_started:
        _server_started = True
        subprocess.run(["tmux", "-L", SOCKET, "start-server", ";", "set-option", "-g",
                        "exit-empty", "off"], check=True, capture_output=True, timeout=30)
        atexit.register(_stop_server, subprocess.run(
            ["tmux", "-L", SOCKET, "display-message", "-p", "#{socket_path}"],
            capture_output=True, text=True, timeout=30).stdout.strip())
    return subprocess.run(["tmux", "-L", SOCKET, *args], check=True, capture_output=True,
                          text=True, timeout=30).stdout


def _stop_server(socket_path: str) -> None:
    """End this run's server and remove its socket (a killed server leaves the file)."""
    subprocess.run(["tmux", "-L", SOCKET, "kill-server"], capture_output=True, timeout=30)
    if socket_path:
        Path(socket_path).unlink(missing_ok=True)


@contextmanager
def session(cwd: Path, width: int = 120, height: int = 40) -> Iterator[str]:
    """A detached tmux session of `width` x `height` whose pane stays after its program exits,
    with this run's ring directory (a tmux server started elsewhere has its own environment)."""
    name = f"gputop-t-{uuid.uuid4().hex[:8]}"
    rings = os.environ.get(ENV_DIR)
    tmux("new-session", "-d", "-s", name, "-x", str(width), "-y", str(height), "-c", str(cwd),
         *(("-e", f"{ENV_DIR}={rings}") if rings else ()), "sh")
    tmux("set-option", "-t", name, "remain-on-exit", "on")
    try:
        yield name
    finally:
        subprocess.run(["tmux", "-L", SOCKET, "kill-session", "-t", name], capture_output=True,
                       timeout=30)


TTY_MODE = 'stty -a | tr " " "\\n" | grep -x -- "-*icanon"'  # "icanon": the tty is cooked again


def spawn(name: str, command: str, *, tty_mode: bool = False) -> None:
    """Run `command` under bash in the pane; bash prints EXIT=code when it ends (tmux can be
    slow to reap a dead pane on a loaded box), then with `tty_mode` the tty's icanon flag."""
    after = f"; {TTY_MODE}" if tty_mode else ""
    script = f"trap : INT; {command}; echo EXIT=$?{after}; sleep 60"
    tmux("respawn-pane", "-k", "-t", name, f"bash -c {shlex.quote(script)}")


def pane_process(name: str, marker: bytes) -> int:
    """The first process under the pane, breadth first, whose command line holds `marker`
    (a program before the ones it started)."""
    queue = [int(tmux("display-message", "-p", "-t", name, "#{pane_pid}").strip())]
    while queue:
        pid = queue.pop(0)
        try:
            if marker in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
            queue += children(pid)
        except OSError:  # gone meanwhile
            continue
    raise AssertionError(f"no {marker!r} under tmux session {name}")


def screen(name: str, *, styled: bool = False) -> str:
    """The pane's text; `styled` keeps the SGR escapes (tmux capture-pane -e)."""
    return tmux("capture-pane", "-p", *(("-e",) if styled else ()), "-t", name)


def wait_for(name: str, ok: Callable[[str], bool], timeout_s: float = 90.0) -> str:
    """The first screen `ok` accepts; fails with the last screen after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        text = screen(name)
        if ok(text):
            return text
        time.sleep(0.25)
    raise AssertionError(f"screen never matched; last screen:\n{text}")


def exit_code(name: str, timeout_s: float = 30.0) -> int:
    """The code the pane's program exited with (from bash's EXIT= line)."""
    text = wait_for(name, lambda s: "EXIT=" in s, timeout_s=timeout_s)
    line = next(line for line in text.splitlines() if line.startswith("EXIT="))
    return int(line.removeprefix("EXIT="))


class CellStyle(NamedTuple):
    """What a cell looks like: foreground, background and attribute SGR codes."""

    fg: str
    bg: str
    attrs: frozenset[int]


PLAIN = CellStyle("", "", frozenset())


def sgr_codes(styled: str) -> list[list[str]]:
    """The parameter lists of every SGR escape in a capture-pane -e text."""
    return [match.group(1).replace(":", ";").split(";") for match in _SGR.finditer(styled)]


def colour_codes(styled: str) -> list[str]:
    """Every SGR parameter that sets a colour (default colours, 39 and 49, excepted)."""
    found = []
    for params in sgr_codes(styled):
        for param in params:
            code = int(param or 0)
            if 30 <= code <= 38 or 40 <= code <= 48 or 90 <= code <= 97 or 100 <= code <= 107:
                found.append(param)
    return found


def styled_cells(line: str) -> list[tuple[str, CellStyle]]:
    """Each visible character of one capture-pane -e line with the style it is drawn in."""
    cells: list[tuple[str, CellStyle]] = []
    style = PLAIN
    pos = 0
    while pos < len(line):
        match = _SGR.match(line, pos)
        if match:
            style = _apply(style, match.group(1).replace(":", ";").split(";"))
            pos = match.end()
            continue
        other = _OTHER_ESCAPE.match(line, pos)
        if other:
            pos = other.end()
            continue
        cells.append((line[pos], style))
        pos += 1
    return cells


def style_of(styled: str, needle: str, in_line_with: str = "") -> CellStyle:
    """The style of the first character of `needle` on the first line that has it (and
    `in_line_with`)."""
    for line in styled.splitlines():
        cells = styled_cells(line)
        text = "".join(char for char, _ in cells)
        at = text.find(needle)
        if at >= 0 and in_line_with in text:
            return cells[at][1]
    raise AssertionError(f"{needle!r} is not on screen:\n{_SGR.sub('', styled)}")


def _apply(style: CellStyle, params: list[str]) -> CellStyle:
    fg, bg, attrs = style.fg, style.bg, set(style.attrs)
    codes = iter(params)
    for param in codes:
        code = int(param or 0)
        if code == 0:
            fg, bg, attrs = "", "", set()
        elif code in (38, 48):
            kind = next(codes, "")
            count = 1 if kind == "5" else 3
            value = ";".join([str(code), kind, *(next(codes, "") for _ in range(count))])
            fg, bg = (value, bg) if code == 38 else (fg, value)
        elif 30 <= code <= 37 or 90 <= code <= 97:
            fg = str(code)
        elif 40 <= code <= 47 or 100 <= code <= 107:
            bg = str(code)
        elif code == 39:
            fg = ""
        elif code == 49:
            bg = ""
        elif code == 22:
            attrs -= {1, 2}
        elif 23 <= code <= 29:
            attrs.discard(code - 20)
        else:
            attrs.add(code)
    return CellStyle(fg, bg, frozenset(attrs))
