"""GPU time of each step from pooled timing events, resolved later with query(), never synced.

Per step two events go on the stream: `start` when the loader hands over the batch and
`end` when the step closes. gpu_ns = start→end; gpu_gap_ns = previous end→start, the time
the GPU sat idle between steps. Steps wait in a small queue until their `end` has
completed; a full queue or an empty pool publishes a step with its GPU times unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from gputop.probe.recorder import NONE, GpuHook, Recorder


class Event(Protocol):
    """The slice of torch.cuda.Event the timer uses."""

    def record(self) -> None: ...

    def query(self) -> bool: ...

    def elapsed_time(self, end: Any) -> float: ...


class GpuTimer(GpuHook):
    """Pairs pooled events around steps and publishes each step once its times are known."""

    def __init__(self, new_event: Callable[[], Event], queue_size: int = 16) -> None:
        self._new_event = new_event
        self._pool: list[Event] = []
        self._limit = 2 * queue_size + 4
        self._made = 0
        self._size = queue_size
        # step, start, duration, data, acc[4], batch, epoch, flags, loader, ev_start, ev_end,
        # contiguous
        self._rows: list[list[Any]] = [
            [0, 0, 0, 0, [0] * 4, 0, 0, 0, 0, None, None, False] for _ in range(queue_size)
        ]
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

    def step_closed(
        self, rec: Recorder, step: int, start: int, duration: int, data: int, acc: list[int],
        batch: int, epoch: int, flags: int, loader: int,
    ) -> None:
        if self._count == self._size:
            self._publish(rec, resolved=False)
        end = self._take()
        if end is not None:
            end.record()
        row = self._rows[(self._first + self._count) % self._size]
        row[0], row[1], row[2], row[3] = step, start, duration, data
        row[4][:] = acc
        row[5], row[6], row[7], row[8] = batch, epoch, flags, loader
        row[9], row[10], row[11] = self._start, end, self._contiguous
        self._start = None
        self._contiguous = False
        self._count += 1
        self.poll(rec)

    def poll(self, rec: Recorder) -> None:
        """Publish, oldest first, every queued step whose GPU work has finished."""
        while self._count:
            end = self._rows[self._first][10]
            if end is not None and not end.query():
                return
            self._publish(rec, resolved=end is not None)

    def flush(self, rec: Recorder) -> None:
        self.poll(rec)
        while self._count:
            self._publish(rec, resolved=False)

    def _publish(self, rec: Recorder, resolved: bool) -> None:
        row = self._rows[self._first]
        ev_start, ev_end, contiguous = row[9], row[10], row[11]
        gpu = gap = NONE
        if resolved and ev_start is not None:
            gpu = _elapsed_ns(ev_start, ev_end)
            if contiguous and self._held_end is not None:
                gap = _elapsed_ns(self._held_end, ev_start)
        rec.write(row[0], row[1], row[2], row[3], row[4], gpu, gap, row[5], row[6], row[7],
                  row[8])
        self._give(self._held_end)
        self._give(ev_start)
        self._held_end = ev_end if resolved else None
        if not resolved:
            self._give(ev_end)
        row[9] = row[10] = None
        self._first = (self._first + 1) % self._size
        self._count -= 1


def _elapsed_ns(a: Event, b: Event) -> int:
    """Milliseconds between two completed events, as whole nanoseconds (NONE on error)."""
    try:
        ms = a.elapsed_time(b)
    except RuntimeError:
        return NONE
    return max(0, int(ms * 1e6))
