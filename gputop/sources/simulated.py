"""Simulated GPUs for --demo and tests: named, seeded scenarios that repeat tick for tick."""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gputop.core.hashes import name_uuid
from gputop.core.model import GpuProcess, GpuReport, GpuSample

SCENARIOS = (
    "idle", "compute-bound", "data-starved", "memory-full-util-zero", "mixed", "small-batch",
    "host-bound", "cpu-starved",
)
MAX_DEVICES = 16
KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
NAME = "Simulated H100 80GB HBM3"
MEMORY_TOTAL = 81_559 * MIB
POWER_LIMIT_W = 700.0
CONTEXT_BYTES = 518 * MIB
SAWTOOTH_PERIOD = 6
HOST_BURST_PERIOD = 4  # host-bound: a tick of every this many catches a run of short kernels
# In "mixed", device i behaves like _MIXED[i % 4]: GPU 0 (the demo trainer's) is starved,
# GPU 2's memory is held by an idle process (the demo's holder) that does nothing with it.
_MIXED = ("data-starved", "compute-bound", "memory-full-util-zero", "idle")
IDLE_HOLDER_PLAYS = "memory-full-util-zero"
_UUID_NAMESPACE = bytes.fromhex("6f1c2a525d1e4c579a43000000000000")


@dataclass(slots=True)
class _Reading:
    """What one simulated device reads at one tick, before it becomes a GpuSample (a
    scratch value: small-batch sets its memory on compute-bound's rather than copy it)."""

    util: float
    memory_util: float
    used_bytes: int
    temperature_c: float
    power_w: float
    sm_clock_mhz: int
    rx_bytes_per_s: float
    tx_bytes_per_s: float
    sm_occupancy: float
    tensor_active: float


def _idle(tick: int, rng: random.Random) -> _Reading:
    return _Reading(
        util=0.0, memory_util=0.0, used_bytes=CONTEXT_BYTES,
        temperature_c=31 + _drift(tick, 1.0) + rng.uniform(0, 1), power_w=70 + rng.uniform(0, 4),
        sm_clock_mhz=345, rx_bytes_per_s=rng.uniform(0, 40_000),
        tx_bytes_per_s=rng.uniform(0, 40_000), sm_occupancy=0.0, tensor_active=0.0,
    )


def _compute_bound(tick: int, rng: random.Random) -> _Reading:
    util = min(100.0, 97 + rng.uniform(0, 3.5))
    return _Reading(
        util=float(round(util)), memory_util=float(round(62 + rng.uniform(0, 10))),
        used_bytes=int(71.4 * GIB) + rng.randrange(0, 64) * MIB,
        temperature_c=71 + _drift(tick, 2.0) + rng.uniform(0, 1), power_w=640 + rng.uniform(0, 50),
        sm_clock_mhz=1980 - 15 * rng.randrange(0, 8), rx_bytes_per_s=rng.uniform(0.2e9, 0.4e9),
        tx_bytes_per_s=rng.uniform(10e6, 30e6), sm_occupancy=58 + rng.uniform(0, 6),
        tensor_active=49 + rng.uniform(0, 8),
    )


def _data_starved(tick: int, rng: random.Random) -> _Reading:
    """The sawtooth: a batch arrives, the GPU spikes, then waits near 0% for the next one."""
    phase = tick % SAWTOOTH_PERIOD
    if phase == 0:
        util, rx = 88 + rng.uniform(0, 11), rng.uniform(7e9, 11e9)
    elif phase == 1:
        util, rx = 25 + rng.uniform(0, 20), rng.uniform(1e9, 2e9)
    else:
        util, rx = rng.uniform(0, 2), rng.uniform(20e6, 60e6)
    return _Reading(
        util=float(round(util)), memory_util=float(round(util * 0.45)),
        used_bytes=int(68.2 * GIB) + rng.randrange(0, 32) * MIB,
        temperature_c=47 + _drift(tick, 2.0) + util / 25, power_w=110 + 3.6 * util,
        sm_clock_mhz=1980 if util > 20 else 1755, rx_bytes_per_s=rx,
        tx_bytes_per_s=rng.uniform(5e6, 15e6), sm_occupancy=util * 0.55,
        tensor_active=util * 0.45,
    )


