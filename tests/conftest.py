"""Every test's trainers and gputops meet in a ring directory of this run's own, as they
would in /dev/shm: another gputop on a shared machine (another version, another PID
namespace) can neither remove these rings nor add its trainers' to what a test sees."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from gputop.probe import ring as layout


@pytest.fixture(scope="session", autouse=True)
def private_ring_directory() -> Iterator[str]:
    """$GPUTOP_RING_DIR for the whole run: a sticky, world-writable tmpfs directory like
    /dev/shm (where there is one), removed after."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    directory = tempfile.mkdtemp(prefix="gputop-tests-", dir=base)
    os.chmod(directory, 0o1777)
    saved = os.environ.get(layout.ENV_DIR)
    os.environ[layout.ENV_DIR] = directory
    try:
        yield directory
    finally:
        if saved is None:
            os.environ.pop(layout.ENV_DIR, None)
        else:
            os.environ[layout.ENV_DIR] = saved
        shutil.rmtree(directory, ignore_errors=True)
