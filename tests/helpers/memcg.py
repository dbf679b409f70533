"""A memory cgroup (v1) for a test's trainer: a host with less RAM than this one, made per
test under the test's own memory cgroup, so the kernel reclaims and pages in as it would on
a machine whose memory the trainer fills. Needs root and the v1 memory controller; a test
skips, saying why, where neither is there. Removed afterwards, whatever happened.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

V1_ROOT = Path("/sys/fs/cgroup/memory")
EMPTY_TIMEOUT_S = 30.0
LIMIT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class MemoryCgroup:
    """One memory cgroup: its folder, what the kernel counts in it, its limit."""

    path: Path

    def join(self) -> None:
        """Move the calling process in (a Popen preexec_fn: everything it allocates from its
        start is charged here, and what it forks stays here)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def stat(self) -> dict[str, int]:
        """memory.stat's counters, this cgroup's and its children's (the total_ ones)."""
        out = {}
        for line in (self.path / "memory.stat").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name.startswith("total_"):
                out[name.removeprefix("total_")] = int(value)
        return out

    def anon_bytes(self) -> int:
        """Anonymous memory charged here: what no reclaim can take back on a host without
        swap."""
        return self.stat()["rss"]

    def major_faults(self) -> int:
        """Page faults of its processes that waited for storage, since it was made."""
        return self.stat()["pgmajfault"]

    def limit(self, size: int) -> None:
        """Hold its memory to `size` bytes: the kernel reclaims page cache to get there, and
        says EBUSY when its processes fault pages back in faster than a round of reclaim
        drops them (asked again, it goes on from where it got)."""
        deadline = time.monotonic() + LIMIT_TIMEOUT_S
        while True:
            try:
                (self.path / "memory.limit_in_bytes").write_text(str(size))
                return
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def pids(self) -> list[int]:
        """The processes in it now."""
        return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]


@contextmanager
def memory_cgroup(name: str) -> Iterator[MemoryCgroup]:
    """A fresh memory cgroup `name` under the calling process's own; skips where none can be
    made. Afterwards what still runs in it is killed, its page cache dropped, and it is
    removed."""
    cgroup = MemoryCgroup(_own_cgroup() / f"{name}-{os.getpid()}")
    try:
        cgroup.path.mkdir()
    except OSError as e:
        pytest.skip(f"cannot make a memory cgroup under {cgroup.path.parent} ({e.strerror})")
    try:
        yield cgroup
    finally:
        _remove(cgroup)


def _own_cgroup() -> Path:
    """The v1 memory cgroup the calling process is in; skips where there is none."""
    if os.geteuid() != 0:
        pytest.skip("making a memory cgroup needs root")
    if not (V1_ROOT / "memory.limit_in_bytes").exists():
        pytest.skip(f"no cgroup v1 memory controller at {V1_ROOT} (cgroup v2 only)")
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, where = line.split(":", 2)
        if "memory" in controllers.split(","):
            return V1_ROOT / where.lstrip("/")
    pytest.skip("this process is in no v1 memory cgroup")


def _remove(cgroup: MemoryCgroup) -> None:
    """Kill what still runs in `cgroup`, drop its page cache and remove it."""
    deadline = time.monotonic() + EMPTY_TIMEOUT_S
    while pids := cgroup.pids():
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert time.monotonic() < deadline, f"{cgroup.path} never emptied: {pids}"
        time.sleep(0.05)
    with suppress(OSError):
        (cgroup.path / "memory.force_empty").write_text("0")
    while True:
        try:
            cgroup.path.rmdir()
            return
        except OSError:  # busy for a moment after its last process is reaped
            assert time.monotonic() < deadline, f"{cgroup.path} could not be removed"
            time.sleep(0.05)
