"""`cpu-starved` from constructed rows: a main thread waiting for cores others hold, and not
an idle box, a trainer whose own threads queue, or rivals on other CPUs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gputop.analysis.starvation import MAIN_WAIT_SHARE, WAIT_PER_RUN, cpu_starvation
from gputop.core.model import CpuStarvation, ProcessSample
from tests.helpers.builders import process

TRAINER = 9


def trainer(cpu: float, wait: float, main_busy: float) -> ProcessSample:
    """The trainer: its CPU and its threads' summed run-queue wait, its main thread's busy %."""
    return replace(process(TRAINER, role="trainer", cpu=cpu, wait=wait),
                   main_thread_busy_percent=main_busy)


def spinner(pid: int, cpu: float, user: str = "bob") -> ProcessSample:
    return replace(process(pid, cpu=cpu), username=user,
                   cmdline=("/usr/bin/python3", "-c", "while True: pass"))


def on(cpus: dict[int, set[int]], default: set[int]):
    """An affinity lookup: the CPUs of each PID named, `default` for the rest."""
    return lambda pid: frozenset(cpus.get(pid, default))


def starved_on_one_core(**affinity: set[int]) -> CpuStarvation | None:
    """A one-threaded trainer on core 0 beside two busy loops: a third of the core each."""
    me = trainer(cpu=33.0, wait=66.0, main_busy=99.0)
    rows = [me, spinner(20, 33.0), spinner(21, 40.0, user="carol"), process(30, cpu=0.5)]
    cpus = {TRAINER: {0}, **{int(k[1:]): v for k, v in affinity.items()}}
    return cpu_starvation(me, 66.0, [], rows, on(cpus, {0}))


def test_a_main_thread_waiting_for_busy_loops_is_starved_and_names_them() -> None:
    found = starved_on_one_core()
    assert found is not None
    assert found.main_thread_wait_percent == 66.0
    assert found.main_thread_run_percent == pytest.approx(33.0)
    assert found.cores_allowed == 1
    assert found.cores_got == pytest.approx(0.33)
    assert found.cores_wanted == pytest.approx(0.99)
    assert [(o.pid, o.username, o.cpu_percent) for o in found.competitors] == [
        (21, "carol", 40.0), (20, "bob", 33.0)]  # the near-idle process is not named
    assert found.competitors[1].command == "python3 -c while True: pass"
    assert found.competitors_cores == pytest.approx(0.73)


def test_rivals_on_cpus_the_trainer_may_not_use_do_not_count() -> None:
    assert starved_on_one_core(p20={1}, p21={1}) is None
    # A rival spread over both cores takes half its CPU from the trainer's one: with one
    # rival on core 0 alone, and half of another, they still hold it.
    found = starved_on_one_core(p21={0, 1})
    assert found is not None and found.competitors_cores == pytest.approx(0.53)


def test_an_idle_box_is_not_starved() -> None:
    me = trainer(cpu=99.0, wait=1.0, main_busy=100.0)
    assert cpu_starvation(me, 1.0, [], [me, process(30, cpu=2.0)], on({}, {0, 1})) is None


def test_waits_below_either_threshold_are_not_starvation() -> None:
    rows = [spinner(20, 90.0)]
    low = MAIN_WAIT_SHARE * 100 - 1  # a short wait, however short the run
    me = trainer(cpu=5.0, wait=low, main_busy=low + 5)
    assert cpu_starvation(me, low, [], [me, *rows], on({}, {0})) is None
    # waiting a quarter of the time but running far longer: a busy host's preemption
    run = (MAIN_WAIT_SHARE * 100) / WAIT_PER_RUN + 10
    me = trainer(cpu=run, wait=25.0, main_busy=25.0 + run)
    assert cpu_starvation(me, 25.0, [], [me, *rows], on({}, {0, 1})) is None


def test_a_trainers_own_threads_queueing_is_not_starvation() -> None:
    # Eight intra-op threads on two cores wait for each other; a light process beside them
    # takes far less than the trainer gets: cpu-threads' case, not this one.
    me = trainer(cpu=180.0, wait=600.0, main_busy=100.0)
    for other in (20.0, 60.0):
        rows = [me, spinner(20, other)]
        assert cpu_starvation(me, 40.0, [], rows, on({}, {0, 1})) is None
    # ...while rivals taking more of its cores than it gets starve it all the same
    me = trainer(cpu=60.0, wait=700.0, main_busy=100.0)
    rows = [me, spinner(20, 70.0), spinner(21, 70.0)]
    found = cpu_starvation(me, 60.0, [], rows, on({}, {0, 1}))
    assert found is not None and found.cores_wanted == 2.0


def test_the_trainers_workers_are_its_own_not_rivals() -> None:
    me = trainer(cpu=30.0, wait=60.0, main_busy=95.0)
    worker = replace(process(10, ppid=TRAINER, role="worker", cpu=60.0, wait=30.0,
                             trainer_pid=TRAINER))
    rows = [me, worker, spinner(20, 10.0)]
    assert cpu_starvation(me, 65.0, [worker], rows, on({}, {0})) is None
    found = cpu_starvation(me, 65.0, [], rows, on({}, {0}))  # were it not its worker
    assert found is not None and [o.pid for o in found.competitors] == [10, 20]
