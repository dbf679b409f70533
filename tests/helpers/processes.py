"""Processes seen through /proc: alive or gone, and whose children they are."""

from __future__ import annotations

import os
import time
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat.rpartition(b")")[2].split()[0] != b"Z"


def gone(pid: int, timeout_s: float = 10.0) -> bool:
    """True once `pid` has exited within `timeout_s` (a zombie counts: its parent is gone too,
    or has yet to reap it)."""
    deadline = time.monotonic() + timeout_s
    while alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def children(pid: int) -> set[int]:
    """The processes whose parent is `pid` (this kernel may lack /proc/PID/task/*/children)."""
    out = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:  # after the name: state ppid ...
            out.add(int(entry.name))
    return out


def open_fd_targets() -> list[str]:
    """What each of this process's fds refers to (/proc/self/fd's links; one closed while
    listed is left out)."""
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
    return targets
