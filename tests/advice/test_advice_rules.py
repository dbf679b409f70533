"""Each advice rule fires on its condition, quotes the numbers, and stays quiet otherwise."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from gputop.advice import Advisor, evaluate
from gputop.advice.context import STEADY_INTERVALS, STEADY_MIN_S, Context
from gputop.core.model import Advice, AttachState, Frame, MemoryBandwidthSample, MemoryLayoutCheck
from tests.helpers.builders import (
    attached,
    frame,
    gpu,
    process,
    trainer_with_workers,
    with_gpu_util,
)


def _advice(f: Frame, history: dict[int, tuple[float, ...]] | None = None) -> dict[str, Advice]:
    return {a.id: a for a in evaluate(Context(f, history or {}))}


def test_healthy_compute_bound_run_gives_no_warning() -> None:
    rows, group = trainer_with_workers(100, workers=4, worker_cpu=60.0)
    f = frame(
        gpus=(gpu(util=95, used_gib=70, pids=((100, 70),)),), processes=rows, trainers=(group,),
        attach=(attached(100, data_ms=1, compute_ms=50, num_workers=4, batch_size=64,
                         device="cuda:0", pin_memory=True),),
    )
    found = _advice(f, {0: (95.0,) * 10})
    assert not [a for a in found.values() if a.severity != "info"], found


def test_num_workers_zero_quotes_share_and_setting() -> None:
    f = frame(processes=[process(7, role="trainer", cpu=100.0)], cores=8,
              attach=(attached(7, data_ms=80, compute_ms=20, num_workers=0),))
    a = _advice(f)["num-workers-zero"]
    assert a.severity == "critical"
    assert "80% of step time" in a.evidence and "num_workers=0" in a.evidence
    # 80 ms of loading beside 20 ms of compute: four workers keep up.
    assert "num_workers=4" in a.action and "pin_memory=True" in a.action


def test_num_workers_zero_needs_data_bound_steps() -> None:
    f = frame(attach=(attached(7, data_ms=5, compute_ms=95, num_workers=0),))
    assert "num-workers-zero" not in _advice(f)


def test_raise_num_workers_from_the_per_batch_time() -> None:
    rows, group = trainer_with_workers(10, workers=2, worker_cpu=97.0)
    f = frame(processes=rows, trainers=(group,), cores=16, cpu_percent=25.0,
              attach=(attached(10, data_ms=60, compute_ms=40, num_workers=2),))
    a = _advice(f)["raise-num-workers"]
    assert "2 workers: 97% CPU each" in a.evidence
    assert "each takes 2 x 100.0 = 200.0 ms per batch" in a.evidence
    assert "num_workers=5" in a.action  # 200 ms per batch / 40 ms of compute


def test_too_many_workers_when_more_than_cores_and_starved() -> None:
    rows, group = trainer_with_workers(10, workers=12, worker_cpu=20.0, worker_wait=30.0)
    f = frame(processes=rows, trainers=(group,), cores=8,
              attach=(attached(10, data_ms=10, compute_ms=90, num_workers=12),))
    a = _advice(f)["too-many-workers"]
    assert "num_workers=12 on a 8-core host" in a.evidence
    assert "num_workers=9" in a.action  # busy half the time: 1.5 x 12 x 0.5 = 9


def test_more_workers_than_cores_without_wait_figures_are_not_called_too_many() -> None:
    rows, group = trainer_with_workers(10, workers=12, worker_cpu=50.0)
    f = frame(processes=rows, trainers=(group,), cores=8,
              attach=(attached(10, data_ms=10, compute_ms=90, num_workers=12),))
    assert "too-many-workers" not in _advice(f)


def test_io_bound_loading_when_workers_idle() -> None:
    rows, group = trainer_with_workers(10, workers=8, worker_cpu=6.0)
    f = frame(processes=rows, trainers=(group,), cores=16,
              attach=(attached(10, data_ms=70, compute_ms=30, num_workers=8),))
    found = _advice(f)
    assert "8 workers: 6% CPU each" in found["io-bound-loading"].evidence
    # Waits overlap: more workers are the first fix, and the two items say so alike.
    assert "num_workers=16" in found["raise-num-workers"].action
    assert "more workers" in found["io-bound-loading"].action


def test_pin_memory_off_on_cuda_with_h2d_share() -> None:
    f = frame(attach=(attached(3, data_ms=2, compute_ms=30, h2d_ms=8, device="cuda:0",
                               pin_memory=False, num_workers=4),))
    a = _advice(f)["pin-memory-off"]
    assert "20% of the step" in a.evidence and "pin_memory=False" in a.evidence


def test_pin_memory_not_suggested_on_cpu() -> None:
    f = frame(attach=(attached(3, data_ms=2, compute_ms=30, h2d_ms=8, device="cpu",
                               pin_memory=False, num_workers=4),))
    assert "pin-memory-off" not in _advice(f)


def test_raise_batch_size_estimates_linear_fit() -> None:
    f = frame(gpus=(gpu(util=50, used_gib=32, total_gib=80, pids=((5, 32),)),),
              attach=(attached(5, data_ms=1, compute_ms=40, batch_size=128, device="cuda:0"),))
    a = _advice(f)["raise-batch-size"]
    assert "memory at 40%" in a.evidence and "batch_size=128" in a.evidence
    assert "batch_size ≈ 288" in a.action


def test_gpu_starved_flat_and_sawtooth() -> None:
    f = frame(gpus=(gpu(0, util=1, used_gib=78), gpu(1, util=0, used_gib=10)))
    flat = _advice(f, {0: (1.0, 0.0, 2.0, 0.0, 1.0), 1: (0.0,) * 5})["gpu-starved"]
    assert "GPU 0: memory 98% used" in flat.evidence and "GPU 1" not in flat.evidence
    saw = _advice(f, {1: (95.0, 0.0, 2.0, 90.0, 1.0, 0.0, 88.0)})["gpu-starved"]
    assert "spiking to 95%" in saw.evidence


def test_gpu_starved_not_on_busy_gpu() -> None:
    f = frame(gpus=(gpu(0, util=97, used_gib=78),))
    assert "gpu-starved" not in _advice(f, {0: (97.0, 95.0, 98.0, 96.0, 97.0)})


def test_gpu_shared_names_both_pids() -> None:
    f = frame(gpus=(gpu(0, util=99, used_gib=60, pids=((11, 30), (12, 30))),))
    a = _advice(f)["gpu-shared"]
    assert "11 (30.0 GiB)" in a.evidence and "12 (30.0 GiB)" in a.evidence


def test_swap_during_training() -> None:
    rows, group = trainer_with_workers(10, workers=2, worker_cpu=50.0)
    rows = [replace(r, major_faults_per_s=450.0) if r.role == "worker" else r for r in rows]
    m = MemoryBandwidthSample(source="estimate", confidence="estimated", swap_in_per_s=420.0,
                              major_faults_per_s=900.0)
    a = _advice(frame(processes=rows, trainers=(group,), membw=m, swap_used=3 * 1024**3))["swap"]
    assert a.severity == "critical" and "host swap-in 420 pages/s" in a.evidence
    assert "take 900 major page faults/s (worker 11 450/s, worker 12 450/s)" in a.evidence
    assert "swap used 3.0 of 8.0 GiB" in a.evidence and a.trainer_pid == 10


def test_host_wide_faults_alone_give_no_paging_advice() -> None:
    rows, group = trainer_with_workers(10, workers=2, worker_cpu=50.0)
    m = MemoryBandwidthSample(source="estimate", confidence="estimated", swap_in_per_s=420.0,
                              major_faults_per_s=900.0)
    assert "swap" not in _advice(frame(processes=rows, trainers=(group,), membw=m))


def test_no_swap_advice_without_a_trainer() -> None:
    m = MemoryBandwidthSample(source="estimate", confidence="estimated", swap_in_per_s=420.0)
    assert "swap" not in _advice(frame(membw=m))


def test_memory_bandwidth_pressure_during_data_bound_steps() -> None:
    m = MemoryBandwidthSample(source="estimate", confidence="estimated", pressure=0.74)
    f = frame(membw=m, attach=(attached(4, data_ms=60, compute_ms=40, num_workers=4),))
    a = _advice(f)["host-memory-bandwidth"]
    assert "pressure 0.74" in a.evidence and "60% of step time" in a.evidence


def test_memory_bandwidth_layout_far_under_expected() -> None:
    m = MemoryBandwidthSample(source="estimate", confidence="estimated",
                              measured_peak_bytes_per_s=9e9, expected_peak_bytes_per_s=25.6e9,
                              layout="1 of 4 slots populated, 1 channel, 3200 MT/s")
    a = _advice(frame(membw=m))["host-memory-bandwidth"]
    assert "traffic 9.0 GB/s is 35% of the 25.6 GB/s" in a.evidence and "1 channel" in a.evidence


def test_memory_layout_advice_from_the_check_alone_with_no_pressure() -> None:
    check = MemoryLayoutCheck("unbalanced", "dmi", 12, 12,
                              ("mixed module speeds: 2 rated 4400 MT/s, 10 rated 4800 MT/s; "
                               "slower ones in DIMMC1, DIMMH1; all run at 4400 MT/s",),
                              slow_slots=("DIMMC1", "DIMMH1"),
                              usual_module="64 GiB DDR5 4800 MT/s")
    m = MemoryBandwidthSample(source="none", confidence="unavailable", layout_check=check)
    a = _advice(frame(membw=m))["memory-layout"]
    assert a.severity == "warn"
    assert a.title == "Memory modules of different speeds hold all of them to the slowest"
    assert a.evidence.endswith("all run at 4400 MT/s (SMBIOS records)")
    assert a.action.startswith("Replace the slower modules in DIMMC1, DIMMH1 with ones rated")
    for quiet in (MemoryLayoutCheck("balanced", "dmi", 8, 8),
                  MemoryLayoutCheck("n/a", reason="no memory-module list readable")):
        m = MemoryBandwidthSample(source="none", confidence="unavailable", layout_check=quiet)
        assert "memory-layout" not in _advice(frame(membw=m))


def test_cpu_threads_oversubscribed() -> None:
    rows, group = trainer_with_workers(9, workers=4, worker_cpu=100.0, trainer_cpu=400.0,
                                       trainer_wait=350.0)
    f = frame(processes=rows, trainers=(group,), cores=8, cpu_percent=100.0,
              attach=(attached(9, data_ms=5, compute_ms=90, device="cpu", num_threads=8,
                               num_workers=4),))
    a = _advice(f)["cpu-threads"]
    assert "torch.get_num_threads()=8" in a.evidence and "set_num_threads(4)" in a.action


def _stepping_for(state: AttachState, seconds: float, first_step: int = 0) -> AttachState:
    """`state` with its steps timed back to back, the newest closing now, the window's
    first being the trainer's step number `first_step`, the window spanning `seconds`."""
    each = int(seconds * 1e9 / len(state.steps))
    now = time.monotonic_ns()
    timed = tuple(replace(s, step=first_step + i, duration_ns=each,
                          end_ns=now - (len(state.steps) - 1 - i) * each)
                  for i, s in enumerate(state.steps))
    return replace(state, steps=timed)


