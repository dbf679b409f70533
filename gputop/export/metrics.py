"""Frames as Prometheus metric families for `gputop serve`, built when Prometheus scrapes.

A scrape renders the newest Frame the sampler handed over; it never samples. What a single
Frame cannot say (steps counted since the exporter started, step-time histograms, the CPU
seconds of workers that have since exited) is accumulated by `Totals` as frames arrive.

Conventions: `gputop_` prefix, base units (bytes, seconds, 0..1 ratios, hertz), counters end
in `_total`, metadata in `_info`, an enum as one gauge per value named by a label (1 for the
current value, 0 for the others). GPU series carry dcgm-exporter's labels (`gpu`, `UUID`,
`Hostname`) so that the two join; every series carries `Hostname`. Trainer series carry
`trainer`, a hash that stays the same when the trainer restarts (export.identity); its PID is
in `gputop_trainer_info`. A value the Frame does not know (None) is no sample, never a zero.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar, get_args

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from gputop import __version__
from gputop.analysis.steps import STEP_STATISTIC, step_figure
from gputop.core import debuglog
from gputop.core.masking import mask_command
from gputop.core.model import (
    AttachState,
    Band,
    Frame,
    GpuSample,
    HostSample,
    MemoryBandwidthSample,
    ProcessSample,
    TrainerGroup,
    TrainerState,
    Verdict,
)
from gputop.export.identity import job_id, shown_command, trainer_ids
from gputop.export.totals import (
    NS,
    PHASES,
    STEP_BUCKETS_S,
    CpuTotals,
    StepTotals,
    Totals,
    exported_attached,
)

T = TypeVar("T")

GPU_LABELS = ["Hostname", "gpu", "UUID"]
TRAINER_LABELS = ["Hostname", "trainer"]
SOURCES = ("gpu", "host", "processes", "membw", "attach", "advice", "sampler", "exporter")
VERDICTS: tuple[str, ...] = get_args(Verdict)
BANDS: tuple[str, ...] = get_args(Band)
STATES: tuple[str, ...] = get_args(TrainerState)

Section = Callable[["View"], list[Metric]]
Kind = type[GaugeMetricFamily] | type[CounterMetricFamily]


@dataclass(frozen=True)
class Series(Generic[T]):
    """A gauge or counter family whose every sample reads one value off a labelled thing."""

    name: str
    doc: str
    value: Callable[[T], float | None]
    kind: Kind = GaugeMetricFamily


def families(series: Iterable[Series[T]], labels: list[str],
             things: Sequence[tuple[list[str], T]]) -> list[Metric]:
    """One family per series, with a sample for each thing (by its label values) whose value
    is known: None is no sample, never a zero."""
    out: list[Metric] = []
    for one in series:
        family = one.kind(one.name, one.doc, labels=labels)
        for key, thing in things:
            value = one.value(thing)
            if value is not None:
                family.add_metric(key, value)
        out.append(family)
    return out


def scaled(attr: str, scale: float = 1) -> Callable[[Any], float | None]:
    """Reads field `attr` in base units (`scale` converts: percent to ratio, MHz to Hz)."""
    def value(thing: Any) -> float | None:
        raw = getattr(thing, attr)
        return None if raw is None else raw * scale
    return value


@dataclass(frozen=True)
class View:
    """What one scrape renders: the newest Frame and the totals as of that Frame."""

    frame: Frame
    steps: dict[int, StepTotals]
    worker_cpu: dict[int, CpuTotals]
    per_worker: bool
    scenario: str | None
    trainers_of: str = ""


class FrameCollector(Collector):
    """A prometheus-client collector that renders the newest Frame on each scrape;
    `trainers_of` says whose trainers the frames carry (`user:NAME` or `all-users`)."""

    def __init__(self, *, per_worker: bool = False, scenario: str | None = None,
                 trainers_of: str = "") -> None:
        self.per_worker = per_worker
        self.scenario = scenario
        self.trainers_of = trainers_of
        self._totals = Totals()
        self._lock = threading.Lock()
        self._view: View | None = None
        self._errors = 0  # sections that failed in a row, shown as the "exporter" source
        self._error_message: str | None = None

    def update(self, frame: Frame) -> None:
        """Take a new Frame (on the sampler's thread); the next scrape renders it."""
        try:
            self._totals.update(frame)
            steps, cpu = self._totals.snapshot()
        except Exception as exc:  # counting failed: render the frame without new counts
            self._failed("counting a frame", exc)
            steps, cpu = ({}, {}) if self._view is None else (self._view.steps,
                                                              self._view.worker_cpu)
        with self._lock:
            self._view = View(frame, steps, cpu, self.per_worker, self.scenario,
                              self.trainers_of)

    def collect(self) -> Iterator[Metric]:
        """Every family for the newest Frame; a section that fails is left out and counted."""
        with self._lock:
            view = self._view
        if view is None:
            yield from self._error_families(None)
            return
        families: list[Metric] = []
        failed = False
        for section in SECTIONS:
            try:
                families += section(view)
            except Exception as exc:  # one bad section must not empty the whole scrape
                failed = True
                self._failed(f"rendering {section.__name__}", exc)
        if not failed:
            self._errors, self._error_message = 0, None
        yield from families
        yield from self._error_families(view.frame)

    def _failed(self, where: str, exc: Exception) -> None:
        self._errors += 1
        self._error_message = f"{where}: {type(exc).__name__}: {exc}".splitlines()[0][:200]
        debuglog.log_exception(f"exporter failed {where}", exc)

    def _error_families(self, frame: Frame | None) -> list[Metric]:
        """Each source's failures in a row (0 when it works), and the failing ones' reasons."""
        host = frame.host.hostname if frame is not None else ""
        count = GaugeMetricFamily("gputop_source_errors", "Failures in a row of each source "
                                  "of the sampler (and of the exporter itself); 0 when it works",
                                  labels=["Hostname", "source"])
        info = InfoMetricFamily("gputop_source_error", "Why a source failed (one line)",
                                labels=["Hostname", "source"])
        failures: dict[str, tuple[int, str]] = {
            e.source: (e.failures, e.message) for e in (frame.errors if frame else ())}
        if self._errors:
            failures["exporter"] = (self._errors, self._error_message or "")
        for source in SOURCES:
            n, message = failures.get(source, (0, ""))
            count.add_metric([host, source], n)
            if n:
                info.add_metric([host, source], {"message": message})
        return [count, info]


def _exporter(view: View) -> list[Metric]:
    frame = view.frame
    host = frame.host.hostname
    info = InfoMetricFamily("gputop_exporter", "This gputop serve: version and GPU source; "
                            "simulated=\"true\" when the GPUs are simulated (--demo); "
                            "trainers_of: whose trainers it exports", labels=["Hostname"])
    info.add_metric([host], {
        "version": __version__, "gpu_source": frame.gpu.source,
        "simulated": "true" if frame.simulated else "false",
        "scenario": frame.gpu.scenario or view.scenario or "",
        "driver_version": frame.gpu.driver_version or "",
        "trainers_of": view.trainers_of,
    })
    return [info, *families(FRAME_GAUGES, ["Hostname"], [([host], frame)])]


FRAME_GAUGES: tuple[Series[Frame], ...] = (
    Series("gputop_frame_timestamp_seconds", "When the newest sample was taken (Unix time)",
           scaled("time")),
    Series("gputop_sample_duration_seconds", "What the newest sample cost",
           scaled("sample_cost_s")),
    Series("gputop_sample_interval_seconds", "Time the newest sample's rates cover",
           scaled("interval_s")),
)
GPU_GAUGES: tuple[Series[GpuSample], ...] = (
    Series("gputop_gpu_utilization_ratio", "Share of the last sample period a kernel ran on "
           "the GPU (NVML utilization.gpu)", scaled("util_percent", 0.01)),
    Series("gputop_gpu_memory_utilization_ratio", "Share of the period device memory was "
           "read or written", scaled("memory_util_percent", 0.01)),
    Series("gputop_gpu_memory_used_bytes", "Device memory in use", scaled("memory_used_bytes")),
    Series("gputop_gpu_memory_total_bytes", "Device memory installed",
           scaled("memory_total_bytes")),
    Series("gputop_gpu_temperature_celsius", "GPU die temperature", scaled("temperature_c")),
    Series("gputop_gpu_power_watts", "Power draw", scaled("power_w")),
    Series("gputop_gpu_power_limit_watts", "Enforced power limit", scaled("power_limit_w")),
    Series("gputop_gpu_sm_clock_hertz", "SM clock", scaled("sm_clock_mhz", 1e6)),
    Series("gputop_gpu_memory_clock_hertz", "Memory clock", scaled("memory_clock_mhz", 1e6)),
    Series("gputop_gpu_pcie_receive_bytes_per_second", "PCIe traffic host to device (NVML's "
           "sampled throughput)", scaled("pcie_rx_bytes_per_s")),
    Series("gputop_gpu_pcie_transmit_bytes_per_second", "PCIe traffic device to host (NVML's "
           "sampled throughput)", scaled("pcie_tx_bytes_per_s")),
    Series("gputop_gpu_sm_occupancy_ratio", "SM occupancy (GPM, Hopper and later)",
           scaled("sm_occupancy_percent", 0.01)),
    Series("gputop_gpu_tensor_active_ratio", "Tensor pipe activity (GPM, Hopper and later)",
           scaled("tensor_active_percent", 0.01)),
)


def _gpus(view: View) -> list[Metric]:
    frame = view.frame
    host = frame.host.hostname
    info = InfoMetricFamily("gputop_gpu", "A GPU's model name", labels=GPU_LABELS)
    keyed = [([host, str(gpu.index), gpu.uuid], gpu) for gpu in frame.gpu.gpus]
    for key, gpu in keyed:
        info.add_metric(key, {"model_name": gpu.name})
    lost: Series[GpuSample] = Series("gputop_gpu_lost", "1 when the GPU stopped answering "
                                     "NVML", lambda gpu: 1 if gpu.lost else 0)
    answering = [(key, gpu) for key, gpu in keyed if not gpu.lost]
    return [info, *families((lost,), GPU_LABELS, keyed),
            *families(GPU_GAUGES, GPU_LABELS, answering)]


HOST_GAUGES: tuple[Series[HostSample], ...] = (  # no memory total: /proc/meminfo unread
    Series("gputop_host_cpu_utilization_ratio", "Share of all CPUs busy over the period",
           lambda h: None if h.cpu_percent is None else h.cpu_percent / 100),
    Series("gputop_host_cpus", "Logical CPUs", lambda h: h.cpu_count or None),
    Series("gputop_host_memory_total_bytes", "Host memory installed",
           lambda h: h.memory_total_bytes or None),
    Series("gputop_host_memory_available_bytes", "Host memory available without swapping",
           lambda h: h.memory_available_bytes if h.memory_total_bytes else None),
    Series("gputop_host_swap_used_bytes", "Swap in use",
           lambda h: h.swap_used_bytes if h.memory_total_bytes else None),
)


def _host(view: View) -> list[Metric]:
    h = view.frame.host
    return families(HOST_GAUGES, ["Hostname"], [([h.hostname], h)])


MEMBW_BY_SOURCE: tuple[Series[MemoryBandwidthSample], ...] = (  # labelled by its source
    Series("gputop_host_memory_bandwidth_pressure_ratio", "Host memory-bandwidth pressure, "
           "0..1, as judged by the labelled source", scaled("pressure")),
    Series("gputop_host_memory_read_bytes_per_second", "Host memory read traffic (counters "
           "only; the estimate measures none)", scaled("read_bytes_per_s")),
    Series("gputop_host_memory_write_bytes_per_second", "Host memory write traffic (counters "
           "only)", scaled("write_bytes_per_s")),
    Series("gputop_host_memory_traffic_bytes_per_second", "Host memory traffic, read and "
           "write", scaled("total_bytes_per_s")),
    Series("gputop_host_memory_bandwidth_peak_bytes_per_second", "The peak the pressure is "
           "relative to", scaled("peak_bytes_per_s")),
)
MEMBW_GAUGES: tuple[Series[MemoryBandwidthSample], ...] = (  # whatever its source
    Series("gputop_host_memory_psi_some_ratio", "Share of the last 10 s some task stalled on "
           "memory (PSI avg10)", scaled("psi_some_avg10", 0.01)),
    Series("gputop_host_memory_psi_full_ratio", "Share of the last 10 s all tasks stalled on "
           "memory (PSI avg10)", scaled("psi_full_avg10", 0.01)),
    Series("gputop_host_swap_in_pages_per_second", "Pages swapped in per second "
           "(/proc/vmstat pswpin)", scaled("swap_in_per_s")),
    Series("gputop_host_major_faults_per_second", "Major page faults per second "
           "(/proc/vmstat pgmajfault)", scaled("major_faults_per_s")),
)


def _membw(view: View) -> list[Metric]:
    sample = view.frame.memory_bandwidth
    host = view.frame.host.hostname
    info = InfoMetricFamily("gputop_host_memory_bandwidth", "Where the memory-bandwidth "
                            "figures come from (resctrl, uncore counters, or an estimate)",
                            labels=["Hostname"])
    if sample is not None:
        info.add_metric([host], {"source": sample.source, "confidence": sample.confidence,
                                 "relative_to": sample.relative_to or ""})
    by_source = [([host, sample.source], sample)] if sample is not None else []
    alone = [([host], sample)] if sample is not None else []
    return [info, *families(MEMBW_BY_SOURCE, ["Hostname", "source"], by_source),
            *families(MEMBW_GAUGES, ["Hostname"], alone)]


class _Trainer(NamedTuple):
    """What the frame knows of one trainer: its process row, its group, its workers' CPU."""

    row: ProcessSample | None
    group: TrainerGroup | None
    workers_cpu: CpuTotals | None


TRAINER_SERIES: tuple[Series[_Trainer], ...] = (
    Series("gputop_trainer_workers", "DataLoader worker processes",
           lambda t: len(t.group.worker_pids) if t.group else None),
    Series("gputop_trainer_threads", "Threads of the trainer and its workers together",
           lambda t: t.group.num_threads_total if t.group else None),
    Series("gputop_trainer_pin_memory_thread", "1 when the trainer runs DataLoader's "
           "pin-memory thread", lambda t: int(t.group.pin_memory_thread) if t.group else None),
    Series("gputop_trainer_cpu_seconds_total", "CPU time of the trainer process itself",
           lambda t: t.row.cpu_time_s if t.row else None, CounterMetricFamily),
    Series("gputop_trainer_workers_cpu_seconds_total", "CPU time of its DataLoader workers, "
           "exited ones included", lambda t: t.workers_cpu.seconds if t.workers_cpu else None,
           CounterMetricFamily),
    Series("gputop_trainer_resident_memory_bytes", "Resident memory of the trainer process",
           lambda t: t.row.rss_bytes if t.row else None),
    Series("gputop_trainer_gpu_memory_bytes", "GPU memory the trainer process holds on all "
           "its GPUs", lambda t: t.row.gpu_memory_bytes if t.row else None),
)


def exported_trainer_ids(frame: Frame) -> dict[int, str]:
    """The `trainer` label of each trainer the frame exports (grouped or probed), by PID."""
    return trainer_ids(frame, {g.pid for g in frame.trainers}
                       | {a.pid for a in exported_attached(frame)})


def _trainer_label(ids: dict[int, str], frame: Frame, pid: int) -> str:
    """The `trainer` label of `pid`, also for one the frame exports no series of."""
    return ids.get(pid) or trainer_ids(frame, (pid,))[pid]


def _trainers(view: View) -> list[Metric]:
    frame = view.frame
    host = frame.host.hostname
    rows = {r.pid: r for r in frame.processes}
    probed = {a.pid for a in exported_attached(frame)}
    groups = {g.pid: g for g in frame.trainers}
    pids = sorted(groups.keys() | probed)
    ids = exported_trainer_ids(frame)
    trainers = [([host, ids[pid]], _Trainer(rows.get(pid), groups.get(pid),
                                            view.worker_cpu.get(pid) if pid in groups else None))
                for pid in pids]
    info = InfoMetricFamily("gputop_trainer", "A training process: its PID, command line "
                            "(secrets masked), name, user, launcher PID and whether the step "
                            "probe runs in it; the PID changes when it restarts, `trainer` "
                            "does not", labels=TRAINER_LABELS)
    on_gpu = GaugeMetricFamily("gputop_trainer_gpu", "1 per GPU the trainer holds memory on "
                               "(joins trainers to GPU series)",
                               labels=[*TRAINER_LABELS, "gpu", "UUID"])
    uuids = {g.index: g.uuid for g in frame.gpu.gpus}
    for pid, (key, (row, group, _)) in zip(pids, trainers, strict=True):
        info.add_metric(key, {
            "pid": str(pid), "command": shown_command(row),
            "name": mask_command(row.name) if row else "",
            "user": (row.username or "") if row else "",
            "probe": "true" if pid in probed else "false",
            "launcher": str(group.launcher_pid) if group and group.launcher_pid else "",
        })
        for index in row.gpu_indices if row else ():
            on_gpu.add_metric([*key, str(index), uuids.get(index, "")], 1)
    return [info, *families(TRAINER_SERIES, TRAINER_LABELS, trainers), on_gpu]


WORKER_SERIES: tuple[Series[ProcessSample], ...] = (
    Series("gputop_worker_cpu_seconds_total", "CPU time of one DataLoader worker "
           "(--per-worker)", scaled("cpu_time_s"), CounterMetricFamily),
    Series("gputop_worker_threads", "Threads of one DataLoader worker (--per-worker)",
           scaled("num_threads")),
    Series("gputop_worker_resident_memory_bytes", "Resident memory of one DataLoader worker "
           "(--per-worker)", scaled("rss_bytes")),
)


def _workers(view: View) -> list[Metric]:
    """Per-worker series, only with --per-worker (one series per worker process)."""
    if not view.per_worker:
        return []
    frame = view.frame
    host = frame.host.hostname
    ids = exported_trainer_ids(frame)
    workers = [([host, _trainer_label(ids, frame, row.trainer_pid), str(row.pid)], row)
               for row in frame.processes if row.role == "worker" and row.trainer_pid is not None]
    return families(WORKER_SERIES, [*TRAINER_LABELS, "worker"], workers)


def _steps(view: View) -> list[Metric]:
    """Probed trainers: step counts and times since the exporter saw them, and the window."""
    frame = view.frame
    host = frame.host.hostname
    total = CounterMetricFamily("gputop_trainer_steps_total", "Training steps seen closing "
                                "(since this exporter first saw the trainer)",
                                labels=TRAINER_LABELS)
    hist = HistogramMetricFamily("gputop_trainer_step_seconds", "Duration of each training "
                                 "step", labels=TRAINER_LABELS)
    phase = SummaryMetricFamily("gputop_trainer_phase_seconds", "Time in each step phase; "
                                "_count counts the steps that phase was measured in",
                                labels=[*TRAINER_LABELS, "phase"])
    dropped = CounterMetricFamily("gputop_trainer_dropped_steps_total", "Step records "
                                  "overwritten before gputop read them", labels=TRAINER_LABELS)
    ids = exported_trainer_ids(frame)
    for state in exported_attached(frame):
        key = [host, ids[state.pid]]
        totals = view.steps.get(state.pid)
        dropped.add_metric(key, state.dropped_records)
        if totals is None:
            continue
        total.add_metric(key, totals.steps)
        buckets = [(_le(b), n) for b, n in zip(STEP_BUCKETS_S, totals.buckets, strict=True)]
        hist.add_metric(key, [*buckets, ("+Inf", totals.steps)], totals.duration_s)
        for name in PHASES:
            phase.add_metric([*key, name], totals.phase_count[name], totals.phase_s[name])
    return [total, hist, phase, dropped, *_window(view)]


def _le(bound: float) -> str:
    return repr(bound)


WINDOW_GAUGES: tuple[Series[AttachState], ...] = (
    Series("gputop_trainer_data_wait_ratio", "Input time (data wait + host-to-device copy) "
           "over step time, rolling window", lambda a: _ratio(a.summary.input_bound_percent)),
    Series("gputop_trainer_host_ratio", "Host code's share of step time (Python outside "
           "the model and the loader), rolling window; absent where steps are not partitioned",
           lambda a: _ratio(a.summary.host_percent)),
    Series("gputop_trainer_waited_steps_ratio", "Share of the window's steps that waited for "
           "input", lambda a: _ratio(a.summary.waited_percent)),
    Series("gputop_trainer_mean_step_seconds", f"The trainer's step time as gputop's screens "
           f"show it: the {STEP_STATISTIC} over the window's last steps (warm-up left out)",
           lambda a: _seconds(step_figure(a.summary)[1])),
    Series("gputop_trainer_median_step_seconds", "Median step time over the window",
           lambda a: _seconds(a.summary.median_step_ns)),
    Series("gputop_trainer_p95_data_wait_seconds", "95th percentile data wait over the window",
           lambda a: _seconds(a.summary.p95_data_ns)),
    Series("gputop_trainer_samples_per_second", "Samples per second over the window",
           lambda a: a.summary.samples_per_s),
    Series("gputop_trainer_idle_seconds", "Since the newest step closed", lambda a: a.idle_s),
)


def _ratio(percent: float | None) -> float | None:
    return None if percent is None else percent / 100


def _seconds(ns: int | None) -> float | None:
    return None if ns is None else ns * NS


def _window(view: View) -> list[Metric]:
    """The rolling window's verdict and the numbers it rests on, per probed trainer."""
    frame = view.frame
    host = frame.host.hostname
    ids = exported_trainer_ids(frame)
    states = [([host, ids[state.pid]], state) for state in exported_attached(frame)]
    verdict = GaugeMetricFamily("gputop_trainer_verdict", "The window's verdict, 1 for the "
                                f"current one of {', '.join(VERDICTS)}, 0 for the others",
                                labels=[*TRAINER_LABELS, "verdict"])
    band = GaugeMetricFamily("gputop_trainer_input_band", "Input-bound band (>= 20 % highly, "
                             ">= 5 % moderately), 1 for the current one, 0 for the others",
                             labels=[*TRAINER_LABELS, "band"])
    state_set = GaugeMetricFamily("gputop_trainer_state", "1 for the trainer's state, 0 for "
                                  f"the others of {', '.join(STATES)} (stalled: no step closed "
                                  "nor CPU used for max(5 s, 10x the median step))",
                                  labels=[*TRAINER_LABELS, "state"])
    config = InfoMetricFamily("gputop_trainer_config", "DataLoader and threading settings "
                              "the probe read", labels=TRAINER_LABELS)
    job = InfoMetricFamily("gputop_trainer_job", "Rank, world size and job of a trainer "
                           "(job: a hash of its launcher's host and command line, stable "
                           "across restarts); rendezvous names its job across hosts",
                           labels=TRAINER_LABELS)
    straggler = GaugeMetricFamily("gputop_trainer_input_straggler", "1 for the rank whose "
                                  "input waits hold its job back", labels=TRAINER_LABELS)
    groups = {g.pid: g for g in frame.trainers}
    for key, state in states:
        s = state.summary
        _enum(verdict, key, VERDICTS, s.verdict)
        _enum(band, key, BANDS, s.band)
        _enum(state_set, key, STATES, state.state)
        config.add_metric(key, _config_labels(state, s.input_outside_model))
        group = groups.get(state.pid)
        launcher = group.launcher_pid if group is not None else None
        job.add_metric(key, {
            "rank": _text(state.config.rank), "world_size": _text(state.config.world_size),
            "job": job_id(frame, launcher or state.pid),
            "rendezvous": dict(state.config.extra).get("rendezvous", ""),
        })
        if frame.straggler is not None:
            straggler.add_metric(key, 1 if frame.straggler.pid == state.pid else 0)
    return [*families(WINDOW_GAUGES, TRAINER_LABELS, states), verdict, band, state_set, config,
            job, straggler]


def _enum(family: GaugeMetricFamily, key: list[str], values: tuple[str, ...],
          current: str) -> None:
    """One sample per value of an enum: 1 for `current`, 0 for the others."""
    for value in values:
        family.add_metric([*key, value], 1 if value == current else 0)


def _config_labels(state: AttachState, outside_model: bool) -> dict[str, str]:
    c = state.config
    return {
        "num_workers": _text(c.num_workers), "pin_memory": _text(c.pin_memory),
        "batch_size": _text(c.batch_size), "prefetch_factor": _text(c.prefetch_factor),
        "persistent_workers": _text(c.persistent_workers), "num_threads": _text(c.num_threads),
        "device": c.device or "", "input": "outside_model" if outside_model else "loader",
    }


def _text(value: object) -> str:
    """A label value: "" (Prometheus: no label) for unknown, true/false for booleans."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _advice(view: View) -> list[Metric]:
    frame = view.frame
    active = GaugeMetricFamily("gputop_advice_active", "1 for each piece of advice shown now "
                               "(trainer=\"\" for host-wide advice)",
                               labels=["Hostname", "id", "severity", "trainer"])
    ids = exported_trainer_ids(frame)
    for advice in frame.advice:
        pid = advice.trainer_pid
        trainer = "" if pid is None else _trainer_label(ids, frame, pid)
        active.add_metric([frame.host.hostname, advice.id, advice.severity, trainer], 1)
    return [active]


SECTIONS: tuple[Section, ...] = (_exporter, _gpus, _host, _membw, _trainers, _workers, _steps,
                                 _advice)
