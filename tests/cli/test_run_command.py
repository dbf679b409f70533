"""`gputop run`'s command as real processes: its own session, stop (SIGINT first), detach."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.app.children import RunCommand, start_under_probe

pytestmark = pytest.mark.slow

SAVES_ON_CTRL_C = """
import sys, time
from pathlib import Path
interrupts = 0
def count(signum, frame):
    global interrupts
    interrupts += 1
    if interrupts == 1:
        raise KeyboardInterrupt
import signal
signal.signal(signal.SIGINT, count)
try:
    print('ready', flush=True)
    while True:
        time.sleep(0.05)
except KeyboardInterrupt:
    time.sleep(1.0)  # room for a second SIGINT, had one been sent
    Path(sys.argv[1]).write_text(f'saved after {interrupts} SIGINT')
    sys.exit(7)
"""

IGNORES_CTRL_C = """
import signal, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
print('ready', flush=True)
while True:
    time.sleep(0.05)
"""


def _ready(code: str, *args: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    return proc


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_a_command_with_a_log_runs_in_a_session_of_its_own(
        tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    """So the terminal's hang-up (and its Ctrl-C) reach gputop, which decides, not the job."""
    child = start_under_probe([sys.executable, "-c", "import time; time.sleep(60)"],
                              log=str(tmp_path / "run.log"), forward_sigint=False)
    procs.append(child)
    assert os.getsid(child.pid) == child.pid != os.getsid(0)


def test_stop_sends_sigint_once_and_finish_waits_for_the_handler(
        tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    mark = tmp_path / "saved"
    command = RunCommand(_ready(SAVES_ON_CTRL_C, str(mark)))
    procs.append(command.process)
    command.stop()
    assert command.finish(grace_s=60) == 7
    assert mark.read_text() == "saved after 1 SIGINT"


def test_finish_stops_a_running_command_with_sigint_first(
        tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    mark = tmp_path / "saved"
    command = RunCommand(_ready(SAVES_ON_CTRL_C, str(mark)))
    procs.append(command.process)
    assert command.finish(grace_s=60) == 7
    assert mark.read_text() == "saved after 1 SIGINT"


def test_finish_sends_sigterm_after_the_grace_period(
        procs: list[subprocess.Popen[bytes]]) -> None:
    command = RunCommand(_ready(IGNORES_CTRL_C))
    procs.append(command.process)
    assert command.finish(grace_s=0.2) == 128 + signal.SIGTERM


def test_finish_leaves_a_detached_command_running(
        procs: list[subprocess.Popen[bytes]]) -> None:
    command = RunCommand(_ready(IGNORES_CTRL_C))
    procs.append(command.process)
    command.detach()
    assert command.finish(grace_s=0.2) is None
    assert command.running()


def test_a_command_that_ended_reports_its_code(procs: list[subprocess.Popen[bytes]]) -> None:
    command = RunCommand(subprocess.Popen([sys.executable, "-c", "raise SystemExit(4)"]))
    procs.append(command.process)
    command.process.wait(timeout=30)
    command.detach()  # detaching from a command that already ended changes nothing
    assert not command.running() and command.finish() == 4
