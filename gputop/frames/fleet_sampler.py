"""The fleet view's sampler: asks Prometheus for the fleet on its own thread, once per scrape
interval, and hands each answer to the UI as a Frame, as the local Sampler does.

Prometheus has nothing newer than its last scrape, so the refresh period is its scrape
interval (read from its API; DEFAULT_INTERVAL_S when it says none and until it answers),
unless the user chose one. A host the user drilled into is asked for in detail from the
next tick on, and that tick comes at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from gputop.core import debuglog
from gputop.core.model import FleetReport, Frame
from gputop.core.printable import printable
from gputop.frames.ticker import PausableTicks, Ticker
from gputop.sources.base import HostSource
from gputop.sources.fleet import fleet_frame

DEFAULT_INTERVAL_S = 15.0
FrameCallback = Callable[[Frame], None]


class FleetAnswers(Protocol):
    """What the sampler asks of the fleet's source (FleetSource is the one it is given)."""

    url: str

    def sample(self, detail: str | None = None) -> FleetReport: ...


class FleetSampler(PausableTicks):
    """One Frame per refresh, each carrying the FleetReport; never blocks its caller."""

    def __init__(self, source: FleetAnswers, host: HostSource,
                 interval_s: float | None = None) -> None:
        self.source = source
        self.host = host
        self.chosen_interval_s = interval_s
        self._focus: str | None = None
        self._paused = False
        self._ticker = Ticker("gputop-fleet")
        self._last: FleetReport | None = None
        self._last_good: tuple[FleetReport, float] | None = None  # and when it was asked

    @property
    def interval_s(self) -> float:
        """The refresh period: the user's, else Prometheus's scrape interval, else 15 s."""
        if self.chosen_interval_s is not None:
            return self.chosen_interval_s
        known = self._last.scrape_interval_s if self._last is not None else None
        return known or DEFAULT_INTERVAL_S

    def sample(self) -> Frame:
        """Ask Prometheus now: the fleet, and the focused host in detail (the Frame's time
        is when it was asked)."""
        asked = time.time()
        report = self.source.sample(detail=self._focus)
        if report.error is None:
            self._last_good = (report, asked)
        self._last = report = self._over_last_good(report)
        return fleet_frame(report, self.host.sample(), self.interval_s, asked)

    def _over_last_good(self, report: FleetReport) -> FleetReport:
        """A failed `report` carries the last good answer's hosts, marked stale."""
        if report.error is None or self._last_good is None:
            return report
        good, asked = self._last_good
        return replace(report, hosts=good.hosts, detail=good.detail, stale_from=asked)

    def focus(self, instance: str | None) -> None:
        """Ask for `instance` in detail from the next tick on (None: no host), at once."""
        self._focus = instance
        self._ticker.wake()

    def start(self, on_frame: FrameCallback, *,
              on_prime: FrameCallback | None = None) -> None:
        """Refresh on a daemon thread, handing each Frame to `on_frame` (the first at once;
        the fleet needs no priming, so `on_prime` is not called)."""
        self._ticker.start(lambda: self._run(on_frame))

    def _run(self, on_frame: FrameCallback) -> None:
        for _ in self._ticker.turns():
            if not self._paused:
                frame = self._tick()
                if frame is not None:
                    on_frame(frame)
            self._ticker.wait(self.interval_s)

    def _tick(self) -> Frame | None:
        """One refresh; a bug shows as the report's error line over the last hosts."""
        try:
            return self.sample()
        except Exception as exc:
            debuglog.log_exception("fleet refresh failed", exc)
            last = self._last or FleetReport(self.source.url)
            error = printable(f"refresh failed: {type(exc).__name__}: {exc}")[:200]
            try:
                return fleet_frame(self._over_last_good(replace(last, error=error)),
                                   self.host.sample(), self.interval_s)
            except Exception:
                return None

    def stop(self) -> None:
        """Stop the thread (a query in flight ends by its deadline)."""
        self._ticker.stop()

    def attach(self, pid: int) -> None:
        """The fleet view reads no trainer's ring."""
        raise ValueError("the fleet view attaches to no trainer")

    def detach(self, pid: int) -> None:
        """Nothing is attached in the fleet view."""

    def add_deferred_sources(self) -> None:
        """Nothing is deferred in the fleet view."""
