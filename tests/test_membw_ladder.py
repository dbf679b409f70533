"""The ladder and factory: modes, which rung wins where, and the sample it produces."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gputop.model import MemoryBandwidthSample
from gputop.sources.base import MemoryBandwidthSource
from gputop.sources.membw import MemoryBandwidthMonitor, open_membw_source
from gputop.sources.membw.estimate import Canary, CanaryEstimator, MiB

FIX = Path(__file__).parent / "fixtures" / "membw"


def test_off_gives_none_and_bad_mode_is_one_clear_error() -> None:
    assert open_membw_source("off") is None
    with pytest.raises(ValueError, match=r"--membw must be one of off, auto, estimate, not 'x'"):
        open_membw_source("x")


def test_auto_on_this_machine_falls_back_to_the_estimate() -> None:
    source = open_membw_source("auto")
    assert source is not None
    try:
        if source.source != "estimate":
            pytest.skip(f"this machine has hardware counters: {source.source}")
        assert [w.split(":")[0] for w in source.why] == ["resctrl", "perf uncore"]
        _check_protocol(source)
        sample = source.sample()  # calibrates
        assert sample.source == "estimate" and sample.confidence == "estimated"
        assert sample.peak_bytes_per_s and sample.peak_bytes_per_s > 0
        assert sample.read_bytes_per_s is None and sample.write_bytes_per_s is None
        assert "estimated" in (sample.note or "") and "resctrl" in (sample.note or "")
    finally:
        source.close()


def _check_protocol(source: MemoryBandwidthSource) -> None:
    assert callable(source.sample) and callable(source.close)


def test_auto_prefers_resctrl_and_reports_measured_total(tmp_path: Path) -> None:
    root = shutil.copytree(FIX / "resctrl/single", tmp_path / "resctrl")
    source = open_membw_source("auto", resctrl_root=root, proc_root=FIX / "proc-zen2",
                               udev_root=FIX / "udev-one", sys_root=FIX / "nowhere")
    assert source is not None and source.source == "resctrl-mbm"
    first = source.sample()
    assert first.total_bytes_per_s == 0.0  # counted since open: the fixture did not move
    counter = root / "mon_data/mon_L3_00/mbm_total_bytes"
    counter.write_text(str(int(counter.read_text()) + 10**9))
    sample = source.sample()
    assert sample.source == "resctrl-mbm" and sample.confidence == "measured"
    assert sample.total_bytes_per_s and sample.total_bytes_per_s > 0
    assert sample.psi_some_avg10 == 12.5 and sample.psi_full_avg10 == 4.25
    assert sample.expected_peak_bytes_per_s == pytest.approx(25.6e9)
    assert sample.layout == "1 of 4 slots: 16 GiB DDR4 3200 MT/s; 1 channel (B)"
    assert "one channel populated" in (sample.note or "")
    source.close()


def test_auto_with_unopenable_uncore_falls_back_with_the_reason() -> None:
    source = open_membw_source("auto", resctrl_root=FIX / "resctrl/no-monitoring",
                               sys_root=FIX / "sys-intel-imc", proc_root=FIX / "proc-paranoid2",
                               udev_root=FIX / "udev-four")
    assert source is not None
    try:
        assert source.source == "estimate"
        assert source.why[1].startswith("perf-uncore-imc: not permitted (perf_event_paranoid=2")
    finally:
        source.close()


def test_estimate_mode_skips_the_hardware_rungs(tmp_path: Path) -> None:
    root = shutil.copytree(FIX / "resctrl/single", tmp_path / "resctrl")
    source = open_membw_source("estimate", resctrl_root=root)
    assert source is not None and source.source == "estimate" and source.why == ()
    source.close()


def test_estimate_sample_carries_layout_comparison() -> None:
    estimator = CanaryEstimator(Canary(32 * MiB, 4 * MiB), period_s=0.0,
                                calibration_budget_s=0.2)
    from gputop.sources.membw.layout import read_udev
    monitor = MemoryBandwidthMonitor(None, estimator, FIX / "proc-zen2",
                                     read_udev(FIX / "udev-one"))
    first = monitor.sample()
    assert first.pressure is None and first.canary_bytes_per_s is None
    second = monitor.sample()
    assert isinstance(second, MemoryBandwidthSample)
    assert second.canary_bytes_per_s and second.pressure is not None
    assert "of what 1 module at 3200 MT/s should give (25.6 GB/s)" in (second.note or "")
    monitor.close()
