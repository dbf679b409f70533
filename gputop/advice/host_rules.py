"""Rules about the host: memory bandwidth and layout, swap, CPU threads."""

from __future__ import annotations

import math
import re

from gputop.advice.context import (
    CORE_PERCENT,
    STARVED_WAIT,
    Context,
    StepShape,
    figure,
    input_evidence,
    is_data_bound,
    steady,
)
from gputop.core.model import Advice, AttachState, MemoryLayoutCheck

HIGH_PRESSURE = 0.6
LOW_PEAK_SHARE = 0.5
SWAP_IN_PER_S = 1.0
MAJOR_FAULTS_PER_S = 50.0  # a trainer's own (it and its workers), never the host's
SHOWN_PROCESSES = 4  # the processes whose faults the swap advice names, most first
THREAD_QUEUE_SHARE = 0.25  # threads queueing this long per second they run are oversubscribed
CORE_SLACK = 0.1
BUSY_THREADS = 0.8  # threads using this share of a core each are busy
IDLE_CORE = 0.75  # a core idle this share of a tick counts as one an added thread can use:
# kernel threads, the monitor's own ticks and light other work keep every core a little busy
MIN_GAIN = 0.10
# MemoryLayout.summary(): "1 of 4 slots: 16 GiB DDR4 3200 MT/s; 1 channel (B)"
ONE_CHANNEL = re.compile(r"^\d+ of (\d+) slots: .*; 1 channel \(")


def host_memory_bandwidth(ctx: Context) -> list[Advice]:
    """Bandwidth pressure high while steps wait for data, or a peak far under the hardware's."""
    m = ctx.frame.memory_bandwidth
    if m is None:
        return []
    out = []
    expected = m.expected_peak_bytes_per_s
    measured = m.measured_peak_bytes_per_s
    if expected and measured and measured < LOW_PEAK_SHARE * expected:
        out.append(Advice(
            id="host-memory-bandwidth",
            severity="warn",
            title="Host memory is much slower than the installed modules should be",
            evidence=f"measured peak traffic {measured / 1e9:.1f} GB/s is "
            f"{measured / expected:.0%} of the {expected / 1e9:.1f} GB/s the memory "
            f"layout should give" + (f" ({m.layout})" if m.layout else ""),
            action=_layout_action(m.layout),
        ))
    starved = [a for a in ctx.frame.attached if is_data_bound(a)]
    if m.pressure is not None and m.pressure >= HIGH_PRESSURE and starved:
        out.append(Advice(
            id="host-memory-bandwidth",
            severity="warn",
            title="Host memory bandwidth is saturated while steps wait for data",
            evidence=f"bandwidth pressure {m.pressure:.2f} ({m.source}, {m.confidence}); "
            f"{input_evidence(starved[0])}",
            action="Reduce copies in the input pipeline (decode once, avoid per-sample "
            "numpy↔tensor round-trips, use uint8 until the GPU), or fewer workers fighting "
            "for bandwidth.",
        ))
    return out[:1]


def _layout_action(layout: str | None) -> str:
    """What to do about the modules; a single populated channel of several gets its own line."""
    one = ONE_CHANNEL.match(layout or "")
    if one and int(one.group(1)) > 1:
        return ("Only one memory channel is populated: add a matching module so a second "
                "channel is used, and check each module sits in the slot the board manual "
                "names (a module in the wrong slot halves bandwidth or worse).")
    return ("Check that the memory modules sit in the slots the board manual names for "
            "dual-channel use (one module in the wrong slot halves bandwidth or worse).")


def memory_layout(ctx: Context) -> list[Advice]:
    """Empty channels, uneven channels or mixed module speeds: named, whatever the pressure."""
    m = ctx.frame.memory_bandwidth
    check = m.layout_check if m is not None else None
    if check is None or check.verdict != "unbalanced":
        return []
    populated, total = check.channels_populated, check.channels_total
    if populated is not None and total and populated < total:
        title = f"Only {populated} of {total} memory channels are populated"
    elif check.slow_slots:
        title = "Memory modules of different speeds hold all of them to the slowest"
    else:
        title = "Memory channels are unevenly populated"
    return [Advice(
        id="memory-layout",
        severity="warn",
        title=title,
        evidence="; ".join(check.findings) + f" ({_source_name(check.source)})",
        action=_layout_fix(check),
    )]


