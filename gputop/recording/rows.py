"""The rows `Recording` (gputop/recording/reader.py) reads a recording back as: each field's
type is the one the stored value is held to (a value of another type is refused, an integer
where a real goes is a real, text is printable), its name the column's."""

from __future__ import annotations

from typing import NamedTuple

from gputop.core.model import Role, Severity, StepRecord, TrainerState, Verdict


class TickSummary(NamedTuple):
    """A tick's time, busy CPU and host, from `frames`."""

    id: int
    time: float
    cpu_percent_x10: float | None
    host_id: int | None


class Tick(NamedTuple):
    """A `frames` row: one tick's host numbers as stored."""

    id: int
    time: float
    interval_ms: float
    sample_cost_us: float | None
    host_id: int | None
    gpu_id: int | None
    cpu_percent_x10: float | None
    per_cpu_percent: bytes | None
    memory_available_bytes: int | None
    swap_used_bytes: int | None
    load1_x100: float | None
    load5_x100: float | None
    load15_x100: float | None
    uptime_s: float | None
    errors_id: int | None
    per_cpu_classes: bytes | None


class GpuInfoChange(NamedTuple):
    """A `gpu_info` row: device `gpu`'s name and limits from tick `frame` on."""

    frame: int
    gpu: int
    info_id: int


class GpuProcessRow(NamedTuple):
    """A GPU compute process of a tick."""

    gpu: int | None
    pid: int
    memory_used_mib: int | None
    sm_util_percent_x10: float | None


class ProcessNumbers(NamedTuple):
    """A kept process's numbers at a tick; `process` is its `process_info` id."""

    process: int
    state: str | None
    num_threads: int | None
    cpu_percent_x10: float | None
    rss_kib: int | None
    cpu_time_s_x100: float | None


class Identity(NamedTuple):
    """Who a kept process is: its `process_info` row."""

    pid: int
    ppid: int | None
    name: str
    cmdline_id: int | None
    username: str | None
    start_ticks: int
    role: Role | None
    trainer_pid: int | None
    has_probe: bool
    in_proc: bool
    container: str | None = None
    container_pod: str | None = None
    container_pid: int | None = None


UNKNOWN_PROCESS = Identity(0, None, "?", None, None, 0, None, None, False, True)


class GroupRow(NamedTuple):
    """A trainer group at a tick, with its workers and launcher then."""

    pid: int
    workers_id: int | None
    workers_cpu_percent_x10: float | None
    num_threads_total: int | None
    pin_memory_thread: bool
    launcher_pid: int | None


class GroupTick(NamedTuple):
    """A trainer group's workers' CPU at a tick, with its workers then."""

    frame: int
    pid: int
    workers_cpu_percent_x10: float | None
    workers_id: int | None


class MemoryBandwidthRow(NamedTuple):
    """A `memory_bandwidth` row, but its tick."""

    info_id: int
    read_bytes_per_s: float | None
    write_bytes_per_s: float | None
    total_bytes_per_s: float | None
    peak_bytes_per_s: float | None
    pressure_x1000: float | None
    psi_some_avg10_x100: float | None
    psi_full_avg10_x100: float | None
    swap_in_per_s_x10: float | None
    major_faults_per_s_x10: float | None
    canary_bytes_per_s: float | None


class MemoryBandwidthTick(NamedTuple):
    """What the report charts of a tick's memory bandwidth."""

    frame: int
    info_id: int
    pressure_x1000: float | None
    psi_some_avg10_x100: float | None


class ConsumerRow(NamedTuple):
    """A top memory-bandwidth consumer of a tick."""

    pid: int
    name: str | None
    bytes_per_s: float | None


class TrainerRow(NamedTuple):
    """A trainer the recording attached to."""

    id: int
    pid: int
    first_frame: int


class AttachedRow(NamedTuple):
    """An attached trainer at a tick (`trainer`: a `trainers` id), with what it had then."""

    trainer: int
    state: TrainerState
    idle_ms: float | None
    alive: bool
    dropped_records: int | None
    first_step: int | None
    last_step: int | None
    config_id: int | None
    error_id: int | None


class ConfigChange(NamedTuple):
    """A trainer's settings (a `texts` id) from tick `frame` on."""

    frame: int
    config_id: int | None


class StepRow(NamedTuple):
    """A stored training step, and the tick that first carried it."""

    step: int
    frame: int
    end_ns: int | None
    duration_ns: int
    data_ns: int | None
    h2d_ns: int | None
    forward_ns: int | None
    backward_ns: int | None
    optimizer_ns: int | None
    gpu_ns: int | None
    gpu_gap_ns: int | None
    batch_size: int | None
    epoch: int
    flags: int
    verdict: Verdict
    host_ns: int | None
    sync_ns: int | None
    samples: int | None
    host_site: str | None
    host_site_samples: int | None
    data_site: str | None
    data_site_samples: int | None
    host_samples: int | None
    data_samples: int | None

    def record(self) -> StepRecord:
        """The step as the model holds it."""
        return StepRecord(
            step=self.step, duration_ns=self.duration_ns, data_ns=self.data_ns,
            h2d_ns=self.h2d_ns, forward_ns=self.forward_ns, backward_ns=self.backward_ns,
            optimizer_ns=self.optimizer_ns, gpu_ns=self.gpu_ns, gpu_gap_ns=self.gpu_gap_ns,
            batch_size=self.batch_size, epoch=self.epoch, warmup=bool(self.flags & 1),
            implicit=bool(self.flags & 2), input_outside_model=bool(self.flags & 4),
            verdict=self.verdict, end_ns=self.end_ns, host_ns=self.host_ns,
            sync_ns=self.sync_ns, at_backward=bool(self.flags & 8), samples=self.samples or 0,
            host_site=self.host_site, host_site_samples=self.host_site_samples or 0,
            data_site=self.data_site, data_site_samples=self.data_site_samples or 0,
            host_samples=self.host_samples or 0, data_samples=self.data_samples or 0)


class GapRow(NamedTuple):
    """A run of a trainer's steps the file does not hold, and why."""

    frame: int
    after_step: int | None
    before_step: int | None
    missing_steps: int | None
    dropped_records: int
    reason: str


class AdviceChange(NamedTuple):
    """Advice appearing (`shown`), changing or going at tick `frame`."""

    frame: int
    id: str
    shown: bool
    severity: Severity | None
    title: str | None
    evidence: str | None
    action: str | None
