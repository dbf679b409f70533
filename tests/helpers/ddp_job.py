"""A synthetic 8-GPU DDP node at 1 Hz: a torchrun launcher, RANKS ranks (one per GPU, each
attached, each with WORKERS DataLoader workers) closing ~STEPS_PER_S steps a second each,
among PROCESSES processes on a CPUS-core host. For the recording's size test and benchmark:
every number the screen shows moves every tick, as on a real node."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace

from gputop.core.model import (
    Advice,
    AttachState,
    Frame,
    GpuReport,
    InputStraggler,
    MemoryBandwidthSample,
    ProcessSample,
    StepRecord,
    TrainerConfig,
    TrainerGroup,
)
from gputop.frames import derive
from tests.helpers.builders import GIB, MS, gpu, host, process, trainer_with_workers

T0 = 1_800_000_000.0
CLOCK0_NS = 7_000_000 * MS  # the ranks' monotonic clock at the first tick
CPUS = 128
RANKS = 8
WORKERS = 4
PROCESSES = 600
STEPS_PER_S = 5
STEP_WINDOW = 256  # steps each rank's ring window shows (the attach source's)
LAUNCHER = 5000
BATCH = 64
STEPS_PER_EPOCH = 5000
SLOW = Advice("input-straggler", "warn", "Rank 3 waits for input longer than the others",
              "rank 3 waits 12.0 ms a step, the others 1.1 ms", "Check rank 3's storage.")


def rank_pid(rank: int) -> int:
    """The PID of rank `rank` (its workers follow it)."""
    return LAUNCHER + 10 * (rank + 1)


def _others(count: int) -> list[ProcessSample]:
    """Processes that do nothing all day, but 8 busy (the top by CPU churns among them)."""
    rows = [replace(process(10_000 + i), cpu_percent=0.0, rss_bytes=(i % 90 + 1) << 20,
                    cmdline=("/usr/sbin/daemon", f"--instance={i}"))
            for i in range(count - 8)]
    rows += [replace(process(20_000 + i), cmdline=("make", f"-j{i}")) for i in range(8)]
    return rows


class _Rank:
    """One rank's ring: its steps closing ~STEPS_PER_S a second, the last STEP_WINDOW kept."""

    def __init__(self, rank: int, rng: random.Random) -> None:
        self.rank = rank
        self.rng = rng
        self.window: list[StepRecord] = []
        self.next_step = 0
        self.clock_ns = CLOCK0_NS - rng.randrange(200 * MS)

    def advance(self, until_ns: int) -> None:
        """Close the steps that end by `until_ns`."""
        rng = self.rng
        while True:
            data = rng.randrange(300_000, 2_500_000) * (8 if self.rank == 3 else 1)
            h2d, forward = rng.randrange(800_000, 1_500_000), rng.randrange(55, 65) * MS
            backward = rng.randrange(100, 120) * MS
            optimizer = rng.randrange(12_000_000, 16_000_000)
            duration = data + h2d + forward + backward + optimizer + rng.randrange(3 * MS)
            if self.clock_ns + duration > until_ns:
                return
            self.clock_ns += duration
            n = self.next_step
            self.window.append(StepRecord(
                step=n, duration_ns=duration, data_ns=data, h2d_ns=h2d, forward_ns=forward,
                backward_ns=backward, optimizer_ns=optimizer,
                gpu_ns=duration - rng.randrange(2 * MS, 4 * MS),
                gpu_gap_ns=rng.randrange(0, MS), batch_size=BATCH, epoch=n // STEPS_PER_EPOCH,
                warmup=n % STEPS_PER_EPOCH < 3, end_ns=self.clock_ns))
            self.next_step += 1
            del self.window[:-STEP_WINDOW]

    def state(self) -> AttachState:
        config = TrainerConfig(num_workers=WORKERS, pin_memory=True, batch_size=BATCH,
                               prefetch_factor=2, persistent_workers=True, num_threads=8,
                               device=f"cuda:{self.rank}", rank=self.rank, world_size=RANKS)
        return AttachState(pid=rank_pid(self.rank), config=config, dropped_records=0,
                           steps=tuple(self.window), job=LAUNCHER)


