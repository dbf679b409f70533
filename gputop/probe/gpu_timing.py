"""GPU time of each step from pooled timing events, resolved later with query(), never synced.

Per step two events go on the stream: `start` when the loader hands over the batch and
`end` when the step closes. gpu_ns = start→end; gpu_gap_ns = previous end→start, the time
the GPU sat idle between steps. Steps wait in a small queue until their `end` has
completed; a full queue or an empty pool publishes a step with its GPU times unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from gputop.probe import ring as ring_format
from gputop.probe.steps import NONE, GpuHook, Recorder

_GPU_NS = ring_format.PAYLOAD_FIELDS.index("gpu_ns")
_GPU_GAP_NS = ring_format.PAYLOAD_FIELDS.index("gpu_gap_ns")


class Event(Protocol):
    """The slice of torch.cuda.Event the timer uses."""

    def record(self) -> None: ...

    def query(self) -> bool: ...

    def elapsed_time(self, end: Any) -> float: ...


class _Pending:
    """A closed step waiting for its GPU times: its record and the events around it."""

    __slots__ = ("contiguous", "end", "record", "start")

    def __init__(self) -> None:
        self.record: tuple[int, ...] = ()
        self.start: Event | None = None
        self.end: Event | None = None
        self.contiguous = False  # it opened as the previous step closed: the gap is idle GPU


class GpuTimer(GpuHook):
    """Pairs pooled events around steps and publishes each step once its times are known."""

    def __init__(self, new_event: Callable[[], Event], queue_size: int = 16) -> None:
        self._new_event = new_event
        self._pool: list[Event] = []
        self._limit = 2 * queue_size + 4
        self._made = 0
        self._size = queue_size
        self._rows = [_Pending() for _ in range(queue_size)]
        self._first = 0
        self._count = 0
        self._start: Event | None = None
        self._contiguous = False
        self._held_end: Event | None = None  # end event of the last published step

    def _take(self) -> Event | None:
        if self._pool:
            return self._pool.pop()
        if self._made >= self._limit:
            return None
        self._made += 1
        return self._new_event()

    def _give(self, event: Event | None) -> None:
        if event is not None:
            self._pool.append(event)

    def step_opened(self, contiguous: bool) -> None:
        event = self._take()
        if event is not None:
            event.record()
        self._give(self._start)  # a step that opened but never closed
        self._start = event
        self._contiguous = contiguous

    def step_closed(self, rec: Recorder, record: tuple[int, ...]) -> None:
        if self._count == self._size:
            self._publish(rec, resolved=False)
        end = self._take()
        if end is not None:
            end.record()
        row = self._rows[(self._first + self._count) % self._size]
        row.record, row.start, row.end, row.contiguous = (
            record, self._start, end, self._contiguous)
        self._start = None
        self._contiguous = False
        self._count += 1
        self.poll(rec)

    def poll(self, rec: Recorder) -> None:
        """Publish, oldest first, every queued step whose GPU work has finished."""
        while self._count:
            end = self._rows[self._first].end
            if end is not None and not end.query():
                return
            self._publish(rec, resolved=end is not None)

    def flush(self, rec: Recorder) -> None:
        self.poll(rec)
        while self._count:
            self._publish(rec, resolved=False)

    def _publish(self, rec: Recorder, resolved: bool) -> None:
        row = self._rows[self._first]
        ev_start, ev_end, record = row.start, row.end, row.record
        if resolved and ev_start is not None and ev_end is not None:
            gap = NONE
            if row.contiguous and self._held_end is not None:
                gap = _elapsed_ns(self._held_end, ev_start)
            record = _with_gpu_times(record, _elapsed_ns(ev_start, ev_end), gap)
        rec.stage(record)
        self._give(self._held_end)
        self._give(ev_start)
        self._held_end = ev_end if resolved else None
        if not resolved:
            self._give(ev_end)
        row.start = row.end = None
        row.record = ()
        self._first = (self._first + 1) % self._size
        self._count -= 1


def _with_gpu_times(record: tuple[int, ...], gpu_ns: int, gap_ns: int) -> tuple[int, ...]:
    """`record` with its GPU time and the GPU's idle gap before it filled in."""
    words = list(record)
    words[_GPU_NS], words[_GPU_GAP_NS] = gpu_ns, gap_ns
    return tuple(words)


def _elapsed_ns(a: Event, b: Event) -> int:
    """Milliseconds between two completed events, as whole nanoseconds (NONE on error)."""
    try:
        ms = a.elapsed_time(b)
    except RuntimeError:
        return NONE
    return max(0, int(ms * 1e6))
