"""The ladder and factory: modes, which rung wins where, and the sample it produces."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gputop.core.model import MemoryBandwidthSample
from gputop.sources.base import MemoryBandwidthSource
from gputop.sources.membw import MemoryBandwidthMonitor, open_membw_source
from gputop.sources.membw.canary import Calibration, Canary, MiB
from gputop.sources.membw.corepmu import INTEL_CACHE_MISSES, LLC_LOAD_MISSES
from gputop.sources.membw.estimate import CanaryEstimator
from tests.helpers.membw import sys_with_llc
from tests.helpers.perf import FakePerf

FIX = Path(__file__).parent / "fixtures" / "membw"


def test_off_gives_none_and_bad_mode_is_one_clear_error() -> None:
    assert open_membw_source("off") is None
    with pytest.raises(ValueError, match=r"--membw must be one of off, auto, estimate, not 'x'"):
        open_membw_source("x")


def test_auto_on_this_machine_falls_back_to_the_estimate_or_says_why_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))  # no idle peak kept from before
    source = open_membw_source("auto")
    assert source is not None
    try:
        if source.source not in ("estimate", "none"):
            pytest.skip(f"this machine has hardware counters: {source.source}")
        _check_protocol(source)
        if source.source == "none":  # a cache too big for the canary's budget (this VM)
            assert [w.split(":")[0] for w in source.why] == ["canary off", "resctrl",
                                                              "perf uncore", "perf core"]
            sample = source.sample()
            assert sample.pressure is None and sample.note == "; ".join(source.why)
            return
        assert [w.split(":")[0] for w in source.why] == ["resctrl", "perf uncore", "perf core"]
        assert source.estimator is not None
        assert source.estimator.canary._map is None and source.estimator.thread is None
        first = source.sample()  # starts calibration, does not wait for it
        assert first.confidence in ("calibrating", "estimated")
        assert source.estimator.thread is not None
        assert source.estimator.wait_calibrated(10)
        sample = source.sample()
        assert sample.source == "estimate"
        if sample.confidence == "uncalibrated":  # the machine was busy as it calibrated
            assert "while the machine was busy" in (sample.note or "")
            assert sample.pressure is None and sample.peak_bytes_per_s is None
        else:
            assert sample.confidence == "estimated"
            assert sample.peak_bytes_per_s and sample.peak_bytes_per_s > 0
            assert "estimated" in (sample.note or "")
        assert sample.read_bytes_per_s is None and sample.write_bytes_per_s is None
        assert "resctrl" in (sample.note or "")
    finally:
        source.close()
    assert not source.estimator.thread.is_alive()


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
    no_core_events = FakePerf(unsupported={INTEL_CACHE_MISSES.config, LLC_LOAD_MISSES.config})
    source = open_membw_source("auto", resctrl_root=FIX / "resctrl/no-monitoring",
                               sys_root=FIX / "sys-intel-imc", proc_root=FIX / "proc-paranoid2",
                               udev_root=FIX / "udev-four", perf=no_core_events)
    assert source is not None
    try:
        assert source.source == "none"  # the fixture tree has no cache sizes: no canary
        assert source.why[0].startswith("canary off: the LLC size is unknown")
        assert source.why[2].startswith("perf-uncore-imc: not permitted (perf_event_paranoid=2")
        assert source.why[3].startswith("perf core: all CPUs not permitted "
                                        "(perf_event_paranoid=2; CPU-wide counters need <= 0")
        assert "own processes no usable event (cache-misses: not supported" in source.why[3]
    finally:
        source.close()


# Opens the ladder in a fresh interpreter and prints the membw modules it imported and its why.
OPEN_AND_LIST_MODULES = """
import sys
from gputop.sources.membw import open_membw_source
root = sys.argv[1]
source = open_membw_source("auto", sys_root=root + "/sys", resctrl_root=root + "/resctrl",
                           udev_root=root + "/udev", state_dir=root + "/state")
print(sorted(m for m in sys.modules if m.startswith("gputop.sources.membw.")))
print(source.why if source is not None else None)
"""


def test_rungs_that_cannot_apply_are_never_imported(tmp_path: Path) -> None:
    """No PMU listed in /sys and no resctrl mount: the perf rungs' modules stay unimported."""
    sys_with_llc(tmp_path / "sys", "4096K")
    done = subprocess.run([sys.executable, "-c", OPEN_AND_LIST_MODULES, str(tmp_path)],
                          capture_output=True, text=True, timeout=60, check=True)
    modules_line, why_line = done.stdout.splitlines()
    never = {"perf_event", "uncore", "corepmu"}
    loaded = {m.rsplit(".", 1)[1] for m in ast.literal_eval(modules_line)}
    assert loaded & never == set()
    assert "hardware" in loaded  # the first rung is tried, so its module is imported
    assert ast.literal_eval(why_line) == (
        "resctrl: not mounted or no monitoring",
        "perf uncore: no memory-controller PMU",
        "perf core: no core PMU (none in /sys/bus/event_source/devices: this machine or its "
        "hypervisor exposes no CPU counters)",
    )


def test_estimate_mode_skips_the_hardware_rungs(tmp_path: Path) -> None:
    root = shutil.copytree(FIX / "resctrl/single", tmp_path / "resctrl")
    source = open_membw_source("estimate", resctrl_root=root,
                               sys_root=sys_with_llc(tmp_path / "sys", "6144K"),
                               state_dir=tmp_path / "state")
    assert source is not None and source.source == "estimate" and source.why == ()
    source.close()


def test_samples_say_calibrating_until_calibration_is_done() -> None:
    gate = threading.Event()

    def held(canary: Canary, budget_s: float, stop: threading.Event) -> Calibration:
        gate.wait(10)
        return Calibration(4e9, 8e9, 2, 0.0)

    estimator = CanaryEstimator(Canary(32 * MiB, 4 * MiB), period_s=0.0, calibrator=held)
    from gputop.sources.membw.dimm_slots import read_udev
    monitor = MemoryBandwidthMonitor(None, estimator, FIX / "proc-zen2",
                                     read_udev(FIX / "udev-one"), why=("resctrl: off",))
    first = monitor.sample()
    again = monitor.sample()
    for sample in (first, again):
        assert sample.source == "estimate" and sample.confidence == "calibrating"
        assert sample.pressure is None and sample.canary_bytes_per_s is None
        assert sample.psi_some_avg10 == 12.5  # PSI and vmstat do not wait
        assert "calibrating" in (sample.note or "") and "resctrl: off" in (sample.note or "")
    gate.set()
    assert estimator.wait_calibrated(10)
    second = monitor.sample()
    assert isinstance(second, MemoryBandwidthSample)
    assert second.canary_bytes_per_s and second.pressure is not None
    assert second.confidence == "estimated" and second.peak_bytes_per_s == 4e9
    assert "of what 1 module at 3200 MT/s should give (25.6 GB/s)" in (second.note or "")
    monitor.close()
    assert estimator.thread is not None and not estimator.thread.is_alive()
