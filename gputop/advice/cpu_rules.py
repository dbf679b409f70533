"""Rules about the CPU a trainer gets: other processes holding the cores it waits for."""

from __future__ import annotations

from gputop.advice.context import Context, figure
from gputop.core.model import Advice, AttachState, CpuStarvation

MAX_GAIN = 20.0  # a rate read off a trainer getting a few % of a core is rough past this
CRITICAL_WAIT = 50.0  # its main thread waits for a core more than it does anything else


def cpu_starved(ctx: Context, state: AttachState) -> list[Advice]:
    """A trainer whose main thread waits for cores that other processes hold: name them with
    their owners and %CPU, and predict its step time with the cores it wants."""
    found = state.cpu_starvation
    if found is None:
        return []
    factor = unstarved_factor(found)
    step_ns = state.summary.mean_step_ns
    if step_ns:
        step_ms = step_ns / 1e6
        predicted = (f"mean step about {figure(step_ms * factor)} ms instead of "
                     f"{figure(step_ms)} ms over the last {state.summary.steps} steps "
                     f"(x{figure(1 / factor)} the steps/s)")
    else:
        predicted = f"about x{figure(1 / factor)} the steps/s it makes now"
    others = " ".join(str(o.pid) for o in found.competitors)
    theirs = (f"lower the others' priority (renice -n 19 -p {others}) or pin them to other "
              f"cores (taskset -acp <cpus> on each), or " if others else "")
    return [Advice(
        id="cpu-starved",
        severity="critical" if found.main_thread_wait_percent >= CRITICAL_WAIT else "warn",
        title="Other processes hold the cores the trainer waits for",
        evidence=evidence(found),
        action=f"Give the trainer its cores back: {theirs}move the trainer to idle cores "
        f"(taskset -acp <cpus> {state.pid}); in a container or batch job, reserve whole "
        f"cores for it (--cpus, a cpuset, cgroup cpu.max for the others). "
        f"Predicted: {predicted}.",
    )]


def unstarved_factor(found: CpuStarvation) -> float:
    """The step time with the cores it wants, as a share of its step time now: the cores it
    gets over those it wants, or the main thread's time without its wait, whichever is the
    smaller gain; no more than MAX_GAIN."""
    by_cores = found.cores_got / found.cores_wanted if found.cores_wanted > 0 else 1.0
    by_wait = 1.0 - found.main_thread_wait_percent / 100.0
    return min(1.0, max(by_cores, by_wait, 1.0 / MAX_GAIN))


def evidence(found: CpuStarvation) -> str:
    """'the trainer's main thread waited for a core 67% of the time; it gets 0.33 of the 1.0
    cores it wants; taking them: pid 123 (bob, python spin.py) 33%, ...'."""
    text = (f"the trainer's main thread waited for a core "
            f"{found.main_thread_wait_percent:.0f}% of the time (run-queue wait; it ran "
            f"{found.main_thread_run_percent:.0f}%); it gets {found.cores_got:.2f} of the "
            f"{found.cores_wanted:.2f} cores it wants (of {found.cores_allowed} it may use)")
    if found.competitors:
        named = ", ".join(f"pid {o.pid} ({o.username or '?'}, {o.command}) "
                          f"{o.cpu_percent:.0f}%" for o in found.competitors)
        text += f"; taking them: {named}"
    return text
