"""The daemon thread the sampler, the fleet sampler and the replay tick on: one loop however
often it is started, woken early on request, ended by stop() from any thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from gputop.frames.ticker import Ticker

LIMIT_S = 30.0  # a guard against hanging, never a measurement


def _until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + LIMIT_S
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


def test_a_second_start_runs_no_second_loop_and_stop_ends_the_one() -> None:
    ticker = Ticker("test-ticker-once")
    started: list[int] = []

    def loop() -> None:
        started.append(1)
        for _ in ticker.turns():
            ticker.wait(None)

    ticker.start(loop)
    ticker.start(loop)
    _until(lambda: bool(started))
    assert len(_threads("test-ticker-once")) == 1 and ticker.running
    ticker.stop()
    _until(lambda: not _threads("test-ticker-once"))
    assert not ticker.running and started == [1]


def test_wake_cuts_the_wait_short_once_per_wake() -> None:
    ticker = Ticker("test-ticker-wake")
    turns: list[int] = []

    def loop() -> None:
        for _ in ticker.turns():
            turns.append(1)
            ticker.wait(None)  # only a wake-up (or stop) ends this wait

    ticker.start(loop)
    _until(lambda: len(turns) == 1)
    ticker.wake()
    _until(lambda: len(turns) == 2)
    ticker.wake()
    _until(lambda: len(turns) == 3)
    ticker.stop()
    assert len(turns) == 3


def test_the_loop_may_stop_itself() -> None:
    ticker = Ticker("test-ticker-self")
    ticker.start(ticker.stop)  # joining its own thread would raise
    _until(lambda: not _threads("test-ticker-self"))
    assert ticker.stopped and not ticker.running


def test_sleep_ends_at_stop_and_a_stopped_ticker_starts_again() -> None:
    ticker = Ticker("test-ticker-sleep")
    slept: list[int] = []

    def loop() -> None:
        ticker.sleep(3600)
        slept.append(1)

    ticker.start(loop)
    ticker.wake()  # no effect on sleep
    ticker.stop()
    _until(lambda: slept == [1])
    again: list[int] = []
    ticker.start(lambda: again.append(1))
    _until(lambda: again == [1])
    assert not ticker.stopped
