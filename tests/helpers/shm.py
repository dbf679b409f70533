"""torch's shared-memory files that tests' trainers leave in /dev/shm, removed after them.

torch names each file after the process that made it (`torch_<pid>_<n>_<n>`) and unlinks it
once its tensor is handed over; a process killed in between leaves the file behind.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from contextlib import suppress

from tests.helpers.processes import alive

SHM = "/dev/shm"


def remove_torch_segments(made_by: Callable[[int, float], bool], shm: str = SHM) -> None:
    """Unlink our torch files whose maker's PID and modification time `made_by` accepts."""
    with suppress(OSError):
        for entry in os.scandir(shm):
            parts = entry.name.split("_")
            if len(parts) != 4 or parts[0] != "torch" or not parts[1].isdigit():
                continue
            with suppress(OSError):
                st = entry.stat(follow_symlinks=False)
                if st.st_uid == os.getuid() and made_by(int(parts[1]), st.st_mtime):
                    os.unlink(entry.path)


def of_killed(pids: Collection[int]) -> Callable[[int, float], bool]:
    """Files made by one of `pids` (processes a test killed)."""
    return lambda pid, _mtime: pid in pids


def of_the_dead_since(since: float) -> Callable[[int, float], bool]:
    """Files changed since `since` (a test run's start) whose maker no longer runs."""
    return lambda pid, mtime: mtime >= since and not alive(pid)
