"""The cpu-starved advice from constructed frames: it names the rivals with owner and %CPU,
predicts a step time, stays silent on an idle box, and silences cpu-threads."""

from __future__ import annotations

import re
from dataclasses import replace

from gputop.advice import Advisor, evaluate
from gputop.advice.context import Context
from gputop.core.model import Advice, AttachState, CpuCompetitor, CpuStarvation, Frame
from tests.helpers.builders import attached, frame, trainer_with_workers

STARVED = CpuStarvation(
    main_thread_wait_percent=66.0, main_thread_run_percent=33.0, runqueue_wait_percent=70.0,
    cores_got=0.34, cores_wanted=1.0, cores_allowed=1,
    competitors=(CpuCompetitor(123, "bob", "python spin.py", 33.0),
                 CpuCompetitor(124, "carol", "python -c while True: pass", 32.0)),
    competitors_cores=0.65)


def oversubscribed(starvation: CpuStarvation | None) -> Frame:
    """The trainer cpu-threads advises on (8 threads queueing on the cores it gets), found
    starved or not."""
    rows, group = trainer_with_workers(9, workers=4, worker_cpu=100.0, trainer_cpu=400.0,
                                       trainer_wait=350.0)
    f = frame(processes=rows, trainers=(group,), cores=8, cpu_percent=100.0,
              attach=(attached(9, data_ms=5, compute_ms=90, device="cpu", num_threads=8,
                               num_workers=4),))
    return with_starvation(f, starvation)


def with_starvation(f: Frame, starvation: CpuStarvation | None) -> Frame:
    state: AttachState = replace(f.attached[0], cpu_starvation=starvation)
    return replace(f, attached=(state,))


def advice(f: Frame) -> dict[str, Advice]:
    return {a.id: a for a in evaluate(Context(f, {}))}


def test_the_advice_names_the_wait_the_cores_and_the_rivals() -> None:
    a = advice(oversubscribed(STARVED))["cpu-starved"]
    assert a.trainer_pid == 9 and a.severity == "critical"
    assert "waited for a core 66% of the time" in a.evidence
    assert "it gets 0.34 of the 1.00 cores it wants" in a.evidence
    assert ("taking them: pid 123 (bob, python spin.py) 33%, pid 124 (carol, python -c while "
            "True: pass) 32%") in a.evidence
    assert "renice -n 19 -p 123 124" in a.action and "taskset" in a.action
    # the step (95 ms) with the cores it wants: it waited 66% of its time, so 34% of it
    predicted = re.search(r"Predicted: mean step about ([\d.]+) ms instead of ([\d.]+) ms",
                          a.action)
    assert predicted is not None, a.action
    assert float(predicted.group(2)) == 95.0
    assert float(predicted.group(1)) == round(95.0 * 0.34, 1)


def test_the_prediction_is_the_smaller_gain_and_states_a_figure_without_steps() -> None:
    # main thread waited a quarter; the cores it gets are half it wants: the smaller gain
    mild = replace(STARVED, main_thread_wait_percent=25.0, cores_got=0.5, cores_wanted=1.0)
    a = advice(oversubscribed(mild))["cpu-starved"]
    assert a.severity == "warn" and "about 71.2 ms instead of 95.0 ms" in a.action
    f = oversubscribed(STARVED)
    stepless = replace(f.attached[0], summary=replace(f.attached[0].summary,
                                                      mean_step_ns=None))
    a = advice(replace(f, attached=(stepless,)))["cpu-starved"]
    assert re.search(r"Predicted: about x[\d.]+ the steps/s", a.action), a.action


def test_silent_on_an_idle_box() -> None:
    f = oversubscribed(None)
    assert "cpu-starved" not in advice(f)
    quiet = frame(attach=(attached(9, data_ms=1, compute_ms=20, device="cpu"),))
    assert "cpu-starved" not in advice(quiet)
    assert not Advisor(on_after=1)(quiet)


def test_cpu_threads_is_silent_while_other_processes_starve_the_trainer() -> None:
    assert "cpu-threads" in advice(oversubscribed(None))  # its own case: it speaks
    found = advice(oversubscribed(STARVED))
    assert "cpu-threads" not in found and "cpu-starved" in found
