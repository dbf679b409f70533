"""A probed trainer that is PID 1 of its namespace (a container's one process) and gets a
SIGTERM it has no handler for: the kernel drops that signal, so the trainer runs on, and its
ring must stay with it (monitored), not be removed by the probe."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.probe.reader import RingReader
from tests.helpers.probe import pid_namespace_refusal, stepping_trainer

pytestmark = pytest.mark.slow

WAIT_S = 60.0
STEPS_AFTER_SIGNAL = 50  # the main thread runs this many steps: a Python handler would have run



@pytest.fixture
def unshare() -> None:
    """Skip unless we may make a PID namespace (root, and unshare(1) works here)."""
    refusal = pid_namespace_refusal()
    if refusal is not None:
        pytest.skip(refusal)


@pytest.fixture
def contained(tmp_path: Path, unshare: None) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """The stepping trainer as PID 1 of a PID namespace of its own (rings in tmp_path)."""
    with stepping_trainer(tmp_path, tmp_path / "stop", contained=True) as (proc, pid, ring):
        assert pid == 1
        yield proc, ring


def host_pid(unshare_proc: subprocess.Popen[str]) -> int:
    """The host PID of the namespace's PID 1: the one child of unshare(1)."""
    pid = unshare_proc.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def wait_for_steps(ring: Path, count: int) -> None:
    """Until the trainer has published `count` more steps to `ring` (it must keep running)."""
    reader = RingReader(str(ring))
    try:
        first = reader.read_header().head
        deadline = time.monotonic() + WAIT_S
        while reader.read_header().head < first + count:
            assert time.monotonic() < deadline, "the trainer stopped stepping"
            time.sleep(0.01)
    finally:
        reader.close()


def test_a_pid_1_trainer_that_ignores_sigterm_keeps_its_ring(
    contained: tuple[subprocess.Popen[str], Path],
) -> None:
    proc, ring = contained
    trainer = host_pid(proc)
    inode = os.stat(ring).st_ino
    os.kill(trainer, signal.SIGTERM)
    wait_for_steps(ring, STEPS_AFTER_SIGNAL)  # still training after the signal: PID 1 ignores it
    assert proc.poll() is None
    assert ring.exists(), "the probe removed the ring of a trainer that kept running"
    assert os.stat(ring).st_ino == inode
    wait_for_steps(ring, STEPS_AFTER_SIGNAL)  # and still written, so still monitored


def test_a_pid_1_trainer_removes_its_ring_when_it_exits(
    contained: tuple[subprocess.Popen[str], Path], tmp_path: Path,
) -> None:
    proc, ring = contained
    (tmp_path / "stop").touch()
    assert proc.wait(timeout=WAIT_S) == 0
    assert not ring.exists()