def _memory_full_util_zero(tick: int, rng: random.Random) -> _Reading:
    """98% of memory held, nothing running: a stalled job, a leaked process, or a starved one."""
    free = int(1.2 * GIB) + rng.randrange(0, 8) * MIB
    return _Reading(
        util=0.0, memory_util=0.0, used_bytes=MEMORY_TOTAL - free,
        temperature_c=38 + _drift(tick, 1.0), power_w=88 + rng.uniform(0, 6), sm_clock_mhz=1755,
        rx_bytes_per_s=rng.uniform(0, 80_000), tx_bytes_per_s=rng.uniform(0, 80_000),
        sm_occupancy=0.0, tensor_active=0.0,
    )


def _small_batch(tick: int, rng: random.Random) -> _Reading:
    """Busy like compute-bound, but the batch fills only about a third of the memory."""
    busy = _compute_bound(tick, rng)
    busy.used_bytes = int(28.6 * GIB) + rng.randrange(0, 64) * MIB
    return busy


def _waiting_on_host(util: float, tick: int, rng: random.Random) -> _Reading:
    """A GPU whose kernels come as fast as the host launches them: its model's memory held,
    busy `util` % of the time, clocks and power following."""
    return _Reading(
        util=float(round(util)), memory_util=float(round(util * 0.6)),
        used_bytes=int(24.3 * GIB) + rng.randrange(0, 32) * MIB,
        temperature_c=44 + _drift(tick, 2.0) + util / 20, power_w=105 + 4.0 * util,
        sm_clock_mhz=1980 if util > 20 else 1755, rx_bytes_per_s=rng.uniform(5e6, 40e6),
        tx_bytes_per_s=rng.uniform(2e6, 8e6), sm_occupancy=util * 0.5,
        tensor_active=util * 0.4,
    )


def _host_bound(tick: int, rng: random.Random) -> _Reading:
    """Python between forward and backward takes most of each step: the GPU runs a short
    burst of kernels per step and waits on the host for the rest, so util stays low."""
    burst = tick % HOST_BURST_PERIOD == 0
    return _waiting_on_host((22 if burst else 6) + rng.uniform(0, 10), tick, rng)


def _cpu_starved(tick: int, rng: random.Random) -> _Reading:
    """The trainer gets a third of the core it wants (others hold the rest), so it launches
    a third of the kernels a compute-bound trainer would: util about a third of busy."""
    return _waiting_on_host(27 + rng.uniform(0, 12), tick, rng)


_BEHAVIOURS: dict[str, Callable[[int, random.Random], _Reading]] = {
    "idle": _idle,
    "compute-bound": _compute_bound,
    "data-starved": _data_starved,
    "memory-full-util-zero": _memory_full_util_zero,
    "small-batch": _small_batch,
    "host-bound": _host_bound,
    "cpu-starved": _cpu_starved,
}


def _whole(value: float, unit: int) -> int:
    """`value` in whole `unit`s, as NVML counts: memory in MiB, PCIe throughput in KiB/s."""
    return round(value / unit) * unit


def _drift(tick: int, amplitude: float) -> float:
    """A slow, smooth wander (temperatures do not jump from tick to tick)."""
    return amplitude * math.sin(tick / 17.0)


def check_scenario(scenario: str) -> str:
    """The scenario name, or ValueError with a one-line message listing the valid ones."""
    if scenario not in SCENARIOS:
        raise ValueError(
            f"unknown demo scenario {scenario!r}; choose one of: {', '.join(SCENARIOS)}"
        )
    return scenario


def idle_holder_gpu(scenario: str, count: int) -> int | None:
    """The device the demo's idle holder holds in `scenario` (the first of "mixed"'s memory-
    full ones), or None where the scenario has none."""
    if scenario != "mixed":
        return None
    return next((i for i in range(count) if _MIXED[i % len(_MIXED)] == IDLE_HOLDER_PLAYS), None)


