"""Rules about an attached trainer's input pipeline.

The num_workers rules read the workers' own evidence (CPU, time waiting for a core, time
blocked, storage reads) and the step's medians, predict the step after the change, and say
nothing when the prediction is not a gain. At most one of them speaks for a trainer.
"""

from __future__ import annotations

from gputop.advice.context import (
    Context,
    JobCpu,
    StepShape,
    WorkerLoad,
    ceil_div,
    counted,
    cpu_only,
    decimals,
    exact,
    figure,
    input_evidence,
    is_data_bound,
    job_cpu,
    num_workers,
    others_cores,
    rounded_up,
    shown,
    swapping,
    trainer_starved,
    trainer_thread_saturated,
)
from gputop.core.model import Advice, AttachState

MAX_WORKERS = 16  # the article's largest good value; beyond it dispatch costs more than it gains
MIN_GAIN = 0.10  # advise a change only when the predicted step is this much shorter
HEADROOM = 1.5  # fewer workers must still have this much room for the same work (bursts)
BLOCKED_LOADER = 0.5  # workers blocked this share of the time wait on I/O, not on the CPU
IDLE_WORKER = 0.30  # without run-queue figures: workers under this share of a core idle
SATURATED_HOST = 90.0
H2D_SHARE = 0.05
OWN_HOST_CORES = 0.5  # other work under this many cores: the job's workers compete among themselves
MIN_CPU_SHARE = 0.05  # cores: never divide by a budget smaller than this


def no_dataloader(state: AttachState) -> bool:
    """The trainer's input is its own code before the forward (no DataLoader to tune)."""
    return state.summary.input_outside_model


def num_workers_advice(ctx: Context, state: AttachState) -> list[Advice]:
    """The one num_workers item for a trainer: none, too many, or more (never two)."""
    if no_dataloader(state):
        return []
    for rule in (num_workers_zero, too_many_workers, raise_num_workers):
        found = rule(ctx, state)
        if found:
            return found
    return []


def _cpu_step_ms(job: JobCpu, shape: StepShape, cpu_trainer: bool) -> float:
    """The shortest step the job's CPU allows: the CPU it spends per step over the cores it
    can use. A GPU trainer's own CPU (kernel launches, sync waits) is left out: its loading
    overlaps the GPU's compute, so only the loader's CPU competes for the cores."""
    if cpu_trainer:
        return job.used * shape.step_ms / max(job.available, MIN_CPU_SHARE)
    loader = max(0.0, job.used - job.trainer_used)
    room = max(job.available - job.trainer_used, MIN_CPU_SHARE)
    return loader * shape.step_ms / room


def num_workers_zero(ctx: Context, state: AttachState) -> list[Advice]:
    """Data-bound while every batch is loaded in the main process, and workers would help."""
    if not is_data_bound(state) or num_workers(ctx, state) != 0:
        return []
    shape = ctx.step_shape(state)
    job = job_cpu(ctx, state.pid, trainer_starved(ctx, state.pid))
    on_cpu = cpu_only(ctx, state)
    if shape is None or shape.input_ms <= 0 or (on_cpu and job is None):
        return []  # a CPU trainer's gain depends on the CPU it has: unknown without rates
    # Beside a GPU's compute the loading moves to idle host time: only the loader's CPU counts,
    # and the training process does all of it now.
    # The arithmetic is done on the figures it prints, so that it holds as printed.
    cpu_ms = shown(_cpu_step_ms(job, shape, on_cpu)) if on_cpu and job is not None else 0.0
    input_ms, compute_ms, step_ms = (shown(shape.input_ms), shown(shape.compute_ms),
                                     shown(shape.step_ms))
    floor = max(compute_ms, cpu_ms, 1e-3)
    target = max(1, min(MAX_WORKERS, ceil_div(input_ms, floor)))
    predicted = max(floor, input_ms / target)
    if predicted > step_ms * (1 - MIN_GAIN):
        return []  # the CPU the loading would move to is already spent: not a gain
    cores = ctx.frame.host.cpu_count
    cpu = (f"; the job's CPU ({job.words()}) allows a step every {figure(cpu_ms)} ms"
           if on_cpu and job is not None else "")
    pin = "" if on_cpu else ", pin_memory=True"
    return [Advice(
        id="num-workers-zero",
        severity="critical",
        title="Batches are loaded in the training process itself (num_workers=0)",
        evidence=f"{input_evidence(state)}; num_workers=0 on a {cores}-core host. Loading "
        f"takes {figure(input_ms)} ms per batch, compute {figure(compute_ms)} ms{cpu}: "
        f"{figure(input_ms)} / {figure(floor)} = {rounded_up(input_ms / floor)} → "
        f"{counted(target, 'worker')}{_capped(target, input_ms / floor)}",
        action=f"Try DataLoader(num_workers={target}{pin}, persistent_workers=True) so "
        f"batches are prepared while the model computes: predicted step {figure(predicted)} "
        f"ms instead of {figure(step_ms)} ms.",
    )]


