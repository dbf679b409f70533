"""Rules about an attached trainer's input pipeline.

The num_workers rules read the workers' own evidence (CPU, time waiting for a core, time
blocked, storage reads) and the window's step (the step pane's one step time), predict the
step after the change, and say nothing when the prediction is not a gain. At most one of them
speaks for a trainer, and only where the steps say data is the wait: never for a host-bound
or CPU-starved trainer, nor one without steps.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    modes_words,
    num_workers,
    others_cores,
    rounded_up,
    shown,
    steady,
    swapping,
    trainer_starved,
    trainer_thread_saturated,
    window_words,
)
from gputop.analysis.steps import STEP_STATISTIC
from gputop.core.model import Advice, AttachState, ProcessSample

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


def data_is_the_wait(state: AttachState, share_percent: float | None = None) -> bool:
    """The trainer's steps say data is what they wait for: its window is data-bound, or (a
    rule with a threshold of its own) compute-bound with the input share over it. Never a
    host-bound or CPU-starved trainer, nor one without steps."""
    s = state.summary
    if not s.steps or state.cpu_starvation is not None or no_dataloader(state):
        return False
    if s.verdict == "data-bound":
        return True
    return (share_percent is not None and s.verdict == "compute-bound"
            and (s.input_bound_percent or 0.0) >= share_percent)


@dataclass(frozen=True, slots=True)
class Cores:
    """The cores a CPU trainer may use and what its model's intra-op threads hold of them
    while they compute, and the loading's CPU per batch, in ms (all as printed)."""

    allowed: float
    model: float
    threads: int | None
    load_cpu_ms: float

    @property
    def idle(self) -> float:
        """Cores the model's threads leave to the loading while they compute."""
        return max(0.0, shown(self.allowed - self.model))

    def fits(self, compute_ms: float) -> bool:
        """The loading's CPU fits on the idle cores while the model computes."""
        return self.load_cpu_ms <= self.idle * compute_ms

    def step_ms(self, compute_ms: float) -> float:
        """The shortest step the model's threads allow beside the loading (see `cores_of`)."""
        if self.fits(compute_ms):
            return compute_ms
        return shown((compute_ms + self.load_cpu_ms) / (1 + self.idle))

    def words(self, compute_ms: float) -> str:
        """What the model's threads leave the loading, with the arithmetic of `step_ms`."""
        threads = ("threads (as many cores as the trainer uses now)" if self.threads is None
                   else counted(self.threads, "thread"))
        text = (f"; the model's {threads} hold {figure(self.model)} of the "
                f"{figure(self.allowed)} cores the trainer may use, leaving {figure(self.idle)} "
                f"to the loading's {figure(self.load_cpu_ms)} ms of CPU a batch")
        if self.fits(compute_ms):
            return text + f", which fit there while the model computes {figure(compute_ms)} ms"
        return (text + ": a core taken from the model's threads holds them all up, so a step "
                f"takes at least ({figure(compute_ms)} + {figure(self.load_cpu_ms)}) / "
                f"(1 + {figure(self.idle)}) = {figure(self.step_ms(compute_ms))} ms")


def cores_of(ctx: Context, state: AttachState, job: JobCpu, load_cpu_ms: float) -> Cores:
    """The cores of a CPU trainer's job, for a prediction that counts those the workers would
    take from the model's own threads.

    The model: the trainer may use `allowed` cores (its CPU affinity and cgroup quota, and no
    more than the job gets beside other work: JobCpu.available). Its intra-op threads
    (torch.get_num_threads(), else the cores the trainer uses now) hold `model` of them while
    they compute, `idle` = allowed - model are left. Loading costs `load_cpu_ms` of CPU a
    batch. While it fits on the idle cores beside the compute (load <= idle x C), the step
    can shrink to the compute, C. Beyond that, workers run on cores the model's threads
    hold; those threads meet at the end of every operation, so a core taken from one of them
    holds them all up as long: against the loading, the model's threads count as one core,
    not as the cores they hold. Per step the model's time C and the loading's CPU share
    1 + idle such cores:

        step >= (C + load CPU) / (1 + idle)

    beside step >= loading time per batch / workers (each worker brings one batch in its
    time) and the job's CPU over the cores it gets (`_cpu_step_ms`). A model whose threads
    fill the cores (idle = 0) gains nothing from workers that compute (the step stays C +
    load CPU, as now): the rules stay quiet there, as the issue measured (minGPT, 2 threads
    on 2 cores, 0 -> 2 workers: 0.95x where the job's CPU alone predicted 1.57x). A model of
    one thread gets what the job's CPU allows. It is a bound: loading with far more CPU than
    the compute also runs while the model waits for its batch, on every core, so there the
    gain is undercounted and the rule stays quiet (a gain missed, never a loss advised).
    """
    row: ProcessSample | None = ctx.process(state.pid)
    allowed = job.available
    if row is not None and row.cores_allowed is not None:
        allowed = min(allowed, row.cores_allowed)
    allowed = shown(max(allowed, MIN_CPU_SHARE))
    threads = state.config.num_threads
    model = float(threads) if threads else job.trainer_used
    return Cores(allowed, shown(min(model, allowed)), threads, shown(max(0.0, load_cpu_ms)))