def check_count(count: int) -> int:
    """The device count, or ValueError if it is outside 1..16."""
    if not 1 <= count <= MAX_DEVICES:
        raise ValueError(f"simulated GPU count must be 1..{MAX_DEVICES}, got {count}")
    return count


class SimulatedGpuSource:
    """GPUs that never existed, labelled as such; tick n of a seed always reads the same."""

    def __init__(
        self,
        scenario: str = "mixed",
        count: int = 4,
        seed: int = 0,
        owner_pids: Iterable[int] = (),
        start_tick: int = 0,
    ) -> None:
        self.scenario = check_scenario(scenario)
        self.count = check_count(count)
        self.seed = seed
        self.tick = start_tick
        self._owners: tuple[int, ...] = tuple(owner_pids)
        self._lock = threading.Lock()
        self._uuids = [
            f"SIM-GPU-{name_uuid(_UUID_NAMESPACE, f'{seed}/{i}')}" for i in range(count)
        ]
        # What each device keeps from tick to tick: its behaviour and its seed's prefix.
        self._plays = [_BEHAVIOURS[self.behaviour(i)] for i in range(count)]
        self._seed_prefixes = [f"gputop-sim/{seed}/{i}/" for i in range(count)]
        # One generator, reseeded per device and tick: seeding it with the string is what
        # random.Random(string) does, without a new generator each time.
        self._rng = random.Random()
        self._rng_lock = threading.Lock()
        self.note = (
            f"simulated GPUs (scenario {self.scenario!r}, {self.count} x {NAME}): not real hardware"
        )

    def set_owner_pids(self, pids: Iterable[int]) -> None:
        """PID i is shown as the compute process on GPU i (e.g. the --demo trainer on GPU 0;
        0: none)."""
        self._owners = tuple(pids)

    def behaviour(self, index: int) -> str:
        """The scenario device `index` plays (in "mixed" each device plays its own)."""
        return _MIXED[index % len(_MIXED)] if self.scenario == "mixed" else self.scenario

    def sample(self) -> GpuReport:
        """The report for the current tick, then advance one tick."""
        with self._lock:
            tick = self.tick
            self.tick += 1
        return self.report_at(tick)

    def report_at(self, tick: int) -> GpuReport:
        """The report for any tick, without moving the source's own counter."""
        owners = self._owners
        with self._rng_lock:
            gpus = tuple([self._device(i, tick, owners) for i in range(self.count)])
        return GpuReport(
            source="simulated", gpus=gpus, note=self.note, driver_version="simulated",
            scenario=self.scenario,
        )

    def _device(self, index: int, tick: int, owners: tuple[int, ...]) -> GpuSample:
        rng = self._rng
        rng.seed(self._seed_prefixes[index] + str(tick))
        r = self._plays[index](tick, rng)
        processes: tuple[GpuProcess, ...] = ()
        if index < len(owners) and owners[index] > 0:
            # The owner holds all but the driver's share of the context.
            used = _whole(r.used_bytes, MIB) - CONTEXT_BYTES // 2
            processes = (GpuProcess(owners[index], used, sm_util_percent=r.util),)
        return GpuSample(
            index=index,
            name=NAME,
            uuid=self._uuids[index],
            util_percent=r.util,
            memory_util_percent=r.memory_util,
            memory_used_bytes=_whole(r.used_bytes, MIB),
            memory_total_bytes=MEMORY_TOTAL,
            temperature_c=round(r.temperature_c, 1),
            power_w=round(r.power_w, 1),
            power_limit_w=POWER_LIMIT_W,
            sm_clock_mhz=r.sm_clock_mhz,
            memory_clock_mhz=2619,
            pcie_rx_bytes_per_s=float(_whole(r.rx_bytes_per_s, KIB)),
            pcie_tx_bytes_per_s=float(_whole(r.tx_bytes_per_s, KIB)),
            sm_occupancy_percent=round(r.sm_occupancy, 1),
            tensor_active_percent=round(r.tensor_active, 1),
            processes=processes,
            mig_enabled=False,  # a simulated H100 with MIG mode off
        )

    def close(self) -> None:
        """Nothing to release."""
