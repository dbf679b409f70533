"""Frozen dataclasses (`record`s) shared by every layer: one Frame is everything a tick knows.

Units follow psutil: bytes, seconds, percent (0..100 per core for processes).
`None` always means "not measured / not available", never zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import field
from typing import Literal

from gputop.core.frozen import frozen

GpuSourceKind = Literal["nvml", "simulated", "none"]
Role = Literal["trainer", "worker", "launcher", "other"]
# a step's and a window's verdicts; "cpu-starved" is a trainer's (its main thread waits for a core)
Verdict = Literal["data-bound", "compute-bound", "host-bound", "cpu-starved", "unknown"]
Band = Literal["highly", "moderately", "not", "unknown"]
Severity = Literal["info", "warn", "critical"]
TrainerState = Literal["running", "evaluating", "saving", "stalled", "exited"]
Activity = Literal["evaluating", "saving"]  # a trainer's states that its probe names
SourceName = Literal["gpu", "host", "processes", "membw", "attach", "advice", "sampler",
                     "record", "threads"]


@frozen
class GpuProcess:
    """One compute process NVML reports on a device."""

    pid: int
    memory_used_bytes: int | None
    sm_util_percent: float | None = None
    # the MIG instance it runs on (GPU instance, compute instance); None on a GPU without MIG
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@frozen
class MigInstance:
    """One MIG device (a compute instance) of a GPU in MIG mode; its processes carry its ids."""

    gpu_instance_id: int | None
    compute_instance_id: int | None
    uuid: str
    profile: str  # e.g. "1g.10gb", from the name the driver gives it ("n/a" without one)
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    util_percent: float | None = None  # drivers give none for a MIG device


@frozen
class GpuSample:
    """One device at one tick; fields NVML could not give are None."""

    index: int
    name: str
    uuid: str
    util_percent: float | None
    memory_util_percent: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    temperature_c: float | None
    power_w: float | None
    power_limit_w: float | None
    sm_clock_mhz: int | None
    memory_clock_mhz: int | None
    pcie_rx_bytes_per_s: float | None
    pcie_tx_bytes_per_s: float | None
    sm_occupancy_percent: float | None = None
    tensor_active_percent: float | None = None
    processes: tuple[GpuProcess, ...] = ()
    lost: bool = False
    processes_known: bool = True  # False: NVML refused every process query, so () means n/a
    mig_enabled: bool | None = None  # MIG mode on; None where the GPU has no MIG or said nothing
    mig_instances: tuple[MigInstance, ...] = ()
    minor_number: int | None = None  # the N of its /dev/nvidiaN, where NVML gives it


@frozen
class GpuReport:
    """All devices from one source; `note` explains a missing driver or a simulation."""

    source: GpuSourceKind
    gpus: tuple[GpuSample, ...] = ()
    note: str | None = None
    driver_version: str | None = None
    scenario: str | None = None


@frozen
class ForeignGpuPid:
    """An NVML PID /proc does not show; `pid` ours for it where proven, and how."""

    host_pid: int
    gpu_index: int
    pid: int | None = None
    how: str | None = None


@frozen
class HostSample:
    """Host-wide CPU and memory at one tick."""

    hostname: str
    cpu_count: int
    cpu_percent: float | None
    per_cpu_percent: tuple[float, ...]
    memory_total_bytes: int
    memory_available_bytes: int
    swap_total_bytes: int
    swap_used_bytes: int
    load_average: tuple[float, float, float]
    uptime_s: float


@frozen
class ProcessSample:
    """One process; `in_proc` is False for an NVML PID with no /proc entry (other namespace)."""

    pid: int
    ppid: int | None
    name: str
    cmdline: tuple[str, ...]
    username: str | None
    state: str
    num_threads: int | None
    cpu_percent: float | None
    rss_bytes: int | None
    cpu_time_s: float | None
    start_ticks: int
    gpu_memory_bytes: int | None = None
    gpu_indices: tuple[int, ...] = ()
    role: Role = "other"
    trainer_pid: int | None = None
    has_probe: bool = False
    in_proc: bool = True
    # Read for trainers and their workers only (None elsewhere, and where unknown), over the
    # interval like cpu_percent; 100 = one thread for the whole interval.
    runqueue_wait_percent: float | None = None  # runnable but waiting for a CPU, all threads
    io_wait_percent: float | None = None  # blocked on block I/O (needs kernel.task_delayacct)
    read_bytes_per_s: float | None = None  # bytes storage read for it (/proc/PID/io)
    main_thread_busy_percent: float | None = None  # its main thread running or runnable
    major_faults_per_s: float | None = None  # its own major page faults (/proc/PID/stat majflt)
    # GPU holders only (derived): seconds it and its workers used no CPU, as long as gputop
    # watched; 0.0 when they used some this tick, None elsewhere or unknown
    cpu_idle_s: float | None = None
    # cores it may run on: its CPU affinity, capped by its cgroup's cpu.max quota (trainers)
    cores_allowed: float | None = None
    # the container it runs in (/proc/PID/cgroup): its id, 12 hex digits, and its Kubernetes
    # pod's uid where the cgroup path gives it; its PID inside its PID namespace (NSpid)
    container: str | None = None
    container_pod: str | None = None
    container_pid: int | None = None

    @property
    def key(self) -> tuple[int, int]:
        """Identity across ticks: a PID is reused, a PID with its start time is not."""
        return (self.pid, self.start_ticks)


@frozen
class ThreadSample:
    """One userland thread of a listed process, read only while the table shows threads (H)."""

    tid: int
    comm: str  # its name (/proc/PID/task/TID/comm), escaped
    state: str
    start_ticks: int
    cpu_percent: float | None  # over the time since its last read; None on its first
    cpu_time_s: float


@frozen
class TrainerGroup:
    """A trainer and the DataLoader workers grouped beneath it."""

    pid: int
    worker_pids: tuple[int, ...]
    workers_cpu_percent: float
    num_threads_total: int
    pin_memory_thread: bool
    launcher_pid: int | None = None


@frozen
class MemoryConsumer:
    """A process and the memory traffic its cache misses stand for (bytes/s, cache lines x 64)."""

    pid: int
    name: str | None
    bytes_per_s: float


@frozen
class MemoryLayoutCheck:
    """The memory modules judged against the board's channels and each other.

    `verdict` is "balanced", "unbalanced" or "n/a" (then `reason` says why); `findings` are
    one sentence each with the slots named; `fill_slots` are the first slot of each empty
    channel, `slow_slots` the modules slower than the rest, `usual_module` what most are.
    """

    verdict: str
    source: str | None = None
    channels_populated: int | None = None
    channels_total: int | None = None
    findings: tuple[str, ...] = ()
    fill_slots: tuple[str, ...] = ()
    slow_slots: tuple[str, ...] = ()
    usual_module: str | None = None
    reason: str | None = None


@frozen
class MemoryBandwidthSample:
    """Host memory-bandwidth pressure, always labelled with where it came from."""

    source: str
    confidence: str
    read_bytes_per_s: float | None = None
    write_bytes_per_s: float | None = None
    peak_bytes_per_s: float | None = None
    pressure: float | None = None
    psi_some_avg10: float | None = None
    psi_full_avg10: float | None = None
    swap_in_per_s: float | None = None
    major_faults_per_s: float | None = None
    note: str | None = None
    total_bytes_per_s: float | None = None
    canary_bytes_per_s: float | None = None
    expected_peak_bytes_per_s: float | None = None
    layout: str | None = None
    measured_peak_bytes_per_s: float | None = None
    relative_to: str | None = None
    top_consumers: tuple[MemoryConsumer, ...] = ()
    layout_check: MemoryLayoutCheck | None = None


@frozen
class TrainerConfig:
    """Facts the probe recorded about the trainer (annotate() and the patched loader)."""

    num_workers: int | None = None
    pin_memory: bool | None = None
    batch_size: int | None = None
    prefetch_factor: int | None = None
    persistent_workers: bool | None = None
    num_threads: int | None = None
    device: str | None = None
    rank: int | None = None
    world_size: int | None = None
    extra: tuple[tuple[str, str], ...] = ()

    @property
    def pin_memory_effective(self) -> bool | None:
        """Whether pinning takes effect: torch pins only for an accelerator, so pin_memory=True
        on a trainer whose model is on the CPU pins nothing; None when unknown."""
        if self.pin_memory is None or not self.pin_memory:
            return self.pin_memory
        if self.device is None:
            return None
        return self.device.split(":")[0] != "cpu"


@frozen
class StepRecord:
    """One training step; a phase the probe did not see is None, not zero."""

    step: int
    duration_ns: int
    data_ns: int | None
    h2d_ns: int | None = None
    forward_ns: int | None = None
    backward_ns: int | None = None
    optimizer_ns: int | None = None
    gpu_ns: int | None = None
    gpu_gap_ns: int | None = None
    batch_size: int | None = None
    epoch: int = 0
    warmup: bool = False
    verdict: Verdict = "unknown"
    end_ns: int | None = None  # when the step closed, on the trainer's monotonic clock
    implicit: bool = False  # no loader opened it (the ring's F_IMPLICIT)
    # data_ns is the host time before the model's forward, not a loader's wait: the loop has
    # no DataLoader (the ring's F_INPUT_OUTSIDE_MODEL)
    input_outside_model: bool = False
    # The rest of the partition: every ns of duration_ns is in exactly one of data, h2d,
    # forward, backward, optimizer, sync (waiting on the device outside those) and host
    # (Python outside the model and the loader); None where the probe did not partition it
    host_ns: int | None = None
    sync_ns: int | None = None
    at_backward: bool = False  # closed where the next backward began (no optimizer: manual SGD)
    # The probe's stack samples in this step: how many, and the function most sampled in its
    # host phase and in its data phase, as "function (file:line)", with its sample count
    samples: int = 0
    host_site: str | None = None
    host_site_samples: int = 0
    data_site: str | None = None
    data_site_samples: int = 0
    # ... and its samples in the host and in the data phase, all their functions (0 in both:
    # unknown, a probe or a recording from before these counts)
    host_samples: int = 0
    data_samples: int = 0

    @property
    def input_ns(self) -> int | None:
        """Time the step spent getting its input (data wait + host-to-device copy)."""
        if self.data_ns is None:
            return None
        return self.data_ns + (self.h2d_ns or 0)

    @property
    def other_ns(self) -> int:
        """Step time no measured phase accounts for."""
        seen = ((self.data_ns or 0) + (self.h2d_ns or 0) + (self.forward_ns or 0)
                + (self.backward_ns or 0) + (self.optimizer_ns or 0))
        return max(0, self.duration_ns - seen)


@frozen
class StepSummary:
    """A rolling window of non-warm-up steps, reduced to what decides a verdict."""

    steps: int
    input_bound_percent: float | None
    band: Band
    verdict: Verdict
    median_step_ns: int | None
    p95_step_ns: int | None
    samples_per_s: float | None
    waited_percent: float | None = None
    p95_data_ns: int | None = None
    median_phase_ns: tuple[tuple[str, int | None], ...] = ()
    input_time_percent: float | None = None  # total input / total time, every step counted
    outlier_steps: int = 0  # steps with runaway compute left out of input_bound_percent
    data_bound_steps: int = 0  # the per-step verdicts, beside the window's
    compute_bound_steps: int = 0
    step_modes: tuple[tuple[float, int], ...] = ()  # (% of steps, median ns) when bimodal
    unmeasured_reason: str | None = None  # why step time, samples/s and share are None
    input_outside_model: bool = False  # the input is the host time before the model's forward
    host_percent: float | None = None  # host code's share of step time (None: not partitioned)
    host_bound_steps: int = 0
    # the share of step time of the part the verdict names (what a header shows beside it), and
    # that part: "input", "host", "compute", or a trainer-level verdict's (analysis.steps.
    # with_trainer_verdict); None where no share decides the verdict
    verdict_percent: float | None = None
    verdict_part: str | None = None
    mean_step_ns: int | None = None  # the window's one step time (steps.STEP_STATISTIC)
    stack_samples: int = 0  # the probe's stack samples in the window's steps
    # the most sampled function of the host phases and of the data phases, "function
    # (file:line)", with its share of the window's stack samples
    host_site: str | None = None
    host_site_percent: float | None = None
    data_site: str | None = None
    data_site_percent: float | None = None
    # the steps' own verdict where a trainer-level one (cpu-starved) replaced `verdict`
    steps_verdict: Verdict | None = None

    @property
    def judged_steps(self) -> int:
        """Steps with a verdict of their own."""
        return self.data_bound_steps + self.compute_bound_steps + self.host_bound_steps

    @property
    def data_bound_steps_percent(self) -> float | None:
        """Share of the steps with a verdict that were data-bound."""
        judged = self.judged_steps
        return 100.0 * self.data_bound_steps / judged if judged else None

    @property
    def compute_bound_steps_percent(self) -> float | None:
        """Share of the steps with a verdict that were compute-bound."""
        judged = self.judged_steps
        return 100.0 * self.compute_bound_steps / judged if judged else None

    @property
    def host_bound_steps_percent(self) -> float | None:
        """Share of the steps with a verdict that were host-bound."""
        judged = self.judged_steps
        return 100.0 * self.host_bound_steps / judged if judged else None


EMPTY_STEP_SUMMARY = StepSummary(0, None, "unknown", "unknown", None, None, None)


@frozen
class PartTotals:
    """A window's non-warm-up steps that have an input/compute split, and their parts summed
    (the advice's average step), kept by the sampler so no rule walks the window for them."""

    steps: int
    input_ns: int
    compute_ns: int


@frozen
class InputWaits:
    """A rank's input waits for the straggler rule: of its non-warm-up steps, how many have
    an input/compute split, the quartile, median and 90th percentile of their inputs (0:
    none) and the median step time (0: none); kept by the sampler with the summary."""

    measured: int
    low: int
    median: int
    high: int
    step: int


@frozen
class CpuCompetitor:
    """A process outside a trainer's job that runs on the CPUs the trainer may use."""

    pid: int
    username: str | None
    command: str  # its command line, shortened
    cpu_percent: float  # of one core, over the interval


@frozen
class CpuStarvation:
    """A trainer whose main thread waits for a core a large share of the time while other
    processes run on its CPUs (analysis/starvation.py says when); shares are of wall time."""

    main_thread_wait_percent: float  # runnable, waiting for a core (100 = the whole interval)
    main_thread_run_percent: float  # on a core
    runqueue_wait_percent: float  # every thread of it and its workers, summed
    cores_got: float  # it and its workers, on a core
    cores_wanted: float  # running or waiting for one, no more than it may use
    cores_allowed: int  # the CPUs its affinity allows
    competitors: tuple[CpuCompetitor, ...] = ()  # the busiest others on its CPUs, most first
    competitors_cores: float = 0.0  # what all the others took of its CPUs


@frozen
class AttachState:
    """What the ring of one attached trainer says right now.

    `alive` and the steps are the source's raw facts; the steps' verdicts, `summary`,
    `state`, `idle_s` and `step_in_progress_s` are derived by the sampler: stalled when it
    made no progress (closed no step and, where measured, used no CPU with its workers) for
    max(5 s, 10x the median step).
    """

    pid: int
    config: TrainerConfig
    dropped_records: int
    steps: tuple[StepRecord, ...]
    summary: StepSummary = EMPTY_STEP_SUMMARY
    alive: bool = True
    error: str | None = None
    state: TrainerState = "running"
    idle_s: float | None = None  # since the newest step closed (None: no step yet)
    # a running trainer's open step, once it outlasts the stall limit while computing (a long
    # LBFGS step, an evaluation): how long it has run so far; None otherwise or unknown
    step_in_progress_s: float | None = None
    job: int | None = None  # the PID the job was attached by; ranks of one job share it
    # what the probe says the trainer does outside its steps (evaluating, saving; None: it
    # trains, or no probe said) and how long it had done so when the ring was read
    activity: Activity | None = None
    activity_s: float | None = None
    # derived with `summary`; None: not derived (the advice sums the steps itself)
    part_totals: PartTotals | None = field(default=None, compare=False, repr=False)
    input_waits: InputWaits | None = field(default=None, compare=False, repr=False)
    # derived from its processes' run-queue waits; None: not starved, or not known
    cpu_starvation: CpuStarvation | None = None

    @property
    def current(self) -> bool:
        """Whether its numbers describe the trainer now (not stalled, not exited)."""
        return self.state not in ("stalled", "exited")

    @property
    def judged(self) -> bool:
        """Whether advice and the straggler rule judge its numbers: not stalled (they are old),
        and alive or with steps."""
        return self.state != "stalled" and (self.alive or bool(self.steps))


@frozen
class InputStraggler:
    """A rank whose steps wait for input far longer than the other ranks' do."""

    pid: int
    rank: int | None
    median_input_ns: int
    others_median_input_ns: int
    median_step_ns: int
    low_input_ns: int  # its quartile wait: 3 of 4 steps wait longer
    others_high_input_ns: int  # the other ranks' 90th percentile: 9 of 10 wait less

    @property
    def who(self) -> str:
        """The rank, or the PID when no rank was annotated."""
        return f"rank {self.rank}" if self.rank is not None else f"PID {self.pid}"

    @property
    def evidence(self) -> str:
        """The numbers, in words."""
        return (
            f"{self.who} waits {self.median_input_ns / 1e6:.1f} ms for input per step (median), "
            f"the other ranks {self.others_median_input_ns / 1e6:.1f} ms, "
            f"in steps of {self.median_step_ns / 1e6:.1f} ms; it waits over "
            f"{self.low_input_ns / 1e6:.1f} ms in 3 of 4 steps, the others under "
            f"{self.others_high_input_ns / 1e6:.1f} ms in 9 of 10"
        )


@frozen
class SourceError:
    """A source that failed: its part of the Frame is the last good one (or empty)."""

    source: SourceName
    message: str  # one line: the exception's type and text
    failures: int  # in a row
    retry_in_s: float
    last_good: float | None = None  # time of the last good sample of this source
    stopped: bool = False  # it gave up (a recorder on a full disk): no next try

    def line(self) -> str:
        """The error as one line for any pane."""
        if self.stopped:
            return f"{self.source} stopped: {self.message}"
        stale = "" if self.last_good is None else "; showing its last good sample"
        return (f"{self.source} failed: {self.message} ({self.failures}x, next try in "
                f"{self.retry_in_s:.0f} s{stale})")


@frozen
class Advice:
    """One piece of advice with the measured numbers it rests on."""

    id: str
    severity: Severity
    title: str
    evidence: str
    action: str
    trainer_pid: int | None = None  # the trainer a per-trainer rule judged; None: host-wide


FLEET_PRESSURE_RATIO = 0.6  # host memory-bandwidth pressure the fleet counts as trouble


@frozen
class FleetHost:
    """One `gputop serve` target as Prometheus has it; a target that is down has no figures
    (None), never zeros."""

    instance: str
    hostname: str
    up: bool
    simulated: bool = False
    gpus: int | None = None
    gpu_util_ratio: float | None = None  # mean over its GPUs
    gpu_memory_used_bytes: float | None = None
    gpu_memory_total_bytes: float | None = None
    idle_gpus_holding_memory: int | None = None
    trainers: int | None = None
    probed_trainers: int | None = None
    data_bound_trainers: int | None = None
    worst_data_wait_ratio: float | None = None
    stragglers: int | None = None
    memory_pressure_ratio: float | None = None
    advice: int | None = None
    # from Prometheus's target list: did it answer (gputop_exporter_info) in the last hour,
    # its target's health ("up", "down", "unknown"), last scrape (Unix time) and last error
    seen: bool = True
    scrape_health: str | None = None
    last_scrape: float | None = None
    scrape_error: str | None = None  # printable, bounded

    @property
    def trouble(self) -> int:
        """How many things on this host want a look (down counts most)."""
        if not self.up:
            return 1000
        pressured = (self.memory_pressure_ratio or 0.0) >= FLEET_PRESSURE_RATIO
        return pressured + sum(n or 0 for n in (self.idle_gpus_holding_memory,
                                                self.data_bound_trainers, self.stragglers))


@frozen
class FleetGpu:
    """One GPU of a fleet host, as its exporter last published it."""

    index: str
    uuid: str
    name: str = ""
    util_ratio: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None


@frozen
class FleetTrainer:
    """One trainer of a fleet host; `pid` is its PID on that host (the `trainer` label)."""

    pid: str
    name: str = ""
    user: str = ""
    probed: bool = False
    workers: int | None = None
    data_wait_ratio: float | None = None
    verdict: str | None = None  # data-bound, compute-bound, unknown; None without the probe
    state: str | None = None  # running, stalled
    rank: str = ""
    world_size: str = ""
    rendezvous: str = ""  # the job across hosts (MASTER_ADDR:MASTER_PORT), "" when unknown
    straggler: bool = False  # its input waits hold its job back (on its host or across hosts)
    median_step_s: float | None = None
    samples_per_s: float | None = None
    gpu_memory_bytes: float | None = None
    # the step time the screens show and its statistic ("mean"; "median" from an exporter
    # too old to publish the mean); None where the exporter has neither
    step_s: float | None = None
    step_statistic: str | None = None


@frozen
class FleetAdvice:
    """A piece of advice active on a fleet host (`trainer` is "" for host-wide advice)."""

    id: str
    severity: str
    trainer: str = ""


@frozen
class FleetHostDetail:
    """One host's GPUs, trainers and advice: what Enter on a fleet row shows."""

    instance: str
    gpus: tuple[FleetGpu, ...] = ()
    trainers: tuple[FleetTrainer, ...] = ()
    advice: tuple[FleetAdvice, ...] = ()


@frozen
class FleetReport:
    """Every host a Prometheus server scrapes `gputop serve` on, worst first."""

    url: str
    hosts: tuple[FleetHost, ...] = ()
    error: str | None = None  # why Prometheus could not be asked (one line)
    scrape_interval_s: float | None = None  # Prometheus's, as read from its API
    detail: FleetHostDetail | None = None  # the host the user drilled into, if any
    answer_refused: bool = False  # the error refuses the answer (too slow, too large, a redirect)
    stale_from: float | None = None  # the hosts are the last good answer's, asked then


@frozen
class Trend:
    """A recording's sparkline values for the ticks up to one, oldest first: each GPU's
    util (None while lost) and the memory-bandwidth pressure 0..1 (None: not measured)."""

    gpu_util: dict[int, list[float | None]]
    membw_pressure: list[float | None]


@frozen
class Frame:
    """Everything one tick measured; immutable and complete, so rendering never samples."""

    time: float
    interval_s: float
    host: HostSample
    gpu: GpuReport
    processes: tuple[ProcessSample, ...]
    trainers: tuple[TrainerGroup, ...]
    memory_bandwidth: MemoryBandwidthSample | None = None
    attached: tuple[AttachState, ...] = ()
    advice: tuple[Advice, ...] = ()
    sample_cost_s: float = field(default=0.0, compare=False)
    straggler: InputStraggler | None = None
    errors: tuple[SourceError, ...] = ()
    fleet: FleetReport | None = None  # `--prometheus URL`: the hosts Prometheus scrapes
    # NVML's PIDs /proc does not show (gputop in a container), matched to ours where proven
    foreign_gpu_pids: tuple[ForeignGpuPid, ...] = ()
    # The threads of the processes the table asked for (htop's H), by PID; None otherwise
    threads: Mapping[int, tuple[ThreadSample, ...]] | None = field(
        default=None, compare=False, repr=False)
    # The rows and where each PID's is in them (the process source's, else made on first
    # use); a frame made by replace() with other rows makes its own.
    process_index: tuple[tuple[ProcessSample, ...], Mapping[int, int]] | None = field(
        default=None, compare=False, repr=False)

    def process_places(self) -> Mapping[int, int]:
        """Where each PID's row is in `processes` (the first, if listed twice): the sampler's
        index, else one made on first use."""
        index = self.process_index
        if index is None or index[0] is not self.processes:
            places: dict[int, int] = {}
            for at, row in enumerate(self.processes):
                places.setdefault(row.pid, at)
            index = (self.processes, places)
            object.__setattr__(self, "process_index", index)  # frozen: a cache
        return index[1]

    def process(self, pid: int) -> ProcessSample | None:
        """The row of `pid` (the first, if listed twice), or None."""
        at = self.process_places().get(pid)
        return None if at is None else self.processes[at]

    def processes_of(self, pids: Iterable[int]) -> list[ProcessSample]:
        """The rows of those of `pids` this frame lists, in `pids`' order."""
        places, rows = self.process_places(), self.processes
        return [rows[at] for pid in pids if (at := places.get(pid)) is not None]

    @property
    def simulated(self) -> bool:
        """True when any GPU data in this frame is simulated."""
        return self.gpu.source == "simulated"

    def error(self, source: SourceName) -> SourceError | None:
        """The failure of `source` this tick, if it failed."""
        for err in self.errors:
            if err.source == source:
                return err
        return None