def raise_num_workers(ctx: Context, state: AttachState) -> list[Advice]:
    """Data-bound, and more workers of the kind there are would shorten the step."""
    n = num_workers(ctx, state)
    load = ctx.worker_load(state.pid)
    shape = ctx.step_shape(state)
    if not is_data_bound(state) or not n or load is None or shape is None or swapping(ctx):
        return []
    if trainer_thread_saturated(ctx, state.pid):
        return []  # more workers would only add to what its thread already queues behind
    job = job_cpu(ctx, state.pid, load.starved or trainer_starved(ctx, state.pid))
    if job is None:
        return []
    # The arithmetic is done on the figures it prints, so that it holds as printed.
    step_ms, compute_ms = shown(shape.step_ms), shown(shape.compute_ms)
    per_batch = n * step_ms  # n workers deliver a batch per step: each takes n steps
    cpu_ms = shown(_cpu_step_ms(job, shape, cpu_only(ctx, state)))
    floor = max(compute_ms, cpu_ms, 1e-3)
    target = min(MAX_WORKERS, ceil_div(per_batch, floor))
    predicted = max(floor, per_batch / max(target, 1))
    if target <= n or predicted > step_ms * (1 - MIN_GAIN):
        return []
    per_batch_words = f"{per_batch:.{decimals(step_ms)}f}"  # exact: n times a printed figure
    return [Advice(
        id="raise-num-workers",
        severity="warn",
        title="The workers cannot keep up: add DataLoader workers",
        evidence=f"{input_evidence(state)}; {load.words()}. They deliver a batch every "
        f"{figure(step_ms)} ms on average, so each takes {n} x {figure(step_ms)} = "
        f"{per_batch_words} ms per batch; a step computes for {figure(compute_ms)} ms and "
        f"the job's CPU ({job.words()}) allows one every {figure(cpu_ms)} ms: "
        f"{per_batch_words} / {figure(floor)} = {rounded_up(per_batch / floor)} → "
        f"{counted(target, 'worker')}{_capped(target, per_batch / floor)}",
        action=f"Try num_workers={target}: predicted step {figure(predicted)} ms instead of "
        f"{figure(step_ms)} ms ({step_ms / predicted:.1f}x the samples/s).",
    )]


def _capped(target: int, wanted: float) -> str:
    return f" (at most {MAX_WORKERS})" if target == MAX_WORKERS and wanted > MAX_WORKERS else ""


