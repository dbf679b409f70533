"""What the app asks of the feed that hands it Frames: this machine's, a recording's, a fleet's."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol, runtime_checkable

from gputop.core.model import Frame, Trend


class FrameFeed(Protocol):
    """What the app needs from a sampler (gputop.frames.sampler.Sampler is one)."""

    @property
    def paused(self) -> bool: ...

    def start(self, on_frame: Callable[[Frame], None], *,
              on_prime: Callable[[Frame], None] | None = None) -> None: ...

    def stop(self) -> None: ...

    def set_paused(self, paused: bool) -> None: ...

    def attach(self, pid: int) -> None: ...

    def detach(self, pid: int) -> None: ...

    def add_deferred_sources(self) -> None: ...


@runtime_checkable
class ThreadFeed(FrameFeed, Protocol):
    """A feed that reads the userland threads of the processes asked for (htop's H): this
    machine's (gputop.frames.sampler.Sampler is one)."""

    def show_threads(self, pids: Iterable[int]) -> None: ...


@runtime_checkable
class PlaybackFeed(FrameFeed, Protocol):
    """A recording played back, which steps, jumps and changes pace
    (gputop.frames.playback.Playback is one)."""

    speed: float

    def step(self, ticks: int) -> None: ...

    def jump(self, where: str) -> None: ...

    def faster(self, steps: int = 1) -> None: ...

    def position(self) -> tuple[int, int]: ...

    def trend(self, time: float, count: int) -> Trend | None: ...


@runtime_checkable
class FleetFeed(FrameFeed, Protocol):
    """A feed of fleet Frames (gputop.frames.fleet_sampler's), which can focus on one host."""

    def focus(self, instance: str | None) -> None: ...
