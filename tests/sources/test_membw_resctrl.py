"""resctrl MBM parsing and rates on fixture trees (single group, several groups, Unavailable)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gputop.sources.membw.hardware import (
    COUNTER_MODULUS,
    ResctrlMeter,
    counter_delta,
    counter_files,
    group_dirs,
    open_resctrl,
    parse_counter,
)

FIX = Path(__file__).parent / "fixtures" / "membw" / "resctrl"


class Clock:
    """A hand-driven monotonic clock."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _bump(path: Path, by: int) -> None:
    path.write_text(f"{int(path.read_text()) + by}\n")


def test_parse_counter_keeps_the_kernels_words() -> None:
    assert parse_counter("123\n") == 123
    assert parse_counter("Unavailable\n") == "Unavailable"
    assert parse_counter("Unassigned") == "Unassigned"
    assert parse_counter("") == "empty"


def test_counter_delta_handles_wrap_and_reset() -> None:
    assert counter_delta(10, 25) == 15
    assert counter_delta(COUNTER_MODULUS - 5, 10) == 15
    assert counter_delta(1000, 10) is None


def test_groups_are_the_default_group_and_control_groups_only() -> None:
    root = FIX / "multi"
    assert [g.name for g in group_dirs(root)] == ["multi", "batch"]
    files = counter_files(root, "mbm_total_bytes")
    assert len(files) == 4 and not any("mon_groups" in str(f) for f in files)


def test_single_group_rate(tmp_path: Path) -> None:
    root = shutil.copytree(FIX / "single", tmp_path / "r")
    clock = Clock()
    meter = ResctrlMeter(root, clock)
    assert meter.read() is None
    _bump(root / "mon_data/mon_L3_00/mbm_total_bytes", 3_000_000_000)
    clock.now += 2.0
    traffic = meter.read()
    assert traffic is not None
    assert traffic.total_bytes_per_s == pytest.approx(1.5e9)
    assert traffic.read_bytes_per_s is None and traffic.note is None


def test_multi_group_sums_domains_and_control_groups(tmp_path: Path) -> None:
    root = shutil.copytree(FIX / "multi", tmp_path / "r")
    clock = Clock()
    meter, detail = open_resctrl(root)
    assert meter is not None and detail == "total"
    meter._clock = clock
    meter.read()
    _bump(root / "mon_data/mon_L3_00/mbm_total_bytes", 1000)
    _bump(root / "mon_data/mon_L3_01/mbm_total_bytes", 2000)
    _bump(root / "batch/mon_data/mon_L3_00/mbm_total_bytes", 400)
    _bump(root / "batch/mon_groups/loader/mon_data/mon_L3_00/mbm_total_bytes", 400)
    _bump(root / "mon_groups/trainer/mon_data/mon_L3_01/mbm_total_bytes", 500)
    clock.now += 1.0
    traffic = meter.read()
    assert traffic is not None and traffic.total_bytes_per_s == pytest.approx(3400)


def test_unavailable_and_unassigned_are_skipped_and_said(tmp_path: Path) -> None:
    root = shutil.copytree(FIX / "unavailable", tmp_path / "r")
    clock = Clock()
    meter, _ = open_resctrl(root)
    assert meter is not None
    meter._clock = clock
    meter.read()
    _bump(root / "mon_data/mon_L3_00/mbm_total_bytes", 5000)
    clock.now += 1.0
    traffic = meter.read()
    assert traffic is not None and traffic.total_bytes_per_s == pytest.approx(5000)
    assert traffic.note == "3 of 4 MBM counter(s) skipped: Unassigned, Unavailable"


def test_a_reset_counter_is_not_a_huge_rate(tmp_path: Path) -> None:
    root = shutil.copytree(FIX / "single", tmp_path / "r")
    clock = Clock()
    meter = ResctrlMeter(root, clock)
    meter.read()
    (root / "mon_data/mon_L3_00/mbm_total_bytes").write_text("10\n")
    clock.now += 1.0
    traffic = meter.read()
    assert traffic is not None and traffic.total_bytes_per_s is None
    assert "reset" in (traffic.note or "")


def test_local_only_and_refusals() -> None:
    meter, detail = open_resctrl(FIX / "local-only")
    assert meter is not None and meter.event == "mbm_local_bytes" and detail == "local socket only"
    assert open_resctrl(FIX / "all-unavailable") == (
        None, "resctrl: MBM gives no numbers (Unavailable)")
    assert open_resctrl(FIX / "no-monitoring")[0] is None
    assert open_resctrl(FIX / "absent") == (None, "resctrl: not mounted or no monitoring")


def test_this_machine_has_no_resctrl() -> None:
    meter, why = open_resctrl()
    if meter is not None:
        pytest.skip("resctrl is mounted with MBM here")
    assert why.startswith("resctrl:")
