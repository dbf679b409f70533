"""Every test's trainers and gputops meet in a ring directory of this run's own, as they
would in /dev/shm: another gputop on a shared machine (another version, another PID
namespace) can neither remove these rings nor add its trainers' to what a test sees."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator

import pytest

from gputop.probe import ring as ring_format
from tests.helpers.shm import of_the_dead_since, remove_torch_segments


@pytest.fixture(scope="session", autouse=True)
def private_ring_directory() -> Iterator[str]:
    """$GPUTOP_RING_DIR for the whole run: a sticky, world-writable tmpfs directory like
    /dev/shm (where there is one), removed after."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    directory = tempfile.mkdtemp(prefix="gputop-tests-", dir=base)
    os.chmod(directory, 0o1777)
    saved = os.environ.get(ring_format.ENV_DIR)
    os.environ[ring_format.ENV_DIR] = directory
    try:
        yield directory
    finally:
        if saved is None:
            os.environ.pop(ring_format.ENV_DIR, None)
        else:
            os.environ[ring_format.ENV_DIR] = saved
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def private_state_directory() -> Iterator[str]:
    """$XDG_STATE_HOME for the whole run, removed after: the gputops a test starts keep
    their state (the canary's idle peak, debug logs) there, not in the home of whoever runs
    the tests, and a peak kept by an earlier run cannot change what a test sees."""
    directory = tempfile.mkdtemp(prefix="gputop-tests-state-")
    saved = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = directory
    try:
        yield directory
    finally:
        if saved is None:
            os.environ.pop("XDG_STATE_HOME", None)
        else:
            os.environ["XDG_STATE_HOME"] = saved
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def no_torch_segments_left() -> Iterator[None]:
    """After the run, the torch files in /dev/shm that its killed processes left (a trainer
    killed by a test, not through the trainer harness, between making one and unlinking
    it: ~1 a full run): those changed since the run began whose maker no longer runs."""
    began = time.time() - 1.0  # file times are the kernel's coarse clock
    yield
    remove_torch_segments(of_the_dead_since(began))
