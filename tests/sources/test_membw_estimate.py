"""The estimate rung: PSI, vmstat, LLC size, the pressure helpers and the CPU budget."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gputop.sources.membw.canary import CANARY_BUDGET, MiB, llc_bytes, plan_canary
from gputop.sources.membw.estimate import (
    CPU_BUDGET,
    VmstatReader,
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
    assert plan_canary(36 * MiB).footprint is None  # 72 MiB would be over budget
    assert plan_canary(36 * MiB, budget=128 * MiB)[:2] == (72 * MiB, 8 * MiB)
    assert plan_canary(4 * MiB)[:2] == (8 * MiB, 1 * MiB)
    assert plan_canary(None).footprint is None
    assert plan_canary(CANARY_BUDGET // 2).footprint == CANARY_BUDGET
    assert llc_bytes() is not None  # this machine's sysfs


def test_pressure_and_budget_helpers() -> None:
    assert pressure_of(5.0, 10.0) == 0.5
    assert pressure_of(12.0, 10.0) == 0.0
    assert pressure_of(-1.0, 10.0) == 1.0
    assert next_delay(5.0, 0.002) == 5.0
    assert next_delay(5.0, 0.012) == pytest.approx(0.012 / CPU_BUDGET)
