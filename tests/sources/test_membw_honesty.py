"""No rung can measure -> `pressure: null` with the reason (the help shows it beside
`membw n/a (… ? for why)`); never a number.

The canary counts only when its buffer is at least twice the last-level cache and fits its
resident budget; a shown number says what it is relative to.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from gputop.core.model import MemoryBandwidthSample
from gputop.export.snapshot import membw_json
from gputop.export.text import _membw
from gputop.sources.membw import MemoryBandwidthMonitor, open_membw_source
from gputop.sources.membw.canary import (
    CANARY_BUDGET,
    Calibration,
    Canary,
    MiB,
    plan_canary,
)
from gputop.sources.membw.estimate import CanaryEstimator
from gputop.tui.history import History
from gputop.tui.views.host import membw_line, membw_why
from tests.helpers.membw import sys_with_llc
from tests.helpers.tui import frames

FIX = Path(__file__).parent / "fixtures" / "membw"


def _text(line) -> str:
    return "".join(text for text, _ in line)


def _open(tmp_path: Path, llc: str | None, mode: str = "auto") -> MemoryBandwidthMonitor:
    source = open_membw_source(
        mode, sys_root=sys_with_llc(tmp_path / "sys", llc), proc_root=FIX / "proc-zen2",
        resctrl_root=FIX / "nowhere", udev_root=FIX / "udev-none",
        state_dir=tmp_path / "state",
    )
    assert source is not None
    return source


def test_a_big_cache_turns_the_canary_off_and_the_sample_says_why(tmp_path: Path) -> None:
    source = _open(tmp_path, "491520K")  # this VM's 480 MiB LLC
    try:
        assert source.estimator is None  # nothing mapped, no calibration thread
        for _ in range(2):
            sample = source.sample()
            assert sample.pressure is None and sample.peak_bytes_per_s is None
            assert sample.source == "none" and sample.confidence == "unavailable"
            note = sample.note or ""
            assert "\n" not in note
            assert "960 MiB (2x the 480 MiB LLC)" in note
            assert f"{CANARY_BUDGET // MiB} MiB budget" in note
            assert "resctrl" in note and "uncore" in note
            assert sample.psi_some_avg10 == 12.5  # PSI still reads
    finally:
        source.close()


def test_estimate_mode_is_just_as_honest(tmp_path: Path) -> None:
    source = _open(tmp_path, "491520K", mode="estimate")
    try:
        sample = source.sample()
        assert sample.pressure is None and sample.source == "none"
        assert (sample.note or "").startswith("canary off: it would need 960 MiB")
    finally:
        source.close()


def test_an_unknown_cache_size_turns_the_canary_off(tmp_path: Path) -> None:
    source = _open(tmp_path, None, mode="estimate")
    try:
        sample = source.sample()
        assert sample.pressure is None
        assert "the LLC size is unknown" in (sample.note or "")
    finally:
        source.close()


def test_the_canary_buffer_is_twice_the_cache_and_within_budget(tmp_path: Path) -> None:
    plan = plan_canary(6 * MiB)
    assert plan.footprint == 12 * MiB and plan.footprint <= CANARY_BUDGET
    assert plan_canary(100 * MiB, budget=256 * MiB).footprint == 200 * MiB
    assert plan_canary(100 * MiB).footprint is None
    source = _open(tmp_path, "6144K")
    try:
        assert source.source == "estimate" and source.estimator is not None
        assert [w.split(":")[0] for w in source.why] == ["resctrl", "perf uncore", "perf core"]
        canary = source.estimator.canary
        assert 2 * 6 * MiB <= canary.footprint <= CANARY_BUDGET
        assert canary.chunks >= 2  # calibration can copy chunks side by side
    finally:
        source.close()


def test_na_is_rendered_with_the_reason_and_no_number() -> None:
    why = "canary off: it would need 960 MiB (2x the 480 MiB LLC), over its 16 MiB budget"
    sample = MemoryBandwidthSample(source="none", confidence="unavailable", note=why,
                                   psi_some_avg10=0.0, psi_full_avg10=0.0)
    history = History()
    history.add(frames("idle", 1)[0])
    line = _text(membw_line(sample, history, 200))
    assert line.startswith("membw n/a (no counters; ? for why)")  # the reason: in the help
    assert membw_why(sample) == why
    assert "%" not in line and "pressure" not in line
    text = _membw_text(sample)
    assert text.startswith(f"MEMORY BANDWIDTH n/a — {why}") and "pressure" not in text
    data = json.loads(json.dumps(membw_json(sample)))
    assert data["pressure"] is None and data["note"] == why and data["relative_to"] is None


def _membw_text(sample: MemoryBandwidthSample) -> str:
    from dataclasses import replace

    return _membw(replace(frames("idle", 1)[0], memory_bandwidth=sample))


def test_a_shown_estimate_says_its_source_and_what_it_is_relative_to() -> None:
    def quick(canary: Canary, budget_s: float, stop: threading.Event) -> Calibration:
        return Calibration(4e9, 8e9, 2, 0.0)

    estimator = CanaryEstimator(Canary(4 * MiB, 1 * MiB), period_s=0.0, calibrator=quick)
    monitor = MemoryBandwidthMonitor(None, estimator, FIX / "proc-zen2")
    try:
        monitor.sample()
        assert estimator.wait_calibrated(10)
        sample = monitor.sample()
        assert sample.pressure is not None and sample.source == "estimate"
        assert sample.relative_to is not None and "idle peak" in sample.relative_to
        history = History()
        history.add(frames("idle", 1)[0])
        line = _text(membw_line(sample, history, 250))
        assert "[estimate" in line and sample.relative_to in line
        assert sample.relative_to in _membw_text(sample)
        doc = membw_json(sample)
        assert doc is not None and doc["relative_to"] == sample.relative_to
    finally:
        monitor.close()


def test_a_measured_pressure_says_it_is_relative_to_the_modules_peak(tmp_path: Path) -> None:
    import shutil

    root = shutil.copytree(FIX / "resctrl/single", tmp_path / "resctrl")
    source = open_membw_source("auto", resctrl_root=root, proc_root=FIX / "proc-zen2",
                               udev_root=FIX / "udev-one", sys_root=FIX / "nowhere")
    assert source is not None
    try:
        source.sample()
        counter = root / "mon_data/mon_L3_00/mbm_total_bytes"
        counter.write_text(str(int(counter.read_text()) + 10**9))
        sample = source.sample()
        assert sample.pressure is not None
        assert sample.relative_to == "the modules' theoretical peak 25.6 GB/s (udev)"
        line = _text(membw_line(sample, History(), 250))
        assert line.startswith("membw ") and "[resctrl-mbm vs the modules'" in line
        assert sample.total_bytes_per_s is not None
        assert _membw_text(sample).count("total ") == 1  # resctrl gives no read/write split
    finally:
        source.close()


def test_na_line_is_short_and_psi_still_shows_where_it_fits() -> None:
    why = ("canary off: it would need 960 MiB (2x the 480 MiB LLC), over its 16 MiB budget; "
           "resctrl: not mounted or no monitoring; perf uncore: no memory-controller PMU")
    sample = MemoryBandwidthSample(source="none", confidence="unavailable", note=why,
                                   psi_some_avg10=2.5, psi_full_avg10=0.0)
    for width in (80, 120, 160):
        line = _text(membw_line(sample, History(), width))
        assert line.startswith("membw n/a (no counters; ? for why)")
        assert "PSI 2.5/0.0" in line and "majflt" in line and len(line) <= width
    assert "canary" not in _text(membw_line(sample, History(), 400))
    assert membw_why(sample) == why  # whole, for the help
