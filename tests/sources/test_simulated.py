"""The simulated GPU source: every scenario looks like what it is named for, and repeats."""

from __future__ import annotations

import dataclasses
import itertools
import os
import statistics

import pytest

from gputop.core.model import GpuReport, GpuSample
from gputop.sources.gpu import open_gpu_source
from gputop.sources.simulated import (
    HOST_BURST_PERIOD,
    MAX_DEVICES,
    SAWTOOTH_PERIOD,
    SCENARIOS,
    SimulatedGpuSource,
)

TICKS = 4 * SAWTOOTH_PERIOD


def run(scenario: str, count: int = 1, seed: int = 0, ticks: int = TICKS) -> list[GpuReport]:
    source = open_gpu_source(scenario, count=count, seed=seed)
    return [source.sample() for _ in range(ticks)]


def series(reports: list[GpuReport], index: int = 0) -> list[GpuSample]:
    return [r.gpus[index] for r in reports]


def memory_share(gpu: GpuSample) -> float:
    assert gpu.memory_used_bytes is not None and gpu.memory_total_bytes is not None
    return gpu.memory_used_bytes / gpu.memory_total_bytes


def util(gpu: GpuSample) -> float:
    assert gpu.util_percent is not None
    return gpu.util_percent


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_report_says_it_is_simulated(scenario: str) -> None:
    for report in run(scenario, count=4, ticks=3):
        assert report.source == "simulated" and report.scenario == scenario
        assert report.note is not None and "simulated" in report.note and "\n" not in report.note
        assert all(g.name.startswith("Simulated ") for g in report.gpus)
        assert all(g.uuid.startswith("SIM-GPU-") for g in report.gpus)
        assert len({g.uuid for g in report.gpus}) == 4
        assert [g.index for g in report.gpus] == [0, 1, 2, 3]
        assert not any(g.lost for g in report.gpus)


NO_DEVICE_FILE = {"minor_number"}  # a simulated GPU has no /dev/nvidiaN


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_field_is_filled_and_in_range(scenario: str) -> None:
    for gpu in (g for r in run(scenario, count=4) for g in r.gpus):
        for field in dataclasses.fields(GpuSample):
            if field.name not in NO_DEVICE_FILE:
                assert getattr(gpu, field.name) is not None, field.name
        assert 0 <= util(gpu) <= 100
        assert 0 <= memory_share(gpu) <= 1
        assert gpu.power_w is not None and gpu.power_limit_w is not None
        assert 0 < gpu.power_w <= gpu.power_limit_w


def test_idle_is_idle() -> None:
    gpus = series(run("idle"))
    assert {util(g) for g in gpus} == {0.0}
    assert max(memory_share(g) for g in gpus) < 0.02
    assert max(g.power_w or 0 for g in gpus) < 100


def test_compute_bound_is_steadily_high() -> None:
    gpus = series(run("compute-bound"))
    assert min(util(g) for g in gpus) >= 95
    assert statistics.pstdev(util(g) for g in gpus) < 3
    assert min(g.tensor_active_percent or 0 for g in gpus) > 40


def test_data_starved_is_a_sawtooth_with_memory_held() -> None:
    gpus = series(run("data-starved"))
    utils = [util(g) for g in gpus]
    high = [i for i, u in enumerate(utils) if u >= 80]
    low = [i for i, u in enumerate(utils) if u <= 5]
    assert len(high) == TICKS // SAWTOOTH_PERIOD
    assert len(low) >= TICKS // 2
    # Each spike is followed by near-zero ticks before the next one.
    for a, b in itertools.pairwise(high):
        assert any(a < i < b for i in low)
    assert min(memory_share(g) for g in gpus) >= 0.8
    assert max(g.pcie_rx_bytes_per_s or 0 for g in gpus) > 5e9


def test_memory_full_util_zero() -> None:
    gpus = series(run("memory-full-util-zero"))
    assert min(memory_share(g) for g in gpus) >= 0.95
    assert max(util(g) for g in gpus) <= 1
    assert max(g.tensor_active_percent or 0 for g in gpus) == 0