def test_cpu_threads_waits_out_the_trainers_start_up() -> None:
    # The first intervals of a trainer's stepping hold its start-up (workers filling their
    # prefetch, its thread pool spinning up): a real trainer uses fewer cores then than once
    # settled, so a thread count read there is too low and following it made the trainer
    # slower (benchmarks/RESULTS.md). CPU-thread advice speaks once it has been stepping
    # STEADY_INTERVALS intervals and STEADY_MIN_S.
    rows, group = trainer_with_workers(9, workers=4, worker_cpu=100.0, trainer_cpu=400.0,
                                       trainer_wait=350.0)
    trainer = attached(9, data_ms=5, compute_ms=90, device="cpu", num_threads=8, num_workers=4)

    def advised(state: AttachState, interval_s: float = 1.0) -> bool:
        f = frame(processes=rows, trainers=(group,), cores=8, cpu_percent=100.0, attach=(state,))
        return "cpu-threads" in _advice(replace(f, interval_s=interval_s))

    assert not advised(_stepping_for(trainer, 0.5))  # intervals of a second
    assert not advised(_stepping_for(trainer, STEADY_INTERVALS - 0.2))
    assert advised(_stepping_for(trainer, STEADY_INTERVALS + 0.2))
    # A window of fast steps spans less, the trainer's steps before it count: 10000 steps
    # at its pace (0.4 ms) before a window of 50 spanning 0.02 s, four seconds in all.
    assert advised(_stepping_for(trainer, 0.02, first_step=10000))
    assert not advised(_stepping_for(trainer, 0.02, first_step=100))
    # At a tenth of a second a tick, three of them are still the start-up: a second is.
    assert not advised(_stepping_for(trainer, 0.5), interval_s=0.1)
    assert advised(_stepping_for(trainer, STEADY_MIN_S + 0.1), interval_s=0.1)


