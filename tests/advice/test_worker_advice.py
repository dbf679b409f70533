"""The num_workers and threads advice reads the workers' own evidence and predicts the step.

Hand-built frames with the figures the issue measured on a busy 2-core box: the numbers each
item quotes are checked against the arithmetic it shows, and an item whose prediction is no
gain stays quiet.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from gputop.advice import Advisor, evaluate
from gputop.advice.context import Context
from gputop.core.model import Advice, Frame, MemoryBandwidthSample, ProcessSample
from tests.helpers.arithmetic import printed_arithmetic
from tests.helpers.builders import attached, frame, gpu, process, trainer_with_workers

NUM_WORKERS_ITEMS = {"num-workers-zero", "raise-num-workers", "too-many-workers"}


def _advice(f: Frame) -> dict[str, Advice]:
    return {a.id: a for a in evaluate(Context(f, {}))}


def _number(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not in {text!r}"
    return float(match.group(1))


def _hogs(*pids: int) -> list[ProcessSample]:
    """Other people's jobs, each keeping a core busy."""
    return [process(pid, cpu=100.0) for pid in pids]


def _io_loader(workers: int, data_ms: float, compute_ms: float,
               trainer_cpu: float = 20.0) -> Frame:
    """The issue's trainer: workers that sleep in __getitem__ (3% CPU each) on a 2-core box
    that two other jobs keep 100% busy."""
    rows, group = trainer_with_workers(10, workers=workers, worker_cpu=3.0, worker_wait=2.0,
                                       trainer_cpu=trainer_cpu, trainer_wait=5.0, reads=0.0)
    return frame(processes=[*rows, *_hogs(900, 901)], trainers=(group,), cores=2,
                 cpu_percent=100.0,
                 attach=(attached(10, data_ms=data_ms, compute_ms=compute_ms,
                                  num_workers=workers, device="cpu"),))


def test_io_like_workers_on_a_busy_host_get_more_workers_with_the_arithmetic() -> None:
    found = _advice(_io_loader(2, data_ms=16, compute_ms=4))
    assert not found.keys() & {"too-many-workers", "num-workers-zero"}
    more = found["raise-num-workers"]
    assert "2 workers: 3% CPU, 2% waiting for a core, 95% blocked each" in more.evidence
    assert "every 20.0 ms on average, so each takes 2 x 20.0 = 40.0 ms per batch" in more.evidence
    # The job uses 0.26 cores; beside two busy processes it can count on a third of 2 cores.
    assert "the job's CPU (0.26 cores used now, 0.67 available)" in more.evidence
    assert "allows one every 7.80 ms" in more.evidence  # 0.26 x 20.0 / (2 / 3)
    assert "40.0 / 7.80 = 5.13 → 6 workers" in more.evidence
    assert _number(r"num_workers=(\d+)", more.action) == 6
    assert "predicted step 7.80 ms instead of mean 20.0 ms" in more.action
    io = found["io-bound-loading"]
    assert "they read nothing from local storage" in io.evidence
    assert "more workers" in io.action and "only if" not in io.action  # no hedge against it


@pytest.mark.parametrize(("workers", "data_ms", "compute_ms"), [
    (3, 71.43, 56.0),  # a recorded run: 3 x 127.43 printed "3 x 127.4 = 382.3"
    (2, 18.6, 2.85),  # 42.9 / 2.85 = 15.05 printed "42.9 / 2.9 = 15.0 → 16"
    (2, 16, 4), (4, 9.96, 0.04), (2, 33.333, 3.333),
])
def test_the_more_workers_arithmetic_holds_as_printed(workers: int, data_ms: float,
                                                       compute_ms: float) -> None:
    rows, group = trainer_with_workers(10, workers=workers, worker_cpu=3.0, worker_wait=2.0,
                                       trainer_cpu=20.0, reads=0.0)
    f = frame(processes=rows, trainers=(group,), cores=32, cpu_percent=5.0,
              attach=(attached(10, data_ms=data_ms, compute_ms=compute_ms,
                               num_workers=workers),))
    more = _advice(f)["raise-num-workers"]
    assert printed_arithmetic(more.evidence) == 2, more.evidence
    suggested = _number(r"Try num_workers=(\d+)", more.action)
    assert f"→ {suggested:.0f} workers" in more.evidence