def test_host_bound_waits_on_the_host_between_short_bursts() -> None:
    gpus = series(run("host-bound"))
    utils = [util(g) for g in gpus]
    bursts = [i for i, u in enumerate(utils) if u >= 20]
    assert bursts == list(range(0, len(utils), HOST_BURST_PERIOD))
    assert max(utils) < 50 and statistics.mean(utils) < 20  # far from compute-bound's
    assert all(5 <= u < 20 for i, u in enumerate(utils) if i not in bursts)
    assert min(memory_share(g) for g in gpus) > 0.2  # a model is loaded; it just waits


def test_cpu_starved_runs_at_a_fraction_of_compute_bound() -> None:
    starved, busy = series(run("cpu-starved")), series(run("compute-bound"))
    mean = statistics.mean(util(g) for g in starved)
    assert min(util(g) for g in starved) >= 20 and max(util(g) for g in starved) <= 45
    assert mean < 0.5 * statistics.mean(util(g) for g in busy)
    assert min(memory_share(g) for g in starved) > 0.2


def test_mixed_gives_devices_different_states() -> None:
    reports = run("mixed", count=4)
    mean_util = [statistics.mean(util(g) for g in series(reports, i)) for i in range(4)]
    top_memory = [max(memory_share(g) for g in series(reports, i)) for i in range(4)]
    starved, compute, full, idle = range(4)
    assert mean_util[compute] > 95 and mean_util[idle] == 0 and mean_util[full] == 0
    assert 5 < mean_util[starved] < 50
    assert top_memory[full] >= 0.95 and top_memory[idle] < 0.02
    source = SimulatedGpuSource("mixed", count=8)
    assert [source.behaviour(i) for i in range(8)] == [
        "data-starved", "compute-bound", "memory-full-util-zero", "idle"
    ] * 2


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_same_seed_same_reports(scenario: str) -> None:
    assert run(scenario, count=3, seed=7) == run(scenario, count=3, seed=7)


def test_other_seed_other_noise_same_shape() -> None:
    a, b = run("compute-bound", seed=1), run("compute-bound", seed=2)
    assert a != b
    assert a[0].gpus[0].name == b[0].gpus[0].name


def test_report_at_is_pure_and_sample_advances() -> None:
    source = SimulatedGpuSource("data-starved", count=2, seed=3)
    first = source.report_at(5)
    assert source.tick == 0
    assert source.report_at(5) == first
    reports = [source.sample() for _ in range(6)]
    assert reports[5] == first and source.tick == 6
    assert SimulatedGpuSource("data-starved", count=2, seed=3, start_tick=5).sample() == first


@pytest.mark.parametrize("count", [1, MAX_DEVICES])
def test_one_and_sixteen_devices(count: int) -> None:
    report = run("mixed", count=count, ticks=1)[0]
    assert len(report.gpus) == count
    assert [g.index for g in report.gpus] == list(range(count))


@pytest.mark.parametrize("count", [0, MAX_DEVICES + 1, -1])
def test_bad_count_is_a_one_line_value_error(count: int) -> None:
    with pytest.raises(ValueError, match=r"^simulated GPU count must be 1\.\.16, got -?\d+$"):
        open_gpu_source("idle", count=count)


def test_unknown_scenario_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError) as caught:
        open_gpu_source("busy")
    message = str(caught.value)
    assert "\n" not in message and "'busy'" in message
    assert all(name in message for name in SCENARIOS)


def test_owner_pids_own_their_gpus_with_plausible_memory() -> None:
    me = os.getpid()
    source = open_gpu_source("mixed", count=4, owner_pids=[me])
    report = source.sample()
    (owner,) = report.gpus[0].processes
    assert owner.pid == me
    used = report.gpus[0].memory_used_bytes
    assert used is not None and owner.memory_used_bytes is not None
    assert 0.5 * used < owner.memory_used_bytes < used
    assert owner.sm_util_percent == report.gpus[0].util_percent
    assert all(g.processes == () for g in report.gpus[1:])
    assert isinstance(source, SimulatedGpuSource)
    source.set_owner_pids([me, me + 1])
    report = source.sample()
    assert [[p.pid for p in g.processes] for g in report.gpus] == [[me], [me + 1], [], []]
    source.set_owner_pids([])
    assert all(g.processes == () for g in source.sample().gpus)
    source.close()
