"""What the rules look at: the newest Frame plus a short history of what came before."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gputop.analysis.steps import STEP_STATISTIC, bimodal_note, part_totals
from gputop.core.model import (
    AttachState,
    Frame,
    GpuSample,
    ProcessSample,
    StepSummary,
    TrainerGroup,
)

CORE_PERCENT = 100.0
STARVED_WAIT = 0.20  # a trainer waiting for a core this share of the time, and as long as
# it runs, is CPU-starved
BUSY_WORKER = 0.30  # a worker running or waiting for a core this share of the time, and
# waiting at least as long as it runs, is CPU-starved
BUSY_PROCESS = 0.5  # another process using this much of a core keeps a core busy
SWAP_IN_PER_S = 1.0
SATURATED_MAIN_THREAD = 90.0  # % of the interval the trainer's main thread ran or was runnable
ROUNDING_CORES = 0.25  # host and process rates are read moments apart: this much is noise
STEADY_INTERVALS = 3  # a trainer's CPU figures are of its training once it stepped this many
STEADY_MIN_S = 1.0  # intervals, and this long (its start-up takes its time at any interval)


@dataclass(frozen=True, slots=True)
class Context:
    """The newest frame and, per GPU index, its util history (oldest first, newest last).

    The rules of one tick share what they look up here: the busy processes (one pass over
    the frame's rows, made on first use; a row by PID is the frame's own lookup) and each
    trainer's step shape (from the totals the sampler keeps beside its window).
    """

    frame: Frame
    gpu_util_history: dict[int, tuple[float, ...]]
    _busy: list[int] | None = field(default=None, init=False, repr=False, compare=False)
    _shapes: dict[int, tuple[AttachState, StepShape | None]] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    _loads: dict[int, WorkerLoad | None] = field(default_factory=dict, init=False, repr=False,
                                                 compare=False)

    def process(self, pid: int) -> ProcessSample | None:
        """The process row for `pid`, if it was seen this tick (the first, if listed twice)."""
        return self.frame.process(pid)

    def busy_pids(self) -> list[int]:
        """The PID of each row that keeps a core busy (BUSY_PROCESS of one or more)."""
        busy = self._busy
        if busy is None:
            least = BUSY_PROCESS * CORE_PERCENT
            busy = [p.pid for p in self.frame.processes if (p.cpu_percent or 0.0) >= least]
            object.__setattr__(self, "_busy", busy)  # frozen: a cache filled on first use
        return busy

    def step_shape(self, state: AttachState) -> StepShape | None:
        """`step_shape(state)`, worked out once per state however many rules ask."""
        cached = self._shapes.get(id(state))
        if cached is not None and cached[0] is state:
            return cached[1]
        shape = step_shape(state)
        self._shapes[id(state)] = (state, shape)  # the state kept: its id stays its own
        return shape

    def worker_load(self, pid: int) -> WorkerLoad | None:
        """`worker_load(self, pid)`, worked out once per trainer however many rules ask."""
        if pid not in self._loads:
            self._loads[pid] = worker_load(self, pid)
        return self._loads[pid]

    def trainer(self, pid: int) -> TrainerGroup | None:
        """The worker group of trainer `pid`, if grouping found one."""
        for t in self.frame.trainers:
            if t.pid == pid:
                return t
        return None

    def gpus_of(self, pid: int) -> list[GpuSample]:
        """The GPUs on which `pid` holds memory."""
        return [g for g in self.frame.gpu.gpus if any(p.pid == pid for p in g.processes)]

    def free_cores(self) -> float:
        """Cores the host left idle this tick (cpu_percent is of all cores)."""
        host = self.frame.host
        busy = (host.cpu_percent or 0.0) / CORE_PERCENT * host.cpu_count
        return max(0.0, host.cpu_count - busy)


def steady(frame: Frame, state: AttachState) -> bool:
    """Whether the trainer's CPU figures this tick are of its training, not its start-up
    (imports, workers filling their prefetch, its thread pool spinning up): it has been
    stepping STEADY_INTERVALS intervals and STEADY_MIN_S. Steps without times are taken
    as steady."""
    seconds = stepping_s(state)
    return seconds is None or seconds >= max(STEADY_INTERVALS * frame.interval_s, STEADY_MIN_S)


def stepping_s(state: AttachState) -> float | None:
    """Seconds since the trainer's first step began: its window's span and, for the steps
    before the window (its first step's number), as long again per step as the window's
    take; None when its steps carry no times."""
    steps = state.steps
    if not steps or state.idle_s is None:
        return None
    first, first_end, last_end = steps[0], steps[0].end_ns, steps[-1].end_ns
    if first_end is None or last_end is None:
        return None
    span_ns = last_end - (first_end - first.duration_ns)
    before_ns = first.step * span_ns / len(steps)
    return (span_ns + before_ns) / 1e9 + state.idle_s


def counted(n: int, noun: str) -> str:
    """'1 worker', '2 workers'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def cpu_only(ctx: Context, state: AttachState) -> bool:
    """The trainer says it trains on the CPU and holds no GPU memory."""
    return state.config.device == "cpu" and not ctx.gpus_of(state.pid)


def num_workers(ctx: Context, state: AttachState) -> int | None:
    """Workers the loader was configured with, else the workers grouping found."""
    if state.config.num_workers is not None:
        return state.config.num_workers
    group = ctx.trainer(state.pid)
    return len(group.worker_pids) if group else None


def is_data_bound(state: AttachState) -> bool:
    """The attached trainer's window says its steps wait for data."""
    return state.summary.verdict == "data-bound" and state.summary.steps > 0


def input_evidence(state: AttachState, shape: StepShape | None = None) -> str:
    """The numbers that make a trainer data-bound, in one phrase, with the window's one step
    time (the step pane's statistic, over the same steps); `shape`: its step, if worked out."""
    s = state.summary
    share = s.input_bound_percent or 0.0
    text = f"input is {share:.0f}% of step time {window_words(s)}"
    shape = shape or step_shape(state)
    if shape is not None:
        text += (f" ({STEP_STATISTIC} step {figure(shape.step_ms)} ms, input "
                 f"{figure(shape.input_ms)} ms of it{modes_words(s)})")
    return text


def window_words(s: StepSummary) -> str:
    """'over the last 256 steps': the window every figure of the advice is of."""
    return f"over the last {s.steps} steps"


def modes_words(s: StepSummary) -> str:
    """'; bimodal: 45% of steps ~2.0 ms, 55% ~40.0 ms' where the window's steps fall in two
    groups (its mean is between them), else ''."""
    if not s.step_modes:
        return ""
    return "; " + bimodal_note(s, lambda ns: f"{figure((ns or 0) / 1e6)} ms")


def gpu_memory_fraction(gpu: GpuSample) -> float | None:
    """Used / total device memory, or None when either is unknown."""
    if gpu.memory_used_bytes is None or not gpu.memory_total_bytes:
        return None
    return gpu.memory_used_bytes / gpu.memory_total_bytes


@dataclass(frozen=True, slots=True)
class WorkerLoad:
    """How a trainer's DataLoader workers spent the last interval, each on average, as
    shares of the interval: on a CPU, runnable but waiting for one, and neither (blocked)."""

    count: int
    run: float
    wait: float | None  # None: the kernel counts no run-queue wait here
    io_wait: float | None  # in block I/O, where delay accounting is on
    read_bytes_per_s: float | None  # storage reads of all the workers together

    @property
    def blocked(self) -> float | None:
        """Share spent neither running nor waiting for a core: on I/O, a sleep, a lock or
        the queue to the trainer (approximate for workers with several busy threads)."""
        return None if self.wait is None else max(0.0, 1.0 - self.run - self.wait)

    @property
    def busy(self) -> float | None:
        """Share of the time the workers wanted a core: running or waiting for one."""
        return None if self.wait is None else min(1.0, self.run + self.wait)

    @property
    def starved(self) -> bool:
        """Busy workers that wait for a core at least as long as they run on one."""
        busy = self.busy
        return (self.wait is not None and busy is not None and busy >= BUSY_WORKER
                and self.wait >= self.run)

    def words(self) -> str:
        """'2 workers: 3% CPU, 1% waiting for a core, 96% blocked each'."""
        each = " each" if self.count > 1 else ""
        text = f"{counted(self.count, 'worker')}: {self.run:.0%} CPU"
        blocked = self.blocked
        if self.wait is not None and blocked is not None:
            text += f", {self.wait:.0%} waiting for a core, {blocked:.0%} blocked"
        return text + each


def worker_load(ctx: Context, pid: int) -> WorkerLoad | None:
    """The average worker of trainer `pid`, or None without workers or a rate for each."""
    group = ctx.trainer(pid)
    if group is None or not group.worker_pids:
        return None
    rows = [ctx.process(w) for w in group.worker_pids]
    known = [r for r in rows if r is not None and r.cpu_percent is not None]
    if len(known) < len(rows):
        return None  # no rate yet (a first tick, a worker just born): unknown, not idle
    n = len(known)
    waits = [r.runqueue_wait_percent for r in known]
    ios = [r.io_wait_percent for r in known]
    reads = [r.read_bytes_per_s for r in known]
    return WorkerLoad(
        count=n,
        run=sum(r.cpu_percent or 0.0 for r in known) / n / CORE_PERCENT,
        wait=None if None in waits else sum(w or 0.0 for w in waits) / n / CORE_PERCENT,
        io_wait=None if None in ios else sum(i or 0.0 for i in ios) / n / CORE_PERCENT,
        read_bytes_per_s=None if None in reads else sum(b or 0.0 for b in reads),
    )


@dataclass(frozen=True, slots=True)
class StepShape:
    """The window's step (its one step time, STEP_STATISTIC, as the step pane shows it) and
    the parts of it spent on input and on the rest (compute and host code), in ms.

    Averages, not medians: workers that deliver batches in bursts (three at once, then a
    long wait) give a median step of a few ms, while their rate is what the mean says.
    """

    step_ms: float
    input_ms: float
    compute_ms: float


def step_shape(state: AttachState) -> StepShape | None:
    """The summary's step time, split by the mean input of the window's non-warm-up steps
    that have a split; None without any. The input from the totals the sampler keeps, else
    (a state built elsewhere) summed from the steps."""
    summary = state.summary
    if summary.unmeasured_reason or not summary.steps:
        return None
    totals = state.part_totals or part_totals(state.steps)
    if not totals.steps:
        return None
    input_ms = totals.input_ns / totals.steps / 1e6
    compute_ms = totals.compute_ns / totals.steps / 1e6
    step_ms = (summary.mean_step_ns / 1e6 if summary.mean_step_ns
               else input_ms + compute_ms)  # a summary made without a mean (an old recording)
    input_ms = min(input_ms, step_ms)
    return StepShape(step_ms, input_ms, step_ms - input_ms)


@dataclass(frozen=True, slots=True)
class JobCpu:
    """The CPU a trainer's job (it and its workers) uses, and what it can count on, in cores."""

    used: float
    trainer_used: float
    idle: float
    others_busy: int  # busy competitors: other processes on a core each, or their cores used
    cores: int
    starved: bool  # the job's processes already wait for cores: it has what it can get

    @property
    def available(self) -> float:
        """Cores the job can use: its own and the idle ones; and, while it waits for none,
        at least an equal share beside the other busy processes (the kernel shares a busy
        CPU between sessions and runnable tasks, and runs a waking light task promptly)."""
        own = min(float(self.cores), self.used + self.idle)
        if self.starved:
            return max(own, 1e-3)
        return max(own, self.cores / (self.others_busy + 1))

    def words(self) -> str:
        """'0.25 cores used now, 0.67 available'."""
        return f"{self.used:.2f} cores used now, {self.available:.2f} available"


def job_cpu(ctx: Context, pid: int, starved: bool) -> JobCpu | None:
    """The CPU picture of trainer `pid`'s job, or None while a rate is unknown."""
    trainer = ctx.process(pid)
    host = ctx.frame.host
    if trainer is None or trainer.cpu_percent is None or host.cpu_percent is None:
        return None
    group = ctx.trainer(pid)
    members = {pid, *(group.worker_pids if group else ())}
    rows = [r for r in (ctx.process(m) for m in members) if r is not None]
    used = sum(r.cpu_percent or 0.0 for r in rows) / CORE_PERCENT
    busy = sum(1 for busy_pid in ctx.busy_pids() if busy_pid not in members)
    # Work spread thin over many processes counts by the cores it takes.
    spread = math.ceil(max(0.0, others_cores(ctx, used)) - ROUNDING_CORES)
    others = max(busy, spread)
    return JobCpu(used, trainer.cpu_percent / CORE_PERCENT, ctx.free_cores(), others,
                  host.cpu_count, starved)


def others_cores(ctx: Context, job_used: float) -> float:
    """Cores the host's other work used this tick (host busy cores less the job's)."""
    host = ctx.frame.host
    return (host.cpu_percent or 0.0) / CORE_PERCENT * host.cpu_count - job_used


def trainer_starved(ctx: Context, pid: int) -> bool:
    """The trainer's threads wait for cores at least as long as they run (and it matters)."""
    row = ctx.process(pid)
    if row is None or row.cpu_percent is None or row.runqueue_wait_percent is None:
        return False
    wait = row.runqueue_wait_percent / CORE_PERCENT
    return wait >= STARVED_WAIT and wait >= row.cpu_percent / CORE_PERCENT


def trainer_thread_saturated(ctx: Context, pid: int) -> bool:
    """The trainer's main thread ran or queued for a core nearly all the interval: its loop
    waits on itself (collating, unpickling, a core it shares), not on its loader."""
    row = ctx.process(pid)
    busy = None if row is None else row.main_thread_busy_percent
    return busy is not None and busy >= SATURATED_MAIN_THREAD


def ceil_div(a: float, b: float) -> int:
    """ceil(a / b) without float noise pushing an exact quotient up."""
    return math.ceil(round(a / b, 6))


def decimals(x: float) -> int:
    """Decimal places that show `x` to three significant figures, and at least one."""
    if not math.isfinite(x) or x <= 0:
        return 1
    return max(1, 2 - math.floor(math.log10(x)))


def shown(x: float) -> float:
    """`x` rounded as `figure` prints it: arithmetic done on it holds as printed."""
    return round(x, decimals(x))


def figure(x: float) -> str:
    """`x` to three significant figures, and at least one decimal: 382.2, 2.85, 0.0412."""
    return f"{x:.{decimals(x)}f}"


def rounded_up(x: float) -> str:
    """`x` printed as `figure` would, but rounded up: a quotient whose ceiling follows."""
    x = round(x, 6)  # as ceil_div, at the quotient's own scale: noise never lifts it
    places = decimals(x)
    return f"{ceil_div(x * 10 ** places, 1.0) / 10 ** places:.{places}f}"


def exact(x: float) -> str:
    """A product of printed figures, in full: 2.7, 2.82, 3."""
    return f"{round(x, 6):g}"


def swapping(ctx: Context) -> bool:
    """The host pages memory in from swap: more processes would make it worse."""
    m = ctx.frame.memory_bandwidth
    return m is not None and (m.swap_in_per_s or 0.0) >= SWAP_IN_PER_S
