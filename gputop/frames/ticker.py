"""A daemon thread that loops until stopped and can be woken early from other threads: the
sampler, the fleet sampler and the replay each run their ticks on one."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator


class Ticker:
    """One named daemon thread running a loop; `wake()` cuts the loop's current wait short."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, loop: Callable[[], None]) -> None:
        """Run `loop` on the thread, unless one already runs."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=loop, name=self.name, daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        """Whether the thread was started and not stopped since."""
        return self._thread is not None

    def turns(self) -> Iterator[None]:
        """One turn per pass of the loop until stopped, each begun with no wake-up pending."""
        while not self._stop.is_set():
            self._wake.clear()
            yield

    @property
    def stopped(self) -> bool:
        """Whether stop() was called (since the last start)."""
        return self._stop.is_set()

    def wait(self, seconds: float | None) -> bool:
        """Sleep `seconds` (None: until woken); True when woken or stopped before then."""
        return self._wake.wait(seconds)

    def sleep(self, seconds: float) -> None:
        """Sleep `seconds` unless stopped first (a wake-up does not cut it short)."""
        self._stop.wait(seconds)

    def wake(self) -> None:
        """Cut the loop's current (or next) wait short."""
        self._wake.set()

    def stop(self, timeout_s: float = 5.0) -> None:
        """End the loop and wait for it; from the loop's own thread, only ask it to end."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout_s)
        self._thread = None


class PausableTicks:
    """`paused` and `set_paused()` for a sampler whose loop runs on `self._ticker` and holds
    off new frames while paused."""

    _ticker: Ticker
    _paused = False

    @property
    def paused(self) -> bool:
        """Whether the thread holds off new frames."""
        return self._paused

    def set_paused(self, paused: bool) -> None:
        """Pause or resume the ticks (at once: the loop's wait is cut short)."""
        self._paused = paused
        self._ticker.wake()
