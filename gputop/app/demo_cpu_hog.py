"""The busy process `gputop --demo cpu-starved` shares its trainer's one core with: real CPU
load, labelled as the demo's (process name gputop-cpu-hog, command line `python -m
gputop.app.demo_cpu_hog`), which the cpu-starved finding then names. Its HOG_THREADS threads
hash in a loop (hashing runs outside the GIL, so each wants the core) pinned to that core,
so it never costs more than one core, and it exits with the trainer that started it."""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import threading
import time

from gputop.app.demo_trainer import PR_SET_NAME, die_with_parent, orphaned, prctl

PROCESS_NAME = b"gputop-cpu-hog"
HOG_THREADS = 2  # two runnable threads against the trainer's one: it gets a third of the core
CHUNK = bytes(1 << 16)  # large enough that sha256 releases the GIL while it hashes
ORPHAN_CHECK_S = 1.0


def start_cpu_hog(cpu: int) -> subprocess.Popen[bytes]:
    """Start the hog on `cpu` as a child of this process, which it dies with."""
    return subprocess.Popen(
        [sys.executable, "-m", "gputop.app.demo_cpu_hog", "--cpu", str(cpu)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        close_fds=True,
    )


def _spin() -> None:
    while True:
        hashlib.sha256(CHUNK).digest()


def main(argv: list[str] | None = None) -> int:
    """Spin on the given CPU until the parent goes away."""
    parser = argparse.ArgumentParser(prog="python -m gputop.app.demo_cpu_hog")
    parser.add_argument("--cpu", type=int, required=True, help="the one CPU to spin on")
    args = parser.parse_args(argv)
    parent = os.getppid()
    die_with_parent(parent)
    prctl(PR_SET_NAME, PROCESS_NAME)
    os.sched_setaffinity(0, {args.cpu})
    for _ in range(HOG_THREADS):
        threading.Thread(target=_spin, name="gputop-cpu-hog", daemon=True).start()
    while not orphaned(parent):
        time.sleep(ORPHAN_CHECK_S)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
