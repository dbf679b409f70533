"""The hand-off between the sampler thread and the UI: the newest Frame waits here (stdlib only).

Sampling starts into a slot before Textual is even imported, so the first frame is
being measured while the UI loads; the app then drains the slot and is woken per frame.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from gputop.core.model import Frame


class FrameSlot:
    """Holds the newest undrawn Frame; `put` is called on the sampler thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._frame: Frame | None = None
        self._wake: Callable[[], None] | None = None

    def put(self, frame: Frame) -> None:
        """Park `frame` (replacing an undrawn older one) and wake the UI if it listens."""
        with self._lock:
            self._frame = frame
            wake = self._wake
        if wake is not None:
            wake()

    def take(self) -> Frame | None:
        """The newest undrawn frame, or None."""
        with self._lock:
            frame, self._frame = self._frame, None
        return frame

    def listen(self, wake: Callable[[], None] | None) -> Frame | None:
        """Set (or clear) the wake-up and return a frame that arrived before it."""
        with self._lock:
            self._wake = wake
            frame, self._frame = self._frame, None
        return frame
