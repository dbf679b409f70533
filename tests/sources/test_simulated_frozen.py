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


# fields added to GpuSample and GpuProcess after the digests were written (MIG, minor): no old
# value to agree with; each value is written as the old dataclasses wrote it, without them
ADDED_SINCE = frozenset({"mig_enabled", "mig_instances", "gpu_instance_id",
                         "compute_instance_id", "minor_number"})


def old_repr(value: object) -> str:
    """repr(value), as the dataclasses without the ADDED_SINCE fields wrote it."""
    if isinstance(value, tuple):
        items = [old_repr(v) for v in value]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        shown = (f"{f.name}={old_repr(getattr(value, f.name))}"
                 for f in dataclasses.fields(value) if f.repr and f.name not in ADDED_SINCE)
        return f"{type(value).__qualname__}({', '.join(shown)})"
    return repr(value)


def canonical(report: GpuReport) -> str:
    """Every value of the report, floats exactly (repr round-trips them)."""
    gpus = "(" + ", ".join(
        "(" + ", ".join(f"({f.name!r}, {old_repr(getattr(g, f.name))})"
                        for f in dataclasses.fields(GpuSample) if f.name not in ADDED_SINCE)
        + ")" for g in report.gpus) + ("," if len(report.gpus) == 1 else "") + ")"
    return (f"({report.source!r}, {report.note!r}, {report.driver_version!r}, "
            f"{report.scenario!r}, {gpus})")


def digest(report: GpuReport) -> str:
    return hashlib.sha256(canonical(report).encode()).hexdigest()[:20]


def cases(scenarios: tuple[str, ...] = SCENARIOS) -> dict[str, list[str]]:
    """Case name -> the digest of each report, in order."""
    out = {}
    for scenario in scenarios:
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
    # scenarios added since (host-bound, cpu-starved) had no old algorithm to agree with
    old = tuple(dict.fromkeys(name.split("/")[0] for name in expected))
    assert set(old) < set(SCENARIOS)
    got = cases(old)
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
