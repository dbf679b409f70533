"""The idle peak outlives the process: `--once` and a start under load compare against it.

A calibration taken while the machine is busy is not an idle peak: the sample says so
(pressure null, with the reason) until a quiet moment gives one; quiet peaks are kept.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from gputop.sources.membw import MemoryBandwidthMonitor, open_membw_source
from gputop.sources.membw.canary import Calibration, Canary, MiB
from gputop.sources.membw.estimate import RECALIBRATE_AFTER_S, CanaryEstimator
from gputop.sources.membw.idlepeak import FILE_NAME, Key, PeakStore, QuietMeter
from tests.helpers.membw import sys_with_llc

FIX = Path(__file__).parent / "fixtures" / "membw"
KEY: Key = {"machine": "test"}


class Clock:
    """A hand-driven monotonic clock."""

    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


class FakeQuiet:
    """Says the machine is busy while `busy` is set (a reason), quiet otherwise."""

    def __init__(self, busy: str | None = None) -> None:
        self.busy = busy
        self.windows = 0

    def start(self) -> None:
        self.windows += 1

    def verdict(self) -> str | None:
        return self.busy


class CountingCalibrator:
    """Calibrates at once to `single` bytes/s (twice that in aggregate), counting its calls."""

    def __init__(self, single: float) -> None:
        self.single = single
        self.calls: list[int] = []

    def __call__(self, canary: Canary, budget_s: float, stop: threading.Event) -> Calibration:
        self.calls.append(1)
        return Calibration(self.single, 2 * self.single, 2, 0.0)


def _estimator(tmp_path: Path, quiet: FakeQuiet, single: float = 4e9,
               clock: Clock | None = None,
               calibrator: CountingCalibrator | None = None) -> CanaryEstimator:
    return CanaryEstimator(Canary(4 * MiB, 1 * MiB), period_s=0.0, clock=clock or Clock(),
                           calibrator=calibrator or CountingCalibrator(single),
                           quiet=quiet, memory=PeakStore(tmp_path / "state", KEY))


def test_a_kept_peak_gives_once_a_reading_at_the_first_tick_without_calibrating(
    tmp_path: Path,
) -> None:
    PeakStore(tmp_path / "state", KEY).save(Calibration(1e15, 2e15, 2, 0.0))
    calibrator = CountingCalibrator(4e9)
    estimator = _estimator(tmp_path, FakeQuiet(busy="load 1.00 per core"), calibrator=calibrator)
    monitor = MemoryBandwidthMonitor(None, estimator, FIX / "proc-zen2")
    try:
        sample = monitor.sample()  # the first and, for --once, the only tick that counts
        assert estimator.thread is None  # no calibration: the kept peak is the reference
        assert not calibrator.calls
        assert sample.confidence == "estimated" and sample.pressure is not None
        assert sample.pressure > 0.99  # a real copy is far below a 1 PB/s "idle peak"
        assert sample.relative_to is not None
        assert "kept from an earlier quiet run" in sample.relative_to
    finally:
        monitor.close()


def test_a_start_under_load_without_a_kept_peak_is_null_with_the_reason(
    tmp_path: Path,
) -> None:
    estimator = _estimator(tmp_path, FakeQuiet(busy="other processes used 48% of the CPUs"))
    monitor = MemoryBandwidthMonitor(None, estimator, FIX / "proc-zen2")
    try:
        monitor.sample()
        assert estimator.wait_calibrated(10)
        for _ in range(3):
            sample = monitor.sample()
            assert sample.pressure is None and sample.confidence == "uncalibrated"
            assert sample.relative_to is None
            assert "busy (other processes used 48% of the CPUs)" in (sample.note or "")
        assert not (tmp_path / "state" / FILE_NAME).exists()  # a busy peak is not kept
    finally:
        monitor.close()


def test_a_busy_calibration_is_retried_at_a_quiet_moment_and_then_kept(
    tmp_path: Path,
) -> None:
    quiet, clock = FakeQuiet(busy="load 0.90 per core"), Clock()
    calibrator = CountingCalibrator(4e9)
    estimator = _estimator(tmp_path, quiet, clock=clock, calibrator=calibrator)
    try:
        estimator.tick()
        assert estimator.wait_calibrated(10) and estimator.unsettled == "load 0.90 per core"
        estimator.tick()  # busy: the retry waits a while, not every tick
        quiet.busy = None
        clock.now += RECALIBRATE_AFTER_S
        estimator.tick()
        assert estimator.wait_calibrated(10)
        assert estimator.unsettled is None
        assert estimator.origin == "measured at a quiet moment"
        assert len(calibrator.calls) == 2
        kept = PeakStore(tmp_path / "state", KEY).load()
        assert kept is not None and kept.single_bytes_per_s == estimator.peak
    finally:
        estimator.close()


def test_a_quiet_ratchet_raises_the_kept_peak_and_never_lowers_it(tmp_path: Path) -> None:
    store = PeakStore(tmp_path / "state", KEY)
    estimator = _estimator(tmp_path, FakeQuiet(), single=1.0)  # a calibration far too low
    try:
        estimator.calibrate()
        kept = store.load()
        assert kept is not None and kept.single_bytes_per_s == 1.0
        for _ in range(5):
            estimator.measure()
        kept = store.load()
        assert kept is not None and kept.single_bytes_per_s == estimator.peak > 1.0
    finally:
        estimator.close()
    lower = _estimator(tmp_path, FakeQuiet(), single=0.5)
    assert lower.peak == estimator.peak  # loaded, not recalibrated lower
    lower.close()


def test_open_keeps_the_peak_in_the_state_dir_and_a_second_open_uses_it(
    tmp_path: Path,
) -> None:
    sys_root = sys_with_llc(tmp_path / "sys", "2048K")
    proc = shutil.copytree(FIX / "proc-nopsi", tmp_path / "proc")
    (proc / "meminfo").write_text("MemTotal:       24683624 kB\n")
    (proc / "sys/kernel/random").mkdir(parents=True)
    (proc / "sys/kernel/random/boot_id").write_text("abc\n")

    def opened() -> MemoryBandwidthMonitor:
        source = open_membw_source("estimate", sys_root=sys_root, proc_root=proc,
                                   udev_root=FIX / "udev-none", state_dir=tmp_path / "state")
        assert source is not None and source.estimator is not None
        return source

    first = opened()
    try:
        first.sample()
        assert first.estimator is not None and first.estimator.wait_calibrated(30)
        assert first.estimator.unsettled is None  # the fixture /proc is a quiet machine
    finally:
        first.close()
    assert (tmp_path / "state" / FILE_NAME).exists()
    second = opened()
    try:
        sample = second.sample()
        assert second.estimator is not None and second.estimator.thread is None
        assert sample.pressure is not None
        assert "kept from an earlier quiet run" in (sample.relative_to or "")
    finally:
        second.close()
    (proc / "sys/kernel/random/boot_id").write_text("rebooted\n")
    third = opened()
    try:
        assert third.sample().confidence == "calibrating"  # a new boot calibrates again
    finally:
        third.close()


def _proc(root: Path, load: str, busy_jiffies: int, psi: float = 0.0) -> Path:
    root.mkdir(exist_ok=True)
    (root / "loadavg").write_text(f"{load} 0.50 0.40 1/200 4242\n")
    (root / "stat").write_text(f"cpu  {busy_jiffies} 0 0 900000 0 0 0 0 0 0\n")
    (root / "pressure").mkdir(exist_ok=True)
    (root / "pressure/memory").write_text(
        f"some avg10={psi:.2f} avg60=0.00 avg300=0.00 total=0\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    return root


@pytest.mark.parametrize(("load", "others_s", "own_s", "psi", "expected"), [
    ("0.10", 0.1, 0.0, 0.0, None),
    ("0.10", 1.0, 0.0, 0.0, "other processes used 50% of the CPUs"),  # a hog started now
    ("0.10", 1.0, 0.95, 0.0, None),  # our own calibration's CPU time does not count
    ("1.30", 0.0, 0.0, 0.0, "load 0.65 per core"),
    ("0.10", 0.0, 0.0, 4.5, "memory PSI 4.5 %"),
])
def test_quiet_meter_reads_load_psi_and_what_others_used(
    tmp_path: Path, load: str, others_s: float, own_s: float, psi: float, expected: str | None,
) -> None:
    import os

    hz = os.sysconf("SC_CLK_TCK")
    proc = _proc(tmp_path / "proc", load, 10_000, psi)
    own, clock = [5.0], Clock()
    meter = QuietMeter(proc, cpus=2, own=lambda: own[0], clock=clock)
    meter.start()
    clock.now += 1.0
    own[0] += own_s
    _proc(proc, load, 10_000 + round(others_s * hz), psi)
    assert meter.verdict() == expected


def test_quiet_meter_without_proc_files_is_never_quiet(tmp_path: Path) -> None:
    meter = QuietMeter(tmp_path, cpus=2)
    meter.start()
    assert meter.verdict() == "load average unknown; CPU use unknown"