def _inline_load_cpu_ms(row: ProcessSample | None, job: JobCpu, shape: StepShape,
                        model_cores: float) -> float:
    """Loading's CPU a batch while the training process loads it itself, no more than the
    loading's time: its main thread's busy time a step less the compute it also runs (it is
    one of the model's threads); without that figure, the trainer's CPU a step less its
    model threads' over the compute (which undercounts it where those threads idle)."""
    busy = None if row is None else row.main_thread_busy_percent
    if busy is not None:
        spent = busy / 100.0 * shape.step_ms - shape.compute_ms
    else:
        spent = (job.trainer_used * shape.step_ms
                 - min(model_cores, job.available) * shape.compute_ms)
    return min(shape.input_ms, max(0.0, spent))


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
    """Data-bound while every batch is loaded in the main process, and workers would help:
    on a CPU trainer, counting the cores the workers would take from the model's threads."""
    if not is_data_bound(state) or not data_is_the_wait(state) or num_workers(ctx, state) != 0:
        return []
    shape = ctx.step_shape(state)
    job = job_cpu(ctx, state.pid, trainer_starved(ctx, state.pid))
    on_cpu = cpu_only(ctx, state)
    if shape is None or shape.input_ms <= 0 or (on_cpu and job is None):
        return []  # a CPU trainer's gain depends on the CPU it has: unknown without rates
    if on_cpu and not steady(ctx.frame, state):
        return []  # its CPU figures are still its start-up's, not its training's
    # Beside a GPU's compute the loading moves to idle host time: only the loader's CPU counts,
    # and the training process does all of it now.
    # The arithmetic is done on the figures it prints, so that it holds as printed.
    cpu_ms = shown(_cpu_step_ms(job, shape, on_cpu)) if on_cpu and job is not None else 0.0
    input_ms, compute_ms, step_ms = (shown(shape.input_ms), shown(shape.compute_ms),
                                     shown(shape.step_ms))
    cores = None
    if on_cpu and job is not None:
        threads = state.config.num_threads
        model = float(threads) if threads else job.trainer_used
        load_cpu = _inline_load_cpu_ms(ctx.process(state.pid), job, shape, model)
        cores = cores_of(ctx, state, job, load_cpu)
    gang_ms = cores.step_ms(compute_ms) if cores is not None else 0.0
    floor = max(compute_ms, cpu_ms, gang_ms, 1e-3)
    target = max(1, min(MAX_WORKERS, ceil_div(input_ms, floor)))
    predicted = max(floor, input_ms / target)
    if predicted > step_ms * (1 - MIN_GAIN):
        return []  # the CPU the loading would move to is already spent: not a gain
    host_cores = ctx.frame.host.cpu_count
    cpu = (f"; the job's CPU ({job.words()}) allows a step every {figure(cpu_ms)} ms"
           if on_cpu and job is not None else "")
    if cores is not None:
        cpu += cores.words(compute_ms)
    pin = "" if on_cpu else ", pin_memory=True"
    return [Advice(
        id="num-workers-zero",
        severity="critical",
        title="Batches are loaded in the training process itself (num_workers=0)",
        evidence=f"{input_evidence(state, shape)}; num_workers=0 on a {host_cores}-core host. "
        f"Loading takes {figure(input_ms)} ms per batch, compute {figure(compute_ms)} ms"
        f"{cpu}: {figure(input_ms)} / {figure(floor)} = "
        f"{rounded_up(input_ms / floor)} → "
        f"{counted(target, 'worker')}{_capped(target, input_ms / floor)}",
        action=f"Try DataLoader(num_workers={target}{pin}, persistent_workers=True) so "
        f"batches are prepared while the model computes: predicted step {figure(predicted)} "
        f"ms instead of {STEP_STATISTIC} {figure(step_ms)} ms "
        f"({step_ms / predicted:.2f}x the samples/s).",
    )]


