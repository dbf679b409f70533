"""A probed process's ring leaves with it: SIGTERM'd, with its own handler, or os._exit'ed."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.probe import ROOT, trainer_env

pytestmark = pytest.mark.slow

SLEEPER = """
import signal, sys, time
import gputop.probe as p

def handler(signum, frame):
    print("handled", flush=True)
    sys.exit(3)

if sys.argv[1] == "before":
    signal.signal(signal.SIGTERM, handler)
p.annotate(x=1)  # creates the ring
if sys.argv[1] == "after":
    signal.signal(signal.SIGTERM, handler)
print("up", flush=True)
time.sleep(60)
"""


def _start(code: str, tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                            text=True, env=trainer_env(tmp_path), cwd=ROOT)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    return proc


def test_a_sigtermed_trainer_removes_its_ring_and_still_dies_by_sigterm(tmp_path: Path) -> None:
    proc = _start(SLEEPER, tmp_path, "default")
    assert len(list(tmp_path.glob("gputop-*.ring"))) == 1
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    assert not list(tmp_path.glob("gputop-*.ring"))


@pytest.mark.parametrize("when", ["before", "after"])
def test_the_programs_own_sigterm_handler_still_runs(tmp_path: Path, when: str) -> None:
    proc = _start(SLEEPER, tmp_path, when)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 3
    assert proc.stdout is not None and proc.stdout.read().strip() == "handled"
    assert not list(tmp_path.glob("gputop-*.ring"))  # its sys.exit ran the exit handlers


FORKER = """
import os, signal, time
import gputop.probe as p
p.annotate(x=1)
print("up", flush=True)
pid = os.fork()
if pid == 0:
    time.sleep(60)
    os._exit(0)
time.sleep(0.2)
os.kill(pid, signal.SIGTERM)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status), os.path.exists(p.recorder().ring.path), flush=True)
"""


def test_a_sigtermed_forked_child_leaves_the_parents_ring(tmp_path: Path) -> None:
    proc = _start(FORKER, tmp_path)
    assert proc.wait(timeout=60) == 0
    assert proc.stdout is not None and proc.stdout.read().split() == ["-15", "True"]


def test_the_demo_trainers_ring_is_gone_after_it_exits(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "gputop.app.demo_trainer", "--stand-in",
                             "--workers", "1"], env=trainer_env(tmp_path), cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob("gputop-*.ring")):
            assert time.monotonic() < deadline, "the demo trainer never made a ring"
            assert proc.poll() is None, "the demo trainer died"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert not list(tmp_path.glob("gputop-*.ring"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


KILLED_WHILE_CREATING = """
import os, signal, sys
import gputop.probe as p

def leave(signum, frame):
    p.unlink_ring()
    os._exit(0)

if sys.argv[1] == "own-handler":
    signal.signal(signal.SIGTERM, leave)
real_fallocate = os.posix_fallocate

def fallocate_then_sigterm(fd, offset, length):
    real_fallocate(fd, offset, length)
    os.kill(os.getpid(), signal.SIGTERM)  # the file exists; the recorder is not made yet

os.posix_fallocate = fallocate_then_sigterm
p.annotate(x=1)
print("survived", flush=True)
"""


@pytest.mark.parametrize("disposition", ["default", "own-handler"])
def test_a_sigterm_while_the_ring_is_being_made_leaves_no_ring(tmp_path: Path,
                                                               disposition: str) -> None:
    proc = subprocess.run([sys.executable, "-c", KILLED_WHILE_CREATING, disposition],
                          capture_output=True, text=True, env=trainer_env(tmp_path), cwd=ROOT,
                          timeout=60)
    assert "survived" not in proc.stdout, proc.stderr
    assert not list(tmp_path.glob("gputop-*.ring"))
