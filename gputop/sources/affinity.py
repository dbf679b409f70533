"""The CPUs a process may run on (its affinity mask), read on demand for a few processes."""

from __future__ import annotations

import os


def cpus_allowed(pid: int) -> frozenset[int] | None:
    """The CPUs `pid` may be scheduled on; None when it is gone or not ours to ask."""
    try:
        return frozenset(os.sched_getaffinity(pid))
    except OSError:
        return None