def _source_name(source: str | None) -> str:
    """Where the module list came from, in words."""
    return {"udev": "udev's DMI data", "dmi": "SMBIOS records", "dmidecode": "dmidecode",
            "edac": "EDAC"}.get(source or "", source or "unknown source")


def _layout_fix(check: MemoryLayoutCheck) -> str:
    """What to change, slot by slot."""
    like = f" ({check.usual_module})" if check.usual_module else ""
    steps = []
    if check.fill_slots:
        steps.append(f"Fill {', '.join(check.fill_slots)} with modules matching the others{like}, "
                     "so that every channel carries the same memory: bandwidth grows with "
                     "populated channels.")
    if check.slow_slots:
        steps.append(f"Replace the slower modules in {', '.join(check.slow_slots)} with ones "
                     f"rated like the rest: every module runs at the slowest one's speed.")
    if not steps:
        steps.append(f"Give every channel the same modules{like}.")
    return " ".join(steps) + " The board manual's population order says which slot comes first."


def swap(ctx: Context) -> list[Advice]:
    """A trainer whose own processes page memory in from storage or swap while it trains:
    its steps wait on disk. Only the major faults of the trainer and its DataLoader workers
    count (/proc/PID/stat majflt of each, as a rate): the host's counters move with any
    process's paging, another program's or a library being loaded. Swap is named only where
    the host has some."""
    out = []
    for pid, pids in _trainer_processes(ctx):
        rates = [(p, row.major_faults_per_s) for p in pids
                 if (row := ctx.process(p)) is not None and row.major_faults_per_s]
        faults = sum(rate for _, rate in rates)
        if faults >= MAJOR_FAULTS_PER_S:
            out.append(_paging(ctx, pid, faults, rates))
    return out


def _trainer_processes(ctx: Context) -> list[tuple[int, tuple[int, ...]]]:
    """Each trainer that trains, with its own PIDs: it and its DataLoader workers. A probed
    trainer that has not finished a step yet is still starting (its imports page in libraries):
    not judged."""
    starting = {a.pid for a in ctx.frame.attached if not a.steps}
    out = [(g.pid, (g.pid, *g.worker_pids)) for g in ctx.frame.trainers
           if g.pid not in starting]
    grouped = {g.pid for g in ctx.frame.trainers}
    out += [(a.pid, (a.pid,)) for a in ctx.frame.attached
            if a.pid not in grouped and a.pid not in starting]
    return out


def _paging(ctx: Context, trainer: int, faults: float,
            rates: list[tuple[int, float]]) -> Advice:
    """The advice for one trainer paging in `faults` pages a second, quoting whose they are."""
    host = ctx.frame.host
    m = ctx.frame.memory_bandwidth
    has_swap = host.swap_total_bytes > 0
    swap_in = (m.swap_in_per_s or 0.0) if m is not None and has_swap else 0.0
    swapping = swap_in >= SWAP_IN_PER_S
    ranked = sorted(rates, key=lambda r: -r[1])
    named = ", ".join(f"{'trainer' if p == trainer else 'worker'} {p} {rate:.0f}/s"
                      for p, rate in ranked[:SHOWN_PROCESSES])
    if len(ranked) > SHOWN_PROCESSES:
        named += f" and {len(ranked) - SHOWN_PROCESSES} more"
    evidence = (f"trainer {trainer} and its workers take {faults:.0f} major page faults/s "
                f"({named}); {host.memory_available_bytes / 1024**3:.1f} GiB available")
    if has_swap:
        evidence += (f"; host swap-in {swap_in:.0f} pages/s, swap used "
                     f"{host.swap_used_bytes / 1024**3:.1f} of "
                     f"{host.swap_total_bytes / 1024**3:.1f} GiB")
    return Advice(
        id="swap",
        severity="critical" if swapping else "warn",
        title="The host is swapping while training" if swapping
        else "Training memory is being paged in from disk",
        evidence=evidence,
        action="Lower host memory use (fewer workers or a smaller prefetch_factor, no full "
        "dataset copies per worker) so the pages the trainer touches stay in RAM, or add RAM.",
        trainer_pid=trainer,
    )