def test_the_zero_workers_arithmetic_holds_as_printed() -> None:
    rows = [process(10, role="trainer", cpu=100.0, wait=1.0)]
    f = frame(processes=rows, cores=8, cpu_percent=20.0,
              attach=(attached(10, data_ms=42.94, compute_ms=2.849, num_workers=0),))
    zero = _advice(f)["num-workers-zero"]
    assert printed_arithmetic(zero.evidence) == 1, zero.evidence
    assert "Try DataLoader(num_workers=16" in zero.action


def test_the_fewer_workers_arithmetic_holds_as_printed() -> None:
    few = _advice(_ahead(4, run=20.4, wait=29.95))["too-many-workers"]
    assert printed_arithmetic(few.evidence) == 1, few.evidence


def test_following_the_advice_is_never_answered_with_remove_workers() -> None:
    # After following it (8 workers, still waiting a little on input): no "num_workers=1".
    found = _advice(_io_loader(8, data_ms=6, compute_ms=4))
    assert "too-many-workers" not in found
    for item in found.values():
        assert not re.search(r"num_workers=1\b", item.action)


def _cached_loader(main_thread_busy: float) -> Frame:
    """A trainer whose dataset is in RAM beside other work on 2 cores (follow2's finding): its
    2 workers sit blocked on a full queue while the training process, 52 % CPU and 45 %
    waiting for a core, is itself what the step waits for."""
    rows, group = trainer_with_workers(10, workers=2, worker_cpu=22.0, worker_wait=9.0,
                                       trainer_cpu=52.0, trainer_wait=45.0, reads=0.0)
    rows[0] = replace(rows[0], main_thread_busy_percent=main_thread_busy)
    return frame(processes=[*rows, *_hogs(900)], trainers=(group,), cores=2, cpu_percent=100.0,
                 attach=(attached(10, data_ms=12, compute_ms=8, num_workers=2, device="cpu"),))


def test_a_training_process_busy_all_the_time_gets_no_loader_advice() -> None:
    """Its data wait is its own thread running or queueing for a core: more workers only add
    to the queue (slower when tried); the loader rules say nothing, though its workers look
    idle."""
    assert not _advice(_cached_loader(main_thread_busy=97.0)).keys() & {
        "raise-num-workers", "io-bound-loading"}
    assert _advice(_cached_loader(main_thread_busy=30.0)).keys() & {
        "raise-num-workers", "io-bound-loading"}  # the same loader, its trainer waiting


def _ahead(workers: int, run: float, wait: float, data_ms: float = 2.0) -> Frame:
    """CPU-heavy workers on a full 2-core host, feeding a CPU trainer that computes 40 ms."""
    rows, group = trainer_with_workers(10, workers=workers, worker_cpu=run, worker_wait=wait,
                                       trainer_cpu=60.0)
    return frame(processes=rows, trainers=(group,), cores=2, cpu_percent=100.0,
                 attach=(attached(10, data_ms=data_ms, compute_ms=40, num_workers=workers,
                                  device="cpu"),))


def test_starved_workers_ahead_of_the_step_beyond_the_cores_are_too_many() -> None:
    found = _advice(_ahead(4, run=20.0, wait=25.0))
    few = found["too-many-workers"]
    assert few.evidence == (
        "num_workers=4 on a 2-core host; 4 workers: 20% CPU, 25% waiting for a core, 55% "
        "blocked each, while the steps barely wait for input (5% of step time). Their work "
        "(busy 45% of the time each) fits in 1.5 x 4 x 0.45 = 2.7 → 3 workers")
    assert "Try num_workers=3" in few.action
    assert not found.keys() & {"raise-num-workers", "io-bound-loading"}


def _data_bound(run: float, wait: float, hogs: int) -> Frame:
    """Four CPU-heavy workers on a full 2-core host, feeding a trainer that waits for them."""
    rows, group = trainer_with_workers(10, workers=4, worker_cpu=run, worker_wait=wait,
                                       trainer_cpu=10.0)
    return frame(processes=[*rows, *_hogs(*range(900, 900 + hogs))], trainers=(group,),
                 cores=2, cpu_percent=100.0,
                 attach=(attached(10, data_ms=30, compute_ms=20, num_workers=4, device="cpu"),))


