"""A scenario's own processes first: on a box shared with other jobs (CI's machine, a dev VM
other agents load), a test's trainer, its workers and its hogs get the scheduling weight,
so other work changes the scenario the test set up as little as the kernel allows.

With autogroup (the default on desktop and server kernels) a process's weight is its
session's: each favoured process starts a session of its own whose group gets nice -10
(about 9x a nice-0 session's weight). Where autogroup is off (a container's cgroup) the
process's own nice -10 does the same among the cgroup's tasks. Both are inherited by what
the process forks (DataLoader workers) and the threads it starts. Needs root; elsewhere the
processes run as they would have, unfavoured.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Set
from contextlib import contextmanager, suppress

from tests.helpers.processes import children

FAVOURED_NICE = -10


def favoured(cpus: Set[int] | None = None) -> Callable[[], None]:
    """A Popen preexec_fn (with start_new_session=True, which runs first) that favours the
    child's session and its own nice, and pins it to `cpus` when given, before it execs:
    the threads and processes it starts afterwards all inherit them."""
    def setup() -> None:
        with suppress(OSError), open("/proc/self/autogroup", "w") as group:
            group.write(str(FAVOURED_NICE))
        with suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, FAVOURED_NICE)
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
    return setup


@contextmanager
def pinned(cpus: Set[int]) -> Iterator[None]:
    """The calling thread (a test's own sampling, and threads it starts meanwhile) on `cpus`
    for the duration, so it keeps off the cores a scenario leaves idle; restored after."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def favoured_children(pid: int, known: Set[int]) -> set[int]:
    """`known` and the children of `pid` not in it, whose sessions are favoured now: torchrun
    starts each rank in a session of its own, outside the launcher's favoured one (their own
    nice, inherited, still counts)."""
    found = children(pid) - known
    for child in found:
        with suppress(OSError), open(f"/proc/{child}/autogroup", "w") as group:
            group.write(str(FAVOURED_NICE))
    return {*known, *found}