def too_many_workers(ctx: Context, state: AttachState) -> list[Advice]:
    """More workers than cores, starved for them, and fewer would still feed the step.

    Steps that do not wait for input have workers running ahead: their blocked time is
    time waiting for room in the prefetch queue, so only their busy time (running or
    waiting for a core) is work, and fewer workers with headroom do it. Steps that wait for
    input need every worker's share of a core: fewer help only when the job itself keeps
    the cores busy (as many workers as cores still load on every core). With other work on
    the host, fewer workers get less of the shared cores (a data-bound trainer on a busy
    host lost samples/s when its CPU-bound workers were halved): quiet then.
    """
    n = num_workers(ctx, state)
    load = ctx.worker_load(state.pid)
    cores = ctx.frame.host.cpu_count
    if not n or n <= cores or load is None or load.busy is None or not load.starved:
        return []
    if state.summary.verdict == "compute-bound":
        busy = round(load.busy, 2)  # as printed: the product holds as printed
        needed = HEADROOM * n * busy
        target = max(1, ceil_div(needed, 1.0))
        share = state.summary.input_bound_percent or 0.0
        why = (f"while the steps barely wait for input ({share:.0f}% of step time). Their work "
               f"(busy {busy:.0%} of the time each) fits in {HEADROOM} x {n} x "
               f"{busy:.2f} = {exact(needed)} → {counted(target, 'worker')}")
    else:
        job = job_cpu(ctx, state.pid, starved=True)
        others = None if job is None else others_cores(ctx, job.used)
        if others is None or others >= OWN_HOST_CORES:
            return []
        target = cores
        why = (f"and the job itself keeps the cores busy (other work: {max(0.0, others):.1f} "
               f"cores): {counted(cores, 'worker')} still load on every core")
    if target >= n:
        return []
    return [Advice(
        id="too-many-workers",
        severity="warn",
        title="More DataLoader workers than the cores can run",
        evidence=f"num_workers={n} on a {cores}-core host; {load.words()}, {why}",
        action=f"Try num_workers={target}: the other workers only queue for the cores "
        f"(predicted: no fewer samples/s, {n - target} fewer processes and their memory).",
    )]


def io_bound_loading(ctx: Context, state: AttachState) -> list[Advice]:
    """Data-bound while the workers mostly wait on something other than the CPU."""
    if no_dataloader(state):
        return []
    n = num_workers(ctx, state)
    load = ctx.worker_load(state.pid)
    if not is_data_bound(state) or not n or load is None:
        return []
    if trainer_thread_saturated(ctx, state.pid):
        return []  # the workers wait for the trainer to take their batches, not on I/O
    blocked = load.blocked
    if blocked is None:  # no run-queue figures: idle workers on a host with CPU to spare
        if load.run >= IDLE_WORKER or (ctx.frame.host.cpu_percent or 0.0) >= SATURATED_HOST:
            return []
    elif blocked < BLOCKED_LOADER or load.starved:
        return []  # they mostly run, or queue for a core: not I/O
    return [Advice(
        id="io-bound-loading",
        severity="warn",
        title="Loading waits on I/O, not on the CPU",
        evidence=f"{input_evidence(state)} while {load.words()}{_storage_words(load)}",
        action="Overlap the waits with more workers, and shorten them: cache the dataset on "
        "local SSD or in RAM, pack small files into larger shards, or pre-decode.",
    )]


def _storage_words(load: WorkerLoad) -> str:
    """What the storage counters say about the workers' waits."""
    text = ""
    if load.io_wait is not None:
        text += f"; {load.io_wait:.0%} of their time in block I/O"
    if load.read_bytes_per_s is None:
        return text
    if load.read_bytes_per_s >= 1e5:
        return text + f"; they read {load.read_bytes_per_s / 1e6:.1f} MB/s from storage"
    return text + "; they read nothing from local storage (the waits are on the network, a " \
        "lock or a sleep)"


def pin_memory_off(ctx: Context, state: AttachState) -> list[Advice]:
    """A CUDA trainer that spends a noticeable share copying from pageable memory."""
    if no_dataloader(state):
        return []
    config = state.config
    median = dict(state.summary.median_phase_ns)
    h2d, step = median.get("h2d"), state.summary.median_step_ns
    on_cuda = (config.device or "").startswith("cuda")
    if not on_cuda or config.pin_memory is not False or h2d is None or not step:
        return []
    share = h2d / step
    if share < H2D_SHARE:
        return []
    return [Advice(
        id="pin-memory-off",
        severity="warn",
        title="Host-to-device copies run from pageable memory",
        evidence=f"host-to-device copy is {share:.0%} of the median step "
        f"({h2d / 1e6:.1f} of {step / 1e6:.1f} ms) with pin_memory=False",
        action="Set DataLoader(pin_memory=True) and copy with .to(device, non_blocking=True) "
        "if the host has memory to spare.",
    )]