def test_starved_workers_of_a_data_bound_step_beside_other_work_are_not_too_many() -> None:
    # Measured: cutting 4 CPU-bound workers to 2 on a busy 2-core host cost 26% of the
    # samples/s: beside other work, fewer workers get less of the shared cores.
    assert not _advice(_data_bound(run=12.0, wait=60.0, hogs=2)).keys() & NUM_WORKERS_ITEMS


def test_workers_crowding_their_own_job_off_the_cores_are_too_many() -> None:
    few = _advice(_data_bound(run=45.0, wait=50.0, hogs=0))["too-many-workers"]
    assert few.evidence == (
        "num_workers=4 on a 2-core host; 4 workers: 45% CPU, 50% waiting for a core, 5% "
        "blocked each, and the job itself keeps the cores busy (other work: 0.1 cores): "
        "2 workers still load on every core")
    assert "Try num_workers=2" in few.action


def test_workers_beyond_the_cores_that_wait_on_io_are_not_too_many() -> None:
    # The old rule fired on the host's %CPU alone; these workers barely want a core.
    rows, group = trainer_with_workers(10, workers=4, worker_cpu=5.0, worker_wait=3.0,
                                       trainer_cpu=20.0)
    f = frame(processes=[*rows, *_hogs(900, 901)], trainers=(group,), cores=2,
              cpu_percent=100.0,
              attach=(attached(10, data_ms=70, compute_ms=30, num_workers=4, device="cpu"),))
    found = _advice(f)
    assert "too-many-workers" not in found
    assert "io-bound-loading" in found


def test_starved_workers_whose_work_needs_them_all_are_not_too_many() -> None:
    # Ahead of the step, but busy 70% of the time each: three workers' work needs three.
    assert "too-many-workers" not in _advice(_ahead(3, run=35.0, wait=35.0))


def test_more_workers_are_bounded_by_the_cpu_the_job_can_get() -> None:
    # Two saturated workers and a trainer on a 4-core box with one core idle: 3, not 5.
    rows, group = trainer_with_workers(10, workers=2, worker_cpu=97.0, worker_wait=1.0)
    f = frame(processes=rows, trainers=(group,), cores=4, cpu_percent=75.0,
              attach=(attached(10, data_ms=60, compute_ms=40, num_workers=2, device="cpu"),))
    more = _advice(f)["raise-num-workers"]
    assert "2.94 cores used now, 4.00 available" in more.evidence
    assert "allows one every 73.5 ms" in more.evidence
    assert "200.0 / 73.5 = 2.73 → 3 workers" in more.evidence
    assert "Try num_workers=3: predicted step 73.5 ms instead of mean 100.0 ms" in more.action


def test_no_more_workers_when_the_cpu_is_spent() -> None:
    # Saturated workers starved for cores on a full host: more would only queue.
    rows, group = trainer_with_workers(10, workers=2, worker_cpu=45.0, worker_wait=50.0)
    f = frame(processes=[*rows, *_hogs(900, 901)], trainers=(group,), cores=2,
              cpu_percent=100.0,
              attach=(attached(10, data_ms=60, compute_ms=40, num_workers=2, device="cpu"),))
    assert not _advice(f).keys() & NUM_WORKERS_ITEMS


def test_no_more_workers_while_the_host_swaps() -> None:
    f = _io_loader(2, data_ms=16, compute_ms=4)
    swapping = replace(f, memory_bandwidth=MemoryBandwidthSample(
        source="estimate", confidence="estimated", swap_in_per_s=300.0))
    assert "raise-num-workers" not in _advice(swapping)


def test_num_workers_zero_on_a_busy_cpu_only_box_predicts_no_gain() -> None:
    # The figures: 63% data share, the trainer on 1.3 of 2 cores, 0.1 idle. A worker
    # would take its core from compute: fewer steps a second when followed.
    rows = [process(10, role="trainer", cpu=130.0, wait=10.0), process(900, cpu=60.0)]
    f = frame(processes=rows, cores=2, cpu_percent=95.0,
              attach=(attached(10, data_ms=41.2, compute_ms=24.2, num_workers=0,
                               device="cpu"),))
    assert "num-workers-zero" not in _advice(f)


