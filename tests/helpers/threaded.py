"""A real process with named threads (their Linux names set with prctl), one of them busy."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Python's thread names are not the kernel's: each thread names itself with PR_SET_NAME (15)
_SCRIPT = r"""
import ctypes, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)

def run(name, busy):
    libc.prctl(15, name.encode(), 0, 0, 0)
    while True:
        if not busy:
            time.sleep(1)

for spec in sys.argv[1].split(","):
    name, _, busy = spec.partition(":")
    threading.Thread(target=run, args=(name, busy == "busy"), daemon=True).start()
time.sleep(600)
"""


def thread_names(pid: int) -> dict[int, str]:
    """Each thread of `pid` but its main one, by TID, named as the kernel names it."""
    names = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        if int(task.name) != pid:
            try:
                names[int(task.name)] = (task / "comm").read_text().rstrip("\n")
            except OSError:
                continue
    return names


@contextmanager
def named_threads(names: tuple[str, ...], busy: str = "", marker: str = "",
                  timeout_s: float = 30.0) -> Iterator[subprocess.Popen[bytes]]:
    """A Python process running a thread per name in `names` (`busy` spins, the rest
    sleep), each named so by the time it is yielded; `marker` is an extra argument, for a
    filter to find its row by."""
    spec = ",".join(f"{name}:{'busy' if name == busy else 'idle'}" for name in names)
    args = [sys.executable, "-c", _SCRIPT, spec] + ([marker] if marker else [])
    proc = subprocess.Popen(args)
    try:
        deadline = time.monotonic() + timeout_s
        while set(thread_names(proc.pid).values()) != set(names):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the threads never took their names: {thread_names(proc.pid)}")
            time.sleep(0.05)
        yield proc
    finally:
        proc.kill()
        proc.wait()