def cpu_threads(ctx: Context, state: AttachState) -> list[Advice]:
    """CPU-only training whose intra-op threads don't fit the cores the trainer gets: too many
    queue behind each other, too few leave idle cores; predicted from what its threads do."""
    config = state.config
    threads = config.num_threads
    if config.device not in (None, "cpu") or threads is None:
        return []
    if state.cpu_starvation is not None:  # other processes hold its cores: not its threads
        return []
    if ctx.gpus_of(state.pid):  # it holds GPU memory: its compute is there, whatever it said
        return []
    if not steady(ctx.frame, state):
        return []
    row = ctx.process(state.pid)
    if row is None or row.cpu_percent is None or ctx.frame.host.cpu_percent is None:
        return []
    used = row.cpu_percent / CORE_PERCENT
    idle = ctx.free_cores()
    reach = used + idle  # the cores its threads could run on: its own and the idle ones
    if row.runqueue_wait_percent is not None and threads >= reach + 1:
        return _too_many_threads(threads, used, idle, row.runqueue_wait_percent / CORE_PERCENT,
                                 ctx.step_shape(state))
    return _too_few_threads(state, ctx.step_shape(state), threads, used, idle)


def _too_many_threads(threads: int, used: float, idle: float, wait: float,
                      shape: StepShape | None) -> list[Advice]:
    """Threads that queue for the cores the trainer gets; fewer keep every core it uses.

    The prediction is a range: the same cores at least (the step as now), and at most the
    compute without the share of its threads' time spent queueing (the slowest of them, which
    the others wait for, queues at least that share)."""
    if wait < STARVED_WAIT or wait < THREAD_QUEUE_SHARE * used:
        return []  # they barely queue: nothing to win
    target = max(1, math.ceil(used - CORE_SLACK), round(used + idle))
    if target >= threads:
        return []
    return [Advice(
        id="cpu-threads",
        severity="warn",
        title="More intra-op threads than the cores the trainer gets",
        evidence=f"torch.get_num_threads()={threads}; the trainer runs on {used:.1f} cores "
        f"({idle:.1f} idle besides) and its threads wait {wait:.1f} core-seconds per second "
        "for a core",
        action=f"Call torch.set_num_threads({target}): compute keeps the {used:.1f} cores it "
        f"gets now without its threads queueing for them{_queueing_gain(shape, used, wait)}.",
    )]


def _queueing_gain(shape: StepShape | None, used: float, wait: float) -> str:
    """': predicted step 12.0 to 20.0 ms (1.67x to 1.00x the samples/s)', the compute less
    the share of thread time spent queueing, to the step as now; '' without a step."""
    if shape is None or shape.step_ms <= 0:
        return ""
    queued = wait / (used + wait)
    best = shape.input_ms + shape.compute_ms * (1 - queued)
    return (f": predicted step {figure(best)} to {figure(shape.step_ms)} ms "
            f"({shape.step_ms / best:.2f}x to 1.00x the samples/s; its threads queue "
            f"{queued:.0%} of the time)")


def _too_few_threads(state: AttachState, shape: StepShape | None, threads: int, used: float,
                     idle: float) -> list[Advice]:
    """Busy threads beside idle cores in a compute-bound trainer: more would use them."""
    added = idle_cores(idle)
    if (state.summary.verdict != "compute-bound" or shape is None or not added
            or used < BUSY_THREADS * threads):
        return []
    target = threads + added
    # Compute splits evenly over the threads and waits for the slowest: an added thread gets
    # its share of the idle cores, a thread there now what it gets now.
    slowest = max(1.0, (used / threads) / min(1.0, idle / added))
    predicted = shape.input_ms + shape.compute_ms * threads / target * slowest
    if predicted > shape.step_ms * (1 - MIN_GAIN):
        return []
    return [Advice(
        id="cpu-threads",
        severity="info",
        title="Idle cores beside busy intra-op threads",
        evidence=f"torch.get_num_threads()={threads}: its threads run on {used:.1f} cores while "
        f"{idle:.1f} cores are idle; compute is {shape.compute_ms:.1f} ms of a "
        f"{shape.step_ms:.1f} ms step",
        action=f"Call torch.set_num_threads({target}): if compute scales with threads, a step "
        f"takes about {predicted:.1f} ms instead of {shape.step_ms:.1f} ms (fewer threads if "
        "the machine must serve other work).",
    )]


def idle_cores(idle: float) -> int:
    """The idle cores added threads could run on: whole ones, and a last one idle at least
    IDLE_CORE of the time."""
    return math.floor(idle + 1 - IDLE_CORE)