def test_num_workers_zero_with_idle_cores_predicts_the_step() -> None:
    rows = [process(10, role="trainer", cpu=100.0, wait=1.0)]
    f = frame(processes=rows, cores=8, cpu_percent=50.0,
              attach=(attached(10, data_ms=80, compute_ms=20, num_workers=0, device="cpu"),))
    zero = _advice(f)["num-workers-zero"]
    assert "Loading takes 80.0 ms per batch, compute 20.0 ms" in zero.evidence
    # Three other busy cores: the job counts on its own core and the four idle ones.
    assert ("the job's CPU (1.00 cores used now, 5.00 available) allows a step every 20.0 ms"
            in zero.evidence)
    # Its model's threads (the core it uses) leave 4 cores to the workers while it computes.
    assert "hold 1.00 of the 5.00 cores the trainer may use, leaving 4.00" in zero.evidence
    assert "80.0 / 20.0 = 4.00 → 4 workers" in zero.evidence
    assert "num_workers=4, persistent_workers=True" in zero.action
    assert "predicted step 20.0 ms instead of mean 100.0 ms (5.00x the samples/s)" in zero.action


def test_cpu_threads_quiet_when_the_mostly_idle_worker_leaves_the_cores_to_compute() -> None:
    # The issue: chargpt, 2 threads, one worker at 5%: "set_num_threads(1)" cost 36%.
    rows, group = trainer_with_workers(10, workers=1, worker_cpu=5.0, worker_wait=1.0,
                                       trainer_cpu=180.0, trainer_wait=20.0)
    f = frame(processes=rows, trainers=(group,), cores=2, cpu_percent=95.0,
              attach=(attached(10, data_ms=2, compute_ms=135, num_workers=1, device="cpu",
                               num_threads=2),))
    assert "cpu-threads" not in _advice(f)


def test_cpu_threads_oversubscribed_threads_that_queue() -> None:
    rows = [process(10, role="trainer", cpu=390.0, wait=300.0)]
    f = frame(processes=rows, cores=4, cpu_percent=100.0,
              attach=(attached(10, data_ms=2, compute_ms=90, device="cpu", num_threads=8),))
    threads = _advice(f)["cpu-threads"]
    assert threads.severity == "warn"
    assert threads.evidence == (
        "torch.get_num_threads()=8; the trainer runs on 3.9 cores (0.0 idle besides) and its "
        "threads wait 3.0 core-seconds per second for a core")
    assert "torch.set_num_threads(4)" in threads.action
    # Its threads queue 3.0 / (3.9 + 3.0) of the time: the compute without that, to as now.
    assert threads.action.endswith(
        f"predicted step {2 + 90 * 3.9 / 6.9:.1f} to 92.0 ms ({92 / (2 + 90 * 3.9 / 6.9):.2f}x "
        "to 1.00x the samples/s; its threads queue 43% of the time).")


def test_cpu_threads_that_barely_queue_are_left_alone() -> None:
    rows = [process(10, role="trainer", cpu=390.0, wait=10.0)]
    f = frame(processes=rows, cores=4, cpu_percent=100.0,
              attach=(attached(10, data_ms=2, compute_ms=90, device="cpu", num_threads=8),))
    assert "cpu-threads" not in _advice(f)


def test_cpu_threads_too_few_beside_idle_cores_predicts_the_step() -> None:
    rows = [process(10, role="trainer", cpu=195.0, wait=1.0)]
    f = frame(processes=rows, cores=8, cpu_percent=30.0,
              attach=(attached(10, data_ms=5, compute_ms=90, device="cpu", num_threads=2),))
    threads = _advice(f)["cpu-threads"]
    assert threads.severity == "info"
    assert "torch.set_num_threads(7)" in threads.action
    assert f"a step takes about {5 + 90 * 2 / 7:.1f} ms instead of 95.0 ms" in threads.action


