"""Plays a recording to the TUI as the sampler plays the machine: one thread, one Frame at a
time, at the recorded pace times a speed; paused, stepped or jumped from the UI.

The recording is a source (gputop.recording.reader); the facts derived from it (each window's
verdicts and summary, the straggler) come from the live derivation (gputop.frames.derive),
so the panes show what they showed then.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from gputop.advice import in_shown_order
from gputop.core import debuglog
from gputop.core.model import Frame, SourceError, Trend
from gputop.frames import derive
from gputop.frames.ticker import Ticker

SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
MAX_WAIT_S = 5.0  # a gap in the recording (the recorder was stopped) is not waited out


class RecordedFrames(Protocol):
    """The ticks of a recording, oldest first (gputop.recording.reader.Recording is one)."""

    @property
    def times(self) -> Sequence[float]:
        """Each tick's Unix time, oldest first."""
        ...

    def __len__(self) -> int: ...

    def frame(self, index: int) -> Frame: ...

    def trend(self, index: int, count: int) -> Trend: ...

    def refresh(self) -> None: ...

    def close(self) -> None: ...


def derived(frame: Frame) -> Frame:
    """`frame` with its trainers and straggler derived as live, its advice in shown order."""
    attached, straggler = derive.recorded(frame.attached)
    return replace(frame, attached=attached, straggler=straggler,
                   advice=in_shown_order(frame.advice))


class Playback:
    """A FrameFeed over a recording, with the replay's controls."""

    def __init__(self, recording: RecordedFrames, speed: float = 1.0) -> None:
        self.recording = recording
        self.index = 0
        self.speed = speed
        self._paused = False
        self._lock = threading.Lock()
        self._ticker = Ticker("gputop-replay")
        self._shown: int | None = None

    # ---- FrameFeed ----------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        """Whether playing is held (the frame shown stays)."""
        return self._paused

    def set_paused(self, paused: bool) -> None:
        """Hold or resume playing; resuming at the end starts over."""
        with self._lock:
            if not paused and self.index >= len(self.recording) - 1:
                self.recording.refresh()  # a recording still being written has grown
            self._paused = paused
        self._ticker.wake()

    def start(self, on_frame: Callable[[Frame], None], *,
              on_prime: Callable[[Frame], None] | None = None) -> None:
        """Play on a daemon thread, handing each frame to `on_frame`."""
        if self._ticker.running:
            return
        if on_prime is not None and len(self.recording):
            on_prime(self.frame_at(0))
        self._ticker.start(lambda: self._run(on_frame))

    def stop(self) -> None:
        """Stop playing and close the recording."""
        self._ticker.stop()
        self.recording.close()

    def attach(self, pid: int) -> None:
        """A replay shows the trainers it recorded; it attaches to nothing."""
        raise ValueError("a replay shows the trainers attached when it was recorded")

    def detach(self, pid: int) -> None:
        """Nothing to let go of."""

    def add_deferred_sources(self) -> None:
        """A recording has no sources to add."""

    # ---- the replay's controls ----------------------------------------------------------

    def step(self, ticks: int) -> None:
        """Pause and move `ticks` ticks (back when negative), within the recording."""
        with self._lock:
            self._paused = True
            self._move_to(self.index + ticks)

    def jump(self, where: str) -> None:
        """Go to the first ("start") or the newest ("end") tick; playing goes on from there."""
        with self._lock:
            if where == "end":
                self.recording.refresh()
            self._move_to(0 if where == "start" else len(self.recording) - 1)

    def faster(self, steps: int = 1) -> None:
        """Play at the next speed up (down for negative `steps`)."""
        with self._lock:
            now = min(range(len(SPEEDS)), key=lambda i: abs(SPEEDS[i] - self.speed))
            self.speed = SPEEDS[max(0, min(len(SPEEDS) - 1, now + steps))]
        self._ticker.wake()

    def trend(self, time: float, count: int) -> Trend | None:
        """The sparklines of the tick recorded at `time`: the `count` ticks up to it, as the
        live view drew them, however the replay got there (None: no tick at that time)."""
        times = self.recording.times
        index = bisect.bisect_left(times, time)
        if index >= len(times) or times[index] != time:
            return None
        try:
            return self.recording.trend(index, count)
        except Exception as exc:  # the frame still shows, with the sparklines it has
            debuglog.log_exception("replay trend failed", exc)
            return None

    def position(self) -> tuple[int, int]:
        """The tick shown (1-based) and how many the recording holds."""
        return (self._shown if self._shown is not None else self.index) + 1, len(self.recording)

    def _move_to(self, index: int) -> None:
        self.index = max(0, min(len(self.recording) - 1, index))
        self._shown = None  # shown again at once, even if it is the same tick
        self._ticker.wake()

    def frame_at(self, index: int) -> Frame:
        """The recorded frame `index` with its derived facts; a tick that cannot be read is
        the error line of an empty frame, never a traceback."""
        try:
            return derived(self.recording.frame(index))
        except Exception as exc:
            debuglog.log_exception("replay failed", exc)
            raise ReplayTickError(f"{type(exc).__name__}: {exc}".splitlines()[0][:200]) from exc

    # ---- the thread ---------------------------------------------------------------------

    def _run(self, on_frame: Callable[[Frame], None]) -> None:
        last: Frame | None = None
        for _ in self._ticker.turns():
            with self._lock:
                index = self.index
                fresh = self._shown != index
            if fresh and len(self.recording):
                last = self._show(index, on_frame, last)
            playing = not self._paused
            delay = self._delay(index) if playing else None
            if playing and delay is None and last is not None:
                on_frame(last)  # held at the newest tick: shown again, now PAUSED
            if not self._ticker.wait(delay) and delay is not None:
                self._next(index)  # its time is up, nothing moved meanwhile: the next tick

    def _show(self, index: int, on_frame: Callable[[Frame], None], last: Frame | None
              ) -> Frame | None:
        try:
            frame = self.frame_at(index)
        except ReplayTickError as exc:
            if last is None:
                return None
            frame = replace(last, errors=(SourceError("sampler", str(exc), 1, 0.0, last.time),))
        self._shown = index
        on_frame(frame)
        return frame

    def _delay(self, index: int) -> float | None:
        """How long tick `index` stays at this speed (None: it is the newest, hold there)."""
        with self._lock:
            if index + 1 >= len(self.recording):
                self.recording.refresh()
            if index + 1 >= len(self.recording):
                self._paused = True
                return None
            gap = self.recording.times[index + 1] - self.recording.times[index]
        return max(0.0, min(MAX_WAIT_S, gap / self.speed))

    def _next(self, index: int) -> None:
        with self._lock:
            if self.index == index and not self._paused:
                self.index = index + 1


class ReplayTickError(Exception):
    """A tick of the recording could not be read back."""