def raise_num_workers(ctx: Context, state: AttachState) -> list[Advice]:
    """Data-bound, and more workers of the kind there are would shorten the step."""
    n = num_workers(ctx, state)
    load = ctx.worker_load(state.pid)
    shape = ctx.step_shape(state)
    if not data_is_the_wait(state) or not is_data_bound(state) or not n or load is None \
            or shape is None or swapping(ctx):
        return []
    if trainer_thread_saturated(ctx, state.pid):
        return []  # more workers would only add to what its thread already queues behind
    job = job_cpu(ctx, state.pid, load.starved or trainer_starved(ctx, state.pid))
    if job is None or (cpu_only(ctx, state) and not steady(ctx.frame, state)):
        return []
    # The arithmetic is done on the figures it prints, so that it holds as printed.
    step_ms, compute_ms = shown(shape.step_ms), shown(shape.compute_ms)
    per_batch = n * step_ms  # n workers deliver a batch per step: each takes n steps
    on_cpu = cpu_only(ctx, state)
    cpu_ms = shown(_cpu_step_ms(job, shape, on_cpu))
    # Each worker is on a core `run` of its time per batch: the loading's CPU a batch.
    cores = cores_of(ctx, state, job, per_batch * load.run) if on_cpu else None
    gang_ms = cores.step_ms(compute_ms) if cores is not None else 0.0
    floor = max(compute_ms, cpu_ms, gang_ms, 1e-3)
    target = min(MAX_WORKERS, ceil_div(per_batch, floor))
    predicted = max(floor, per_batch / max(target, 1))
    if target <= n or predicted > step_ms * (1 - MIN_GAIN):
        return []
    per_batch_words = f"{per_batch:.{decimals(step_ms)}f}"  # exact: n times a printed figure
    return [Advice(
        id="raise-num-workers",
        severity="warn",
        title="The workers cannot keep up: add DataLoader workers",
        evidence=f"{input_evidence(state, shape)}; {load.words()}. They deliver a batch every "
        f"{figure(step_ms)} ms on average, so each takes {n} x {figure(step_ms)} = "
        f"{per_batch_words} ms per batch; a step computes for {figure(compute_ms)} ms and "
        f"the job's CPU ({job.words()}) allows one every {figure(cpu_ms)} ms"
        f"{'' if cores is None else cores.words(compute_ms)}: "
        f"{per_batch_words} / {figure(floor)} = {rounded_up(per_batch / floor)} → "
        f"{counted(target, 'worker')}{_capped(target, per_batch / floor)}",
        action=f"Try num_workers={target}: predicted step {figure(predicted)} ms instead of "
        f"{STEP_STATISTIC} {figure(step_ms)} ms ({step_ms / predicted:.2f}x the samples/s).",
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
    if not state.summary.steps or state.summary.verdict == "unknown":
        return []
    if state.summary.verdict != "data-bound":  # compute, host code, or a core: not the input
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
    shape = ctx.step_shape(state)
    same = ("" if shape is None else
            f"predicted step {figure(shape.step_ms)} ms as now, 1.00x the samples/s, with ")
    return [Advice(
        id="too-many-workers",
        severity="warn",
        title="More DataLoader workers than the cores can run",
        evidence=f"num_workers={n} on a {cores}-core host; {load.words()}, {why}",
        action=f"Try num_workers={target}: the other workers only queue for the cores "
        f"({same}{n - target} fewer processes and their memory).",
    )]


def io_bound_loading(ctx: Context, state: AttachState) -> list[Advice]:
    """Data-bound while the workers mostly wait on something other than the CPU."""
    if no_dataloader(state):
        return []
    n = num_workers(ctx, state)
    load = ctx.worker_load(state.pid)
    if not data_is_the_wait(state) or not is_data_bound(state) or not n or load is None:
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
        evidence=f"{input_evidence(state, ctx.step_shape(state))} while "
        f"{load.words()}{_storage_words(load)}",
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
    if not data_is_the_wait(state, H2D_SHARE * 100):
        return []
    config = state.config
    h2d = dict(state.summary.median_phase_ns).get("h2d")
    shape = ctx.step_shape(state)
    on_cuda = (config.device or "").startswith("cuda")
    if not on_cuda or config.pin_memory is not False or h2d is None or shape is None:
        return []
    h2d_ms, step_ms = h2d / 1e6, shape.step_ms
    share = h2d_ms / step_ms
    if share < H2D_SHARE:
        return []
    # Pinned copies run at the link's speed (about twice pageable ones) and, non-blocking,
    # overlap the compute: half the copy is the least the step gains.
    predicted = step_ms - h2d_ms / 2
    return [Advice(
        id="pin-memory-off",
        severity="warn",
        title="Host-to-device copies run from pageable memory",
        evidence=f"host-to-device copy is {share:.0%} of the step "
        f"(median copy {figure(h2d_ms)} ms; {STEP_STATISTIC} step {figure(step_ms)} ms "
        f"{window_words(state.summary)}{modes_words(state.summary)}) with pin_memory=False",
        action="Set DataLoader(pin_memory=True) and copy with .to(device, non_blocking=True) "
        f"if the host has memory to spare: predicted step {figure(predicted)} ms or less "
        f"instead of {figure(step_ms)} ms ({step_ms / predicted:.2f}x the samples/s or more).",
    )]