def test_cpu_threads_say_nothing_to_a_trainer_holding_gpu_memory() -> None:
    """It said device="cpu", but it holds GPU memory: its compute is on the GPU (the demo's
    compute-bound scenario was told to raise CPU threads beside GPUs at 97-100 %)."""
    rows = [process(10, role="trainer", cpu=195.0, wait=1.0)]
    on_gpu = frame(gpus=(gpu(0, util=98.0, pids=((10, 30.0),)),), processes=rows, cores=8,
                   cpu_percent=30.0, attach=(attached(10, data_ms=5, compute_ms=90,
                                                      device="cpu", num_threads=2),))
    assert "cpu-threads" not in _advice(on_gpu)


def test_cpu_threads_too_few_counts_a_mostly_idle_core_and_charges_its_shortfall() -> None:
    # A 2-core box: one thread fills a core, other work keeps a fifth of the second busy
    # (on a quiet box kernel threads and the monitor's own ticks keep a few % of it).
    rows = [process(10, role="trainer", cpu=95.0, wait=1.0)]
    f = frame(processes=rows, cores=2, cpu_percent=60.0,
              attach=(attached(10, data_ms=1, compute_ms=9, device="cpu", num_threads=1),))
    threads = _advice(f)["cpu-threads"]
    assert "its threads run on 0.9 cores while 0.8 cores are idle" in threads.evidence
    assert "torch.set_num_threads(2)" in threads.action
    # Compute splits evenly and waits for the slowest thread: the new one gets 0.80 of a
    # core where the one there now gets 0.95.
    assert f"a step takes about {1 + 9 / 2 * 0.95 / 0.8:.1f} ms instead of 10.0 ms" in (
        threads.action)


def test_cpu_threads_too_few_quiet_when_most_of_the_spare_core_is_busy() -> None:
    rows = [process(10, role="trainer", cpu=95.0, wait=1.0)]
    f = frame(processes=rows, cores=2, cpu_percent=70.0,
              attach=(attached(10, data_ms=1, compute_ms=9, device="cpu", num_threads=1),))
    assert "cpu-threads" not in _advice(f)


def test_advisor_shows_one_item_per_knob_while_the_old_one_fades() -> None:
    more, fewer = _io_loader(2, data_ms=16, compute_ms=4), _ahead(4, run=20.0, wait=25.0)
    advisor = Advisor(on_after=2)
    shown = [advisor(f) for f in [more] * 3 + [fewer] * 4]
    for items in shown:
        assert len({a.id for a in items} & NUM_WORKERS_ITEMS) <= 1, items
    assert "raise-num-workers" in {a.id for a in shown[2]}
    assert "too-many-workers" in {a.id for a in shown[-1]}


def test_advisor_keeps_a_suggested_number_until_the_new_one_holds() -> None:
    slower, faster = (_io_loader(2, data_ms=16, compute_ms=4),
                      _io_loader(2, data_ms=16, compute_ms=4, trainer_cpu=5.0))
    advisor = Advisor(on_after=2)

    def suggested(f: Frame) -> int:
        (item,) = [a for a in advisor(f) if a.id == "raise-num-workers"]
        return int(_number(r"num_workers=(\d+)", item.action))

    advisor(slower)
    first = suggested(slower)
    assert suggested(faster) == first  # one tick of another figure: still the same number
    assert suggested(slower) == first
    assert suggested(faster) == first
    changed = suggested(faster)  # held for two ticks: now it moves
    assert changed != first


@pytest.mark.parametrize("wait", [None, 2.0])
def test_worker_evidence_says_what_is_known(wait: float | None) -> None:
    rows, group = trainer_with_workers(10, workers=2, worker_cpu=3.0, worker_wait=wait,
                                       trainer_cpu=20.0)
    f = frame(processes=rows, trainers=(group,), cores=2, cpu_percent=40.0,
              attach=(attached(10, data_ms=70, compute_ms=30, num_workers=2, device="cpu"),))
    io = _advice(f)["io-bound-loading"]
    if wait is None:  # a kernel that counts no run-queue wait: only the CPU is quoted
        assert "2 workers: 3% CPU each" in io.evidence
    else:
        assert "2 workers: 3% CPU, 2% waiting for a core, 95% blocked each" in io.evidence