def test_advisor_hysteresis_neither_flickers_nor_lingers() -> None:
    base = frame(gpus=(gpu(0, util=0, used_gib=78),))
    advisor = Advisor(on_after=2, off_after=3)
    shown = [bool(advisor(base)) for _ in range(6)]
    assert shown == [False, False, False, False, False, True]  # 5 samples, then 2 ticks
    busy = with_gpu_util(base, 97.0)
    after = [bool(advisor(busy)) for _ in range(4)]
    assert after == [True, True, False, False]


def test_advisor_orders_most_severe_first() -> None:
    rows, group = trainer_with_workers(10, workers=12, worker_cpu=50.0)
    f = frame(processes=rows, trainers=(group,), cores=8,
              attach=(attached(10, data_ms=90, compute_ms=10, num_workers=0),))
    f = replace(f, trainers=())
    advisor = Advisor(on_after=1)
    out = advisor(f)
    assert out[0].severity == "critical"


@pytest.mark.parametrize(("scenario", "fires"), [("data-starved", True),
                                                 ("memory-full-util-zero", True),
                                                 ("compute-bound", False), ("idle", False)])
def test_gpu_starved_on_simulated_scenarios(scenario: str, fires: bool) -> None:
    from gputop.sources.simulated import SimulatedGpuSource

    source = SimulatedGpuSource(scenario, count=2, seed=3)
    advisor = Advisor()
    base = frame()
    shown: tuple[Advice, ...] = ()
    for _ in range(30):
        shown = advisor(replace(base, gpu=source.sample()))
    ids = {a.id for a in shown}
    assert ("gpu-starved" in ids) is fires, shown
    if fires:
        assert "GPU 0: memory" in next(a for a in shown if a.id == "gpu-starved").evidence


def test_a_rank_waiting_far_longer_for_input_is_named_with_its_numbers() -> None:
    ranks = (attached(20, data_ms=1, compute_ms=50, rank=0, world_size=2),
             attached(21, data_ms=30, compute_ms=21, rank=1, world_size=2))
    got = _advice(frame(attach=ranks))["input-straggler"]
    assert got.title.startswith("rank 1 is slowest")
    assert "rank 1 waits 30.0 ms for input per step (median), the other ranks 1.0 ms" \
        in got.evidence
    alike = (ranks[0], replace(ranks[0], pid=21))
    assert "input-straggler" not in _advice(frame(attach=alike))
