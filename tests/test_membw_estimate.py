"""The estimate rung: PSI, vmstat, LLC size, the canary, calibration and the CPU budget."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gputop.sources.membw.estimate import (
    CPU_BUDGET,
    Canary,
    CanaryEstimator,
    MiB,
    VmstatReader,
    calibrate,
    footprint_for,
    llc_bytes,
    next_delay,
    parse_psi,
    pressure_of,
    read_psi,
)

FIX = Path(__file__).parent / "fixtures" / "membw"


class Clock:
    """A hand-driven monotonic clock."""

    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_psi_from_fixture_and_missing() -> None:
    assert read_psi(FIX / "proc-zen2") == (12.5, 4.25)
    assert read_psi(FIX / "proc-nopsi") == (None, None)
    assert parse_psi("some avg10=1.5 avg60=0 avg300=0 total=1\n") == (1.5, None)


def test_vmstat_rates(tmp_path: Path) -> None:
    proc = shutil.copytree(FIX / "proc-zen2", tmp_path / "proc")
    clock = Clock()
    reader = VmstatReader(proc, clock)
    assert reader.read() == (None, None)
    (proc / "vmstat").write_text("pswpin 1400\npgmajfault 530\n")
    clock.now += 2.0
    assert reader.read() == (200.0, 15.0)
    (proc / "vmstat").write_text("pswpin 10\npgmajfault 530\n")  # counter reset
    clock.now += 1.0
    assert reader.read() == (None, 0.0)


def test_llc_size_and_footprint() -> None:
    assert llc_bytes(FIX / "sys-cache") == 36 * MiB
    assert llc_bytes(FIX / "nowhere") is None
    assert footprint_for(36 * MiB) == 128 * MiB
    assert footprint_for(4 * MiB) == 32 * MiB
    assert footprint_for(None) == 128 * MiB
    assert llc_bytes() is not None  # this machine's sysfs


def test_pressure_and_budget_helpers() -> None:
    assert pressure_of(5.0, 10.0) == 0.5
    assert pressure_of(12.0, 10.0) == 0.0
    assert pressure_of(-1.0, 10.0) == 1.0
    assert next_delay(5.0, 0.002) == 5.0
    assert next_delay(5.0, 0.012) == pytest.approx(0.012 / CPU_BUDGET)


def test_canary_copies_real_memory_and_rotates() -> None:
    canary = Canary(32 * MiB, 4 * MiB)
    assert canary.chunks == 4 and canary.footprint == 32 * MiB
    bandwidth, cost = canary.copy()
    assert bandwidth > 0 and cost > 0
    assert canary._dst[:4 * MiB] == canary._src[:4 * MiB]
    assert canary._dst[4 * MiB:4 * MiB + 16] == b"\xa5" * 16  # next chunk not copied yet
    canary.close()
    with pytest.raises(ValueError):
        canary.copy()


def test_calibration_measures_single_and_parallel() -> None:
    canary = Canary(32 * MiB, 4 * MiB)
    result = calibrate(canary, budget_s=0.3, threads=2)
    assert result.single_bytes_per_s > 0
    assert result.aggregate_bytes_per_s >= result.single_bytes_per_s
    assert result.threads == 2


def test_estimator_waits_for_its_period_and_smooths() -> None:
    clock = Clock()
    estimator = CanaryEstimator(Canary(32 * MiB, 4 * MiB), period_s=5.0, clock=clock,
                                calibration_budget_s=0.2)
    estimator.tick()  # calibrates only
    assert estimator.calibration is not None and estimator.runs == 0
    estimator.tick()
    assert estimator.runs == 0  # not due yet
    clock.now += 5.0
    estimator.tick()
    assert estimator.runs == 1 and estimator.pressure is not None
    assert 0.0 <= estimator.pressure <= 1.0
    estimator.tick()
    assert estimator.runs == 1


def test_peak_ratchets_up_when_calibration_ran_under_load() -> None:
    estimator = CanaryEstimator(Canary(32 * MiB, 4 * MiB), calibration_budget_s=0.2)
    estimator.calibrate()
    estimator.peak = 1.0  # as if calibrated on a machine that was saturated
    for _ in range(5):
        estimator.measure()
    assert estimator.peak > 1.0
    assert estimator.pressure is not None and estimator.pressure < 0.5


def test_next_canary_is_scheduled_within_the_cpu_budget() -> None:
    """After each canary the next one waits the period, or longer if the copy cost more."""
    clock = Clock()
    estimator = CanaryEstimator(Canary(64 * MiB), clock=clock, calibration_budget_s=0.2)
    estimator.tick()
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
