"""The canary (mapped on first use, cache-cold by rotation) and its background calibration."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from gputop.sources.membw.canary import Calibration, Canary, MiB, calibrate
from gputop.sources.membw.estimate import CPU_BUDGET, CanaryEstimator

# Real copies timed against a real peak (the pressure bounds below): a test beside it moves them.
pytestmark = pytest.mark.alone


class Clock:
    """A hand-driven monotonic clock."""

    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


class GatedCalibrator:
    """Stands in for calibrate(): waits until the test opens the gate (or close() stops it)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.stopped = False

    def __call__(self, canary: Canary, budget_s: float, stop: threading.Event) -> Calibration:
        self.entered.set()
        while not self.gate.wait(0.01):
            if stop.is_set():
                self.stopped = True
                break
        return Calibration(4e9, 8e9, 2, 0.0)


def mapping_rss(address: int) -> int:
    """Resident bytes of the mapping that starts at `address` (from /proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split(maxsplit=1)[0]
        if "-" in head and not head.endswith(":"):
            inside = int(head.split("-")[0], 16) == address
        elif inside and head == "Rss:":
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no mapping at {address:#x}")


def test_canary_maps_nothing_until_used_then_copies_real_memory_and_rotates() -> None:
    canary = Canary(32 * MiB, 4 * MiB)
    assert canary.chunks == 4 and canary.footprint == 32 * MiB
    assert canary._map is None  # constructing it costs nothing
    bandwidth, cost = canary.copy()
    assert bandwidth > 0 and cost > 0
    assert canary._map is not None
    assert mapping_rss(canary._src) == 32 * MiB  # filled: no page faults in a timed copy
    half = 16 * MiB
    assert canary._map[half : half + 4 * MiB] == canary._map[: 4 * MiB]
    assert canary._map[half + 4 * MiB : half + 4 * MiB + 16] == b"\xa5" * 16  # next: not yet
    canary.copy()
    assert canary._map[half + 4 * MiB : half + 8 * MiB] == canary._map[4 * MiB : 8 * MiB]
    canary.close()
    assert canary._map is None
    with pytest.raises(ValueError):
        canary.copy()


def test_calibration_measures_single_and_parallel_and_stops_when_asked() -> None:
    canary = Canary(32 * MiB, 4 * MiB)
    result = calibrate(canary, budget_s=0.3, threads=2)
    assert result.single_bytes_per_s > 0
    assert result.aggregate_bytes_per_s >= result.single_bytes_per_s
    assert result.threads == 2
    stop = threading.Event()
    stop.set()
    assert calibrate(canary, budget_s=30.0, threads=2, stop=stop).single_bytes_per_s == 0.0
    canary.close()


def test_a_budget_spent_before_the_first_timed_copy_still_measures_one() -> None:
    """On a loaded box the warm-up copies can outlast the budget: one copy is still timed
    (a calibration of 0 bytes/s would say nothing), unless calibration was asked to stop."""
    canary = Canary(32 * MiB, 4 * MiB)
    try:
        result = calibrate(canary, budget_s=1e-9, threads=2)
        assert result.single_bytes_per_s > 0
        assert result.aggregate_bytes_per_s >= result.single_bytes_per_s
    finally:
        canary.close()


def test_first_tick_starts_calibration_without_waiting_and_canaries_follow() -> None:
    calibrator = GatedCalibrator()
    clock = Clock()
    estimator = CanaryEstimator(Canary(32 * MiB, 4 * MiB), clock=clock, calibrator=calibrator)
    estimator.tick()  # returns while the calibrator is still held at its gate
    assert calibrator.entered.wait(10)
    thread = estimator.thread
    assert thread is not None and thread.daemon and thread.is_alive()
    assert estimator.calibrating and estimator.pressure is None
    estimator.tick()
    assert estimator.thread is thread and estimator.runs == 0  # one thread, no canary yet
    calibrator.gate.set()
    assert estimator.wait_calibrated(10)
    assert not thread.is_alive() and estimator.peak == 4e9
    estimator.tick()  # the first canary is due as soon as calibration ends
    assert estimator.runs == 1 and estimator.pressure is not None
    estimator.close()


def test_close_stops_and_joins_a_running_calibration() -> None:
    calibrator = GatedCalibrator()
    estimator = CanaryEstimator(Canary(32 * MiB, 4 * MiB), calibrator=calibrator)
    estimator.tick()
    assert calibrator.entered.wait(10)
    thread = estimator.thread
    assert thread is not None
    estimator.close()
    assert calibrator.stopped and not thread.is_alive()
    assert estimator.calibration is None and estimator.canary.closed
    estimator.tick()  # a closed estimator starts nothing
    assert estimator.thread is thread


def test_a_canary_waits_for_calibration_to_finish() -> None:
    calibrator = GatedCalibrator()
    estimator = CanaryEstimator(Canary(32 * MiB, 4 * MiB), calibrator=calibrator)
    estimator.tick()
    assert calibrator.entered.wait(10)
    measuring = threading.Thread(target=estimator.measure)
    measuring.start()
    measuring.join(0.2)
    assert measuring.is_alive() and estimator.runs == 0  # held by the calibration's lock
    calibrator.gate.set()
    measuring.join(10)
    assert not measuring.is_alive() and estimator.runs == 1
    estimator.close()


def test_a_failed_calibration_is_reported_not_raised() -> None:
    def broken(canary: Canary, budget_s: float, stop: threading.Event) -> Calibration:
        raise OSError(12, "Cannot allocate memory")

    estimator = CanaryEstimator(Canary(32 * MiB, 4 * MiB), calibrator=broken)
    estimator.tick()
    assert not estimator.wait_calibrated(10)
    assert not estimator.calibrating
    assert estimator.failure == "canary unavailable: [Errno 12] Cannot allocate memory"
    estimator.close()


def test_estimator_waits_for_its_period_and_smooths() -> None:
    clock = Clock()
    estimator = CanaryEstimator(Canary(32 * MiB, 4 * MiB), period_s=5.0, clock=clock,
                                calibration_budget_s=0.2)
    estimator.calibrate()
    estimator.tick()
    assert estimator.runs == 1 and estimator.pressure is not None
    assert 0.0 <= estimator.pressure <= 1.0
    # The period, or longer where the copy cost more than the budget allows: a copy slowed
    # by a busy host (over 5 ms of wall time here) waits longer, so the clock goes to when
    # the canary is due, not 5 s on.
    due = estimator._due
    assert due - clock.now >= 5.0
    clock.now = due - 0.001
    estimator.tick()
    assert estimator.runs == 1  # not due yet
    clock.now = due
    estimator.tick()
    assert estimator.runs == 2
    estimator.close()


def test_peak_ratchets_up_when_calibration_ran_under_load() -> None:
    estimator = CanaryEstimator(Canary(32 * MiB, 4 * MiB), calibration_budget_s=0.2)
    estimator.calibrate()
    estimator.peak = 1.0  # as if calibrated on a machine that was saturated
    for _ in range(5):
        estimator.measure()
    assert estimator.peak > 1.0
    assert estimator.pressure is not None and estimator.pressure < 0.5
    estimator.close()


def test_next_canary_is_scheduled_within_the_cpu_budget() -> None:
    """After each canary the next one waits the period, or longer if the canary cost more."""
    clock = Clock()
    estimator = CanaryEstimator(Canary(64 * MiB), clock=clock, calibration_budget_s=0.2)
    estimator.calibrate()
    for _ in range(3):
        clock.now = estimator._due
        before = estimator.runs
        estimator.tick()
        assert estimator.runs == before + 1
        wait = estimator._due - clock.now
        assert wait >= estimator.period_s
        assert estimator._last_cost / wait <= CPU_BUDGET * (1 + 1e-9)
    runs = estimator.runs
    clock.now = estimator._due - 0.001
    estimator.tick()
    assert estimator.runs == runs
    estimator.close()
