"""The num_workers advice counts the cores the workers would take from the model's threads,
speaks only where the steps say data is the wait, and quotes the window's one step time.

Hand-built frames: a CPU trainer on a 2-core host whose model's intra-op threads fill the
cores gets no "add workers" (it would lose samples/s, as the issue measured on minGPT); one
whose model leaves a core idle gets the prediction, with the arithmetic that makes it.
"""

from __future__ import annotations

import re
import time
from dataclasses import replace

import pytest

from gputop.advice import evaluate
from gputop.advice.context import Context, figure, step_shape
from gputop.core.model import (
    Advice,
    AttachState,
    CpuStarvation,
    Frame,
    StepSummary,
)
from tests.helpers.builders import MS, attached, frame, process, trainer_with_workers

LOADER_ITEMS = {"num-workers-zero", "raise-num-workers", "too-many-workers",
                "io-bound-loading", "pin-memory-off"}
VAGUE = re.compile(r"no slower|no fewer|not slower|at least as fast", re.IGNORECASE)


def _advice(f: Frame) -> dict[str, Advice]:
    return {a.id: a for a in evaluate(Context(f, {}))}


def _number(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not in {text!r}"
    return float(match.group(1))


def _inline_trainer(threads: int, trainer_cpu: float, main_busy: float, cores: int = 2,
                    cores_allowed: float | None = None, host_cpu: float | None = None,
                    n: int = 50) -> Frame:
    """A CPU trainer loading every batch itself (num_workers=0): 45 ms of loading, 30 ms of
    compute a step; the host busy with it alone unless `host_cpu` says otherwise."""
    if host_cpu is None:
        host_cpu = trainer_cpu / cores
    row = replace(process(10, role="trainer", cpu=trainer_cpu, wait=2.0),
                  main_thread_busy_percent=main_busy, cores_allowed=cores_allowed)
    return frame(processes=[row], cores=cores, cpu_percent=host_cpu,
                 attach=(attached(10, data_ms=45.0, compute_ms=30.0, num_workers=0,
                                  device="cpu", num_threads=threads, n=n),))


def test_zero_workers_quiet_where_the_models_threads_fill_the_cores() -> None:
    """Its 2 threads hold both cores (using 1.27 of them on average) and its main thread is
    busy the whole step: loading is CPU work, and workers could only take it to the cores
    the model's threads hold. The job's CPU alone (1.27 cores of 2) predicted 75.0 -> 47.6
    ms a step, as the issue quotes: followed, it lost samples/s."""
    found = _advice(_inline_trainer(threads=2, trainer_cpu=127.0, main_busy=100.0))
    assert not found.keys() & {"num-workers-zero", "raise-num-workers"}


def test_zero_workers_predicted_where_the_model_leaves_a_core_to_them() -> None:
    """One model thread on 2 cores: the other core takes the loading; the model's thread
    and the loading share the two, and the prediction says by how much."""
    zero = _advice(_inline_trainer(threads=1, trainer_cpu=100.0, main_busy=100.0))[
        "num-workers-zero"]
    assert ("the model's 1 thread hold 1.00 of the 2.00 cores the trainer may use, leaving "
            "1.00 to the loading's 45.0 ms of CPU a batch: a core taken from the model's "
            "threads holds them all up, so a step takes at least (30.0 + 45.0) / (1 + 1.00) "
            "= 37.5 ms") in zero.evidence
    assert "45.0 / 37.5 = 1.20 → 2 workers" in zero.evidence
    assert "predicted step 37.5 ms instead of mean 75.0 ms (2.00x the samples/s)" in zero.action


def _just_closed(state: AttachState) -> AttachState:
    """`state` with its steps closed one after another up to now (the trainer's clock)."""
    now, steps = time.monotonic_ns(), state.steps
    return replace(state, steps=tuple(
        replace(s, end_ns=now - (len(steps) - 1 - i) * s.duration_ns)
        for i, s in enumerate(steps)))


@pytest.mark.parametrize(("steps", "speaks"), [(5, False), (50, True)])
def test_zero_workers_wait_for_the_cpu_figures_of_training_not_start_up(
        steps: int, speaks: bool) -> None:
    """Five steps in (under a second): its CPU figures are still its imports' and its
    threads' spin-up; the prediction rests on them, so it waits."""
    built = _inline_trainer(threads=1, trainer_cpu=100.0, main_busy=100.0, n=steps)
    (raw,) = built.attached
    f = frame(processes=list(built.processes), cores=2, cpu_percent=50.0,
              attach=(_just_closed(raw),))
    assert ("num-workers-zero" in _advice(f)) is speaks


def test_zero_workers_predicted_for_loading_that_waits_beside_busy_threads() -> None:
    """Loading that sleeps (storage) takes no core from the model's threads: workers overlap
    it with the compute even where those threads fill the cores."""
    busy = 100.0 * 30 / 75  # the main thread computes, then sleeps through the loading
    zero = _advice(_inline_trainer(threads=2, trainer_cpu=80.0, main_busy=busy))[
        "num-workers-zero"]
    assert "leaving 0.0 to the loading's 0.0 ms of CPU a batch" in zero.evidence
    assert "45.0 / 30.0 = 1.50 → 2 workers" in zero.evidence
    assert "predicted step 30.0 ms instead of mean 75.0 ms (2.50x the samples/s)" in zero.action


def test_zero_workers_count_the_cores_the_trainer_may_use_not_the_hosts() -> None:
    """An 8-core host, the trainer allowed 2 of them (affinity or cgroup quota): as quiet as
    on a 2-core host; allowed all 8, the idle cores take the loading."""
    pinned = _inline_trainer(threads=2, trainer_cpu=127.0, main_busy=100.0, cores=8,
                             cores_allowed=2.0)
    assert "num-workers-zero" not in _advice(pinned)
    free = _inline_trainer(threads=2, trainer_cpu=127.0, main_busy=100.0, cores=8)
    zero = _advice(free)["num-workers-zero"]
    assert "hold 2.00 of the 8.00 cores the trainer may use, leaving 6.00" in zero.evidence


def _cpu_workers(cores: int, worker_cpu: float) -> Frame:
    """Two workers on CPU work feeding a CPU trainer of 2 threads (40% CPU) whose step waits
    60 ms for them and computes 40 ms; the host busy with them alone."""
    rows, group = trainer_with_workers(10, workers=2, worker_cpu=worker_cpu, worker_wait=4.0,
                                       trainer_cpu=40.0, trainer_wait=4.0)
    return frame(processes=rows, trainers=(group,), cores=cores,
                 cpu_percent=(40.0 + 2 * worker_cpu) / cores,
                 attach=(attached(10, data_ms=60, compute_ms=40, num_workers=2, device="cpu",
                                  num_threads=2),))


def test_more_workers_quiet_where_the_models_threads_hold_the_cores() -> None:
    """Half-busy workers (50% each) on 2 cores: the job's CPU alone (1.4 cores of 2) allowed
    a step every 70.0 ms (3 workers, 1.43x); their 100 ms of CPU a batch can only run on
    the cores the model's threads hold."""
    assert "raise-num-workers" not in _advice(_cpu_workers(cores=2, worker_cpu=50.0))


def test_more_workers_predicted_with_the_cores_the_models_threads_leave() -> None:
    """On 4 cores, 2 threads leave 2 to the loading's 190 ms of CPU a batch: more than fits
    beside the 40 ms compute, so the model's threads count as one core against it."""
    f = _cpu_workers(cores=4, worker_cpu=95.0)
    more = _advice(f)["raise-num-workers"]
    assert ("(40.0 + 190.0) / (1 + 2.00) = 76.7 ms") in more.evidence
    predicted = _number(r"predicted step ([\d.]+) ms", more.action)
    assert predicted >= 76.7
    assert f"({100.0 / predicted:.2f}x the samples/s)" in more.action


def _with(f: Frame, **changes: object) -> Frame:
    """`f` with its one trainer's state changed (after the builder derived it)."""
    (state,) = f.attached
    return replace(f, attached=(replace(state, **changes),))  # type: ignore[arg-type]


def _summary(f: Frame, **changes: object) -> StepSummary:
    (state,) = f.attached
    return replace(state.summary, **changes)  # type: ignore[arg-type]


def _loader_frames() -> list[Frame]:
    """Frames in which each loader item speaks for a data-bound trainer."""
    io_rows, io_group = trainer_with_workers(10, workers=2, worker_cpu=3.0, worker_wait=2.0,
                                             trainer_cpu=20.0, reads=0.0)
    io = frame(processes=io_rows, trainers=(io_group,), cores=2, cpu_percent=40.0,
               attach=(attached(10, data_ms=70, compute_ms=30, num_workers=2, device="cpu"),))
    zero = _inline_trainer(threads=1, trainer_cpu=100.0, main_busy=100.0)
    pin = frame(attach=(attached(10, data_ms=40, compute_ms=30, h2d_ms=8, device="cuda:0",
                                 pin_memory=False, num_workers=4),))
    return [io, zero, pin]


def test_the_frames_below_do_get_loader_advice() -> None:
    """The silence the tests below check is the verdict's doing: as built, each speaks."""
    found = set().union(*(_advice(f).keys() for f in _loader_frames()))
    assert {"num-workers-zero", "raise-num-workers", "io-bound-loading",
            "pin-memory-off"} <= found


@pytest.mark.parametrize("verdict", ["host-bound", "cpu-starved", "unknown"])
def test_no_dataloader_advice_where_the_steps_do_not_wait_for_data(verdict: str) -> None:
    for f in _loader_frames():
        quiet = _with(f, summary=_summary(f, verdict=verdict))
        assert not _advice(quiet).keys() & LOADER_ITEMS, verdict


def test_no_dataloader_advice_for_a_cpu_starved_trainer() -> None:
    starved = CpuStarvation(main_thread_wait_percent=80.0, main_thread_run_percent=10.0,
                            runqueue_wait_percent=90.0, cores_got=0.2, cores_wanted=1.0,
                            cores_allowed=2)
    for f in _loader_frames():
        assert not _advice(_with(f, cpu_starvation=starved)).keys() & LOADER_ITEMS


def test_no_dataloader_advice_without_steps() -> None:
    for f in _loader_frames():
        assert not _advice(_with(f, summary=_summary(f, steps=0))).keys() & LOADER_ITEMS


def test_every_loader_prediction_states_a_figure() -> None:
    frames = [*_loader_frames(), _cpu_workers(cores=4, worker_cpu=95.0)]
    items = [a for f in frames for a in _advice(f).values() if a.id in LOADER_ITEMS]
    assert items
    for item in items:
        assert not VAGUE.search(item.action), item.action
        if "predicted" in item.action:
            assert re.search(r"predicted step [\d.]+ ms", item.action), item.action
            assert re.search(r"[\d.]+x the samples/s", item.action), item.action


def test_the_loader_advice_quotes_the_windows_one_step_time() -> None:
    """Every step time the items quote is the summary's mean, over the window's steps."""
    for f in _loader_frames():
        (state,) = f.attached
        summary = state.summary
        assert summary.mean_step_ns is not None
        mean = figure(summary.mean_step_ns / 1e6)
        for item in _advice(f).values():
            if item.id not in LOADER_ITEMS:
                continue
            assert f"over the last {summary.steps} steps" in item.evidence, item.evidence
            assert f"mean step {mean} ms" in item.evidence, item.evidence
            assert not re.search(r"(?<!mean )step (?:of )?[\d.]+ ms", item.evidence.replace(
                f"mean step {mean} ms", "")), item.evidence
            quoted = re.findall(r"instead of (?:mean )?([\d.]+) ms", item.action)
            assert all(q == mean for q in quoted), (item.action, mean)


def _bimodal(pid: int) -> AttachState:
    """Half the steps 10 ms, half 90 ms (a worker's batch, then one already waiting)."""
    base = attached(pid, data_ms=30, compute_ms=20, num_workers=0, device="cpu",
                    num_threads=1)
    steps = tuple(replace(s, duration_ns=(10 if i % 2 else 90) * MS,
                          data_ns=(0 if i % 2 else 80) * MS)
                  for i, s in enumerate(base.steps))
    return replace(base, steps=steps)


def test_bimodal_steps_are_named_beside_their_mean() -> None:
    row = replace(process(10, role="trainer", cpu=60.0, wait=1.0),
                  main_thread_busy_percent=60.0)
    f = frame(processes=[row], cores=8, cpu_percent=20.0, attach=(_bimodal(10),))
    (state,) = f.attached
    assert state.summary.step_modes  # the builder's window as the sampler derives it
    zero = _advice(f)["num-workers-zero"]
    shape = step_shape(state)
    assert shape is not None
    assert f"mean step {figure(shape.step_ms)} ms" in zero.evidence
    assert "bimodal: 50% of steps ~10.0 ms, 50% ~90.0 ms" in zero.evidence

