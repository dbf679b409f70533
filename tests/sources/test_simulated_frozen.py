"""The simulated GPUs read exactly as they did before their sampling was made cheaper:
every field of every device at many ticks, for every scenario, against digests written
once from the old algorithm (commit ed9dba1); and a tick draws no more than it needs."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest

from gputop.core.model import GpuReport, GpuSample
from gputop.sources import simulated
from gputop.sources.simulated import MAX_DEVICES, SCENARIOS, SimulatedGpuSource

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

D = TypeVar("D", bound="DataclassInstance")

FIXTURE = Path(__file__).parent / "fixtures" / "simulated" / "reports.json"
TICKS = 40
FAR_TICKS = (1000, 123_456, 10**9)
OWNERS = (4242, 4343)


def canonical(report: GpuReport) -> str:
    """Every value of the report, floats exactly (repr round-trips them)."""
    gpus = tuple(
        tuple((f.name, getattr(g, f.name)) for f in dataclasses.fields(GpuSample))
        for g in report.gpus)
    return repr((report.source, report.note, report.driver_version, report.scenario, gpus))


def digest(report: GpuReport) -> str:
    return hashlib.sha256(canonical(report).encode()).hexdigest()[:20]


def cases() -> dict[str, list[str]]:
    """Case name -> the digest of each report, in order."""
    out = {}
    for scenario in SCENARIOS:
        for seed in (0, 7):
            count = MAX_DEVICES if scenario == "mixed" else 3
            owners = OWNERS if seed == 0 else ()
            source = SimulatedGpuSource(scenario, count=count, seed=seed, owner_pids=owners)
            reports = [source.sample() for _ in range(TICKS)]
            reports += [source.report_at(tick) for tick in FAR_TICKS]
            out[f"{scenario}/seed{seed}/{count}gpus"] = [digest(r) for r in reports]
    return out


def test_every_value_is_what_the_old_algorithm_gave() -> None:
    expected = json.loads(FIXTURE.read_text())
    got = cases()
    assert got.keys() == expected.keys()
    for name, digests in expected.items():
        wrong = [i for i, (a, b) in enumerate(zip(got[name], digests, strict=True)) if a != b]
        assert not wrong, f"{name}: reports {wrong} differ from the old algorithm's"


def test_a_tick_makes_no_random_generator_per_device(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[int] = []

    class Counted(random.Random):
        def __init__(self, x: int | float | str | bytes | bytearray | None = None) -> None:
            made.append(1)
            super().__init__(x)

    monkeypatch.setattr(simulated.random, "Random", Counted)
    source = SimulatedGpuSource("mixed", count=8)
    made.clear()
    for _ in range(5):
        source.sample()
    assert len(made) == 0, f"{len(made)} generators made over 5 ticks of 8 devices"


def test_small_batch_copies_no_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    copies: list[int] = []

    def counted(obj: D, **changes: object) -> D:
        copies.append(1)
        return dataclasses.replace(obj, **changes)

    monkeypatch.setattr(simulated, "replace", counted, raising=False)
    SimulatedGpuSource("small-batch", count=4).sample()
    assert copies == []


if __name__ == "__main__":  # written once, from the old algorithm; never from the new one
    FIXTURE.write_text(json.dumps(cases(), indent=0) + "\n")
