"""A stand-in for the perf_event_open layer: counters and sample rings that follow a script.

`FakePerf.open` has the signature of `PerfCounter.open`; each counter counts `per_read`
events (by cpu, or by tid for per-thread counters) on every read, enabled and running one
second a read. Events in `unsupported` raise ENOENT like a PMU without them, `denied`
ones EACCES like perf_event_paranoid. `ring(fd)` hands out the samples queued for that fd.
"""

from __future__ import annotations

import errno
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

from gputop.sources.membw.perf_event import CounterValue, Samples

SECOND_NS = 1_000_000_000


@dataclass
class FakeCounter:
    """One opened counter: what it was opened with, and its running count."""

    fd: int
    config: int
    cpu: int
    pid: int
    step: int
    sampling: bool
    enabled: bool = False
    closed: bool = False
    reads: int = 0

    def enable(self) -> None:
        self.enabled = True

    def read(self) -> CounterValue:
        assert not self.closed, "read after close"
        self.reads += 1
        return CounterValue(self.step * self.reads, SECOND_NS * self.reads,
                            SECOND_NS * self.reads)

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeRing:
    """The ring of one fake counter: drains what the test queued for it."""

    queue: list[Samples]
    closed: bool = False

    def drain(self) -> Samples:
        return self.queue.pop(0) if self.queue else Samples({}, 0)

    def close(self) -> None:
        self.closed = True


@dataclass
class FakePerf:
    """The fake kernel: opens FakeCounters and FakeRings, remembering every one."""

    per_read: dict[int, int] = field(default_factory=dict)
    unsupported: set[int] = field(default_factory=set)
    denied: set[int] = field(default_factory=set)
    gone_tids: set[int] = field(default_factory=set)
    no_sampling: bool = False  # the PMU counts but cannot interrupt (EOPNOTSUPP)
    samples: dict[int, list[Samples]] = field(default_factory=dict)  # by cpu
    counters: list[FakeCounter] = field(default_factory=list)
    rings: list[FakeRing] = field(default_factory=list)
    _fds: Iterator[int] = field(default_factory=lambda: itertools.count(1000))

    def open(self, type_: int, config: int, *, pid: int = -1, cpu: int = -1,
             sample_freq: int = 0, **_: object) -> FakeCounter:
        if config in self.unsupported:
            raise OSError(errno.ENOENT, "No such file or directory")
        if config in self.denied:
            raise OSError(errno.EACCES, "Permission denied")
        if sample_freq and self.no_sampling:
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        if pid in self.gone_tids:
            raise OSError(errno.ESRCH, "No such process")
        key = cpu if cpu >= 0 else pid
        counter = FakeCounter(next(self._fds), config, cpu, pid, self.per_read.get(key, 0),
                              bool(sample_freq))
        self.counters.append(counter)
        return counter

    def ring(self, fd: int) -> FakeRing:
        counter = next(c for c in self.counters if c.fd == fd)
        ring = FakeRing(self.samples.get(counter.cpu, []))
        self.rings.append(ring)
        return ring

    def open_now(self) -> list[FakeCounter]:
        """Counters opened and not closed."""
        return [c for c in self.counters if not c.closed]


class StepClock:
    """A clock that moves one second per call."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now
