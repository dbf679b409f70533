"""A container, as far as gputop can tell: a process in PID and mount namespaces of its own
(unshare(1)), with its host PID, and the probed stepping trainer to run in one."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gputop.probe import ring as ring_format
from tests.helpers.probe import ROOT, STEPPING_TRAINER, pid_namespace_refusal, trainer_env

# Its own PIDs, /proc and mounts.
CONTAINER = ["unshare", "--pid", "--fork", "--mount-proc", "--mount", "--kill-child"]
PRIVATE_SHM = "mount -t tmpfs tmpfs /dev/shm"  # Docker's default: a /dev/shm of its own
WAIT_S = 60.0


@pytest.fixture
def namespaces() -> None:
    """Skip unless we may make PID and mount namespaces (root, and unshare(1) works here)."""
    refusal = pid_namespace_refusal()
    if refusal is not None:
        pytest.skip(refusal)


def default_rings_env(**extra: str) -> dict[str, str]:
    """Our environment, this checkout importable, rings where the probe puts them unasked."""
    env = trainer_env(Path("/nonexistent"), **extra)
    del env[ring_format.ENV_DIR]
    return env


def host_pid(unshare_pid: int) -> int:
    """The one child of unshare(1): the contained process as /proc here numbers it."""
    deadline = time.monotonic() + WAIT_S
    while not (children := Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children")
               .read_text().split()):
        assert time.monotonic() < deadline, "unshare started no child"
        time.sleep(0.01)
    return int(children[0])


@contextmanager
def contained(setup: str, command: str, stop: Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """`command` run by sh after `setup` in namespaces of its own; its unshare(1) and its host
    PID once it printed a line; stopped and reaped after."""
    proc = subprocess.Popen([*CONTAINER, "sh", "-c", f"{setup} && exec {command}"],
                            stdout=subprocess.PIPE, text=True, env=default_rings_env(), cwd=ROOT)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, "the contained process said nothing"
        yield proc, host_pid(proc.pid)
    finally:
        stop.touch()
        try:
            proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stepping_trainer(stop: Path) -> str:
    """The stepping trainer's command line (it prints "up PID RING" once it has steps)."""
    return " ".join([sys.executable, "-c", quoted(STEPPING_TRAINER), str(stop), "120"])


def quoted(text: str) -> str:
    """`text` as one sh word."""
    return "'" + text.replace("'", "'\\''") + "'"
