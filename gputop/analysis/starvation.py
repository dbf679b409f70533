"""Whether a trainer is CPU-starved: its main thread waits for a core other processes hold.

The trainer's main thread is its loop. Each interval the kernel's schedstat splits that
thread's time into running, runnable-but-waiting-for-a-core (run-queue wait) and neither
(sleeping, blocked). On a host with a core to spare a runnable thread waits a few per cent
at most (wake-up latency, the scheduler tick). The trainer is `cpu-starved` when:

- its main thread waited for a core at least MAIN_WAIT_SHARE of the interval: one step in
  four of wall time lost outright, whatever the loop does with the rest;
- and waited at least WAIT_PER_RUN as long as it ran: it got no more than two thirds of the
  core it wanted. One CPU-bound rival of equal weight on its only core makes wait equal run;
  a busy host's occasional preemption stays far below half;
- and processes outside its job (it and its DataLoader workers) ran on the CPUs its
  affinity allows, taking at least BUSY_CORES between them. Where the job wants no more
  cores than it may use, its own threads cannot make it wait, so they need take only part
  (OTHERS_SHARE) of the cores it lacks; where its own threads outnumber its CPUs (more
  intra-op threads than cores: `cpu-threads`' case), the others must take at least as much
  of its CPUs as the job gets, or its waits are its own doing.

The finding says how many cores the job gets against how many it wants (its threads running
or waiting, at most the CPUs it may use) and names the busiest of the others.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from gputop.core.model import CpuCompetitor, CpuStarvation, ProcessSample

MAIN_WAIT_SHARE = 0.25
WAIT_PER_RUN = 0.5
BUSY_CORES = 0.5  # what one process busy half the time takes
OTHERS_SHARE = 0.5
ROUNDING_CORES = 0.25  # rates read moments apart: this much of a core is noise
LEAST_COMPETITOR_PERCENT = 1.0  # a process using less is not asked for its affinity
SHOWN_COMPETITORS = 3
COMMAND_CHARS = 40
CORE_PERCENT = 100.0

Affinity = Callable[[int], frozenset[int] | None]


def cpu_starvation(
    trainer: ProcessSample, main_wait_percent: float | None, workers: Sequence[ProcessSample],
    rows: Iterable[ProcessSample], cpus_allowed: Affinity,
) -> CpuStarvation | None:
    """The finding for `trainer` (with its `workers`' rows) among all `rows`, or None when it
    is not starved or a figure it rests on is unknown. `main_wait_percent`: its main thread's
    run-queue wait over the interval; `cpus_allowed`: a process's affinity (None: unknown)."""
    busy = trainer.main_thread_busy_percent
    if main_wait_percent is None or busy is None:
        return None
    wait, run = main_wait_percent / CORE_PERCENT, max(0.0, busy - main_wait_percent) / CORE_PERCENT
    if wait < MAIN_WAIT_SHARE or wait < WAIT_PER_RUN * run:
        return None
    job = (trainer, *workers)
    if any(p.cpu_percent is None or p.runqueue_wait_percent is None for p in job):
        return None
    allowed = cpus_allowed(trainer.pid)
    if not allowed:
        return None
    got = sum(p.cpu_percent or 0.0 for p in job) / CORE_PERCENT
    queued = sum(p.runqueue_wait_percent or 0.0 for p in job) / CORE_PERCENT
    demand = got + queued
    wanted = min(float(len(allowed)), demand)
    members = {p.pid for p in job}
    others = _others_on(allowed, rows, members, cpus_allowed)
    taken = sum(share for _, share in others) / CORE_PERCENT
    if taken < BUSY_CORES:
        return None
    if demand <= len(allowed) + ROUNDING_CORES:
        if taken < OTHERS_SHARE * (wanted - got):
            return None
    elif taken < got:
        return None
    # named as top shows them: by their own %CPU, among those that may run on its CPUs
    ranked = sorted(others, key=lambda o: -(o[0].cpu_percent or 0.0))[:SHOWN_COMPETITORS]
    return CpuStarvation(
        main_thread_wait_percent=main_wait_percent,
        main_thread_run_percent=run * CORE_PERCENT,
        runqueue_wait_percent=queued * CORE_PERCENT,
        cores_got=got,
        cores_wanted=max(wanted, got),
        cores_allowed=len(allowed),
        competitors=tuple(CpuCompetitor(p.pid, p.username, command(p), p.cpu_percent or 0.0)
                          for p, _ in ranked),
        competitors_cores=taken,
    )


def _others_on(allowed: frozenset[int], rows: Iterable[ProcessSample], members: set[int],
               cpus_allowed: Affinity) -> list[tuple[ProcessSample, float]]:
    """Each other process that used CPU, with the %CPU it took of the `allowed` CPUs (its
    own spread evenly over the CPUs it may use); one whose affinity is unknown is left out."""
    out = []
    for row in rows:
        used = row.cpu_percent
        if row.pid in members or used is None or used < LEAST_COMPETITOR_PERCENT:
            continue
        theirs = cpus_allowed(row.pid)
        if not theirs:
            continue
        shared = len(theirs & allowed)
        if shared:
            out.append((row, used * shared / len(theirs)))
    return out


def command(row: ProcessSample) -> str:
    """Its command line, the program without its folder (its name when it has none),
    shortened to COMMAND_CHARS."""
    if not row.cmdline:
        return row.name
    text = " ".join((row.cmdline[0].rsplit("/", 1)[-1], *row.cmdline[1:]))
    return text if len(text) <= COMMAND_CHARS else text[:COMMAND_CHARS - 3] + "..."
