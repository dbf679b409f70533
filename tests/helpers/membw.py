"""Helpers for the memory-bandwidth tests: small /sys and /proc trees written per test."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path


def sys_with_llc(root: Path, size: str | None) -> Path:
    """A /sys tree whose cpu0 has a level-3 unified cache of `size` (none when None)."""
    if size is not None:
        index = root / "devices/system/cpu/cpu0/cache/index3"
        index.mkdir(parents=True)
        (index / "level").write_text("3\n")
        (index / "type").write_text("Unified\n")
        (index / "size").write_text(f"{size}\n")
    else:
        root.mkdir(parents=True)
    return root


def as_other_user(action: Callable[[], object], uid: int = 54321) -> None:
    """Run `action` in a forked child that has become `uid` (gid too); fail if it fails."""
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        code = 1
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            action()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"the action as uid {uid} failed"


def cpu_ns(pid: int) -> int:
    """Nanoseconds on CPU so far, summed over the process's threads (schedstat)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int((task / "schedstat").read_text().split()[0])
    return total
