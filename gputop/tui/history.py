"""Rolling per-GPU and memory-bandwidth history, fed one Frame at a time on the UI thread."""

from __future__ import annotations

from collections import deque

from gputop.core.model import Frame, Trend

KEEP = 300


class History:
    """The last KEEP samples of each GPU's util and of host memory-bandwidth load."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self.gpu_util: dict[int, deque[float | None]] = {}
        self.membw: deque[float | None] = deque(maxlen=keep)
        self.added = 0  # frames added: a pane drawn from the history redraws when it grows

    @classmethod
    def recorded(cls, trend: Trend, keep: int = KEEP) -> History:
        """The history a recording holds up to one tick (a replay's, after any jump)."""
        history = cls(keep)
        for index, values in trend.gpu_util.items():
            history.gpu_util[index] = deque(values, maxlen=keep)
        history.membw.extend(None if p is None else 100.0 * p for p in trend.membw_pressure)
        return history

    def add(self, frame: Frame) -> None:
        """Append this frame's values."""
        self.added += 1
        for gpu in frame.gpu.gpus:
            ring = self.gpu_util.get(gpu.index)
            if ring is None:
                ring = self.gpu_util[gpu.index] = deque(maxlen=self.keep)
            ring.append(None if gpu.lost else gpu.util_percent)
        membw = frame.memory_bandwidth
        pressure = membw.pressure if membw is not None else None
        self.membw.append(None if pressure is None else 100.0 * pressure)

    def util(self, index: int) -> deque[float | None]:
        """Util history of GPU `index` (empty when never seen)."""
        return self.gpu_util.get(index, deque())