def ddp_ticks(seed: int = 16) -> Iterator[Frame]:
    """The node's frames, a second apart, forever."""
    rng = random.Random(seed)
    ranks = [_Rank(r, rng) for r in range(RANKS)]
    others = _others(PROCESSES - 1 - RANKS * (WORKERS + 1))
    derivation = derive.Derivation()
    tick = 0
    while True:
        now_ns = CLOCK0_NS + tick * 1_000_000_000
        for rank in ranks:
            rank.advance(now_ns)
        attached, straggler = derivation.attached([r.state() for r in ranks], now_ns)
        yield _frame(tick, rng, others, attached, straggler)
        tick += 1


def _frame(tick: int, rng: random.Random, others: list[ProcessSample],
           attached: tuple[AttachState, ...], straggler: InputStraggler | None) -> Frame:
    """Tick `tick` of the node."""

    def moved(p: ProcessSample, cpu: float, rss: int) -> ProcessSample:
        return replace(p, cpu_percent=cpu, cpu_time_s=1000.0 + tick * cpu / 100,
                       rss_bytes=rss + rng.randrange(4096) * 4096,
                       state=rng.choice("RS"), num_threads=24)

    launcher = replace(process(LAUNCHER, role="launcher"), cmdline=(
        "torchrun", "--nproc-per-node=8", "train.py"))
    rows: list[ProcessSample] = [launcher]
    groups: list[TrainerGroup] = []
    for rank in range(RANKS):
        trained, group = trainer_with_workers(rank_pid(rank), WORKERS, 0.0)
        trained = [replace(p, ppid=LAUNCHER) if p.role == "trainer" else p for p in trained]
        trained = [moved(trained[0], rng.uniform(95, 110), 12 * GIB)] + [
            moved(p, rng.uniform(20, 60), 2 * GIB) for p in trained[1:]]
        rows += trained
        groups.append(replace(group, launcher_pid=LAUNCHER, workers_cpu_percent=sum(
            p.cpu_percent or 0 for p in trained[1:]), num_threads_total=24 * (WORKERS + 1)))
    rows += [moved(p, rng.uniform(5, 60), GIB) if p.pid >= 20_000 else p for p in others]
    devices = tuple(replace(
        gpu(i, util=rng.uniform(85, 100), used_gib=70 + rng.random(),
            pids=((rank_pid(i), 70),)),
        temperature_c=float(rng.randrange(60, 80)), power_w=rng.uniform(500, 700),
        pcie_rx_bytes_per_s=rng.uniform(0, 20e9), pcie_tx_bytes_per_s=rng.uniform(0, 5e9),
        sm_clock_mhz=rng.randrange(1700, 1981, 15), memory_util_percent=rng.uniform(20, 60),
        sm_occupancy_percent=rng.uniform(40, 90), tensor_active_percent=rng.uniform(20, 60))
        for i in range(RANKS))
    busy = rng.uniform(40, 60)
    return Frame(
        time=T0 + tick, interval_s=1.0,
        host=replace(host(CPUS, busy), per_cpu_percent=tuple(
            rng.uniform(0, 100) for _ in range(CPUS)), memory_available_bytes=rng.randrange(
            100, 400) * GIB, load_average=(busy, busy * 0.9, busy * 0.8), uptime_s=9e5 + tick),
        gpu=GpuReport(source="nvml", gpus=devices, driver_version="550.54"),
        processes=tuple(rows), trainers=tuple(groups),
        memory_bandwidth=MemoryBandwidthSample(
            "estimate", "medium", pressure=rng.random(), psi_some_avg10=rng.uniform(0, 5),
            swap_in_per_s=0.0, major_faults_per_s=rng.uniform(0, 3)),
        attached=attached, straggler=straggler,
        advice=(replace(SLOW, evidence=f"rank 3 waits {10 + tick % 5}.0 ms a step, the "
                        "others 1.1 ms"),))
