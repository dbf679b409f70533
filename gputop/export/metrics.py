"""Frames as Prometheus metric families for `gputop serve`, built when Prometheus scrapes.

A scrape renders the newest Frame the sampler handed over; it never samples. What a single
Frame cannot say (steps counted since the exporter started, step-time histograms, the CPU
seconds of workers that have since exited) is accumulated by `Totals` as frames arrive.

Conventions: `gputop_` prefix, base units (bytes, seconds, 0..1 ratios, hertz), counters end
in `_total`, metadata in `_info`. GPU series carry dcgm-exporter's labels (`gpu`, `UUID`,
`Hostname`) so that the two join; every series carries `Hostname`. A value the
Frame does not know (None) is no sample, never a zero.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
    StateSetMetricFamily,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from gputop import __version__, debuglog
from gputop.model import AttachState, Frame, ProcessSample, StepRecord, TrainerGroup

GPU_LABELS = ["Hostname", "gpu", "UUID"]
TRAINER_LABELS = ["Hostname", "trainer"]
SOURCES = ("gpu", "host", "processes", "membw", "attach", "advice", "sampler", "exporter")
STEP_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                  10.0, 30.0, 60.0)
PHASES = ("data", "h2d", "forward", "backward", "optimizer", "other")
VERDICTS = ("data-bound", "compute-bound", "unknown")
BANDS = ("highly", "moderately", "not", "unknown")
STATES = ("running", "stalled")
NS = 1e-9

Section = Callable[["View"], list[Metric]]


@dataclass
class StepTotals:
    """One probed trainer's steps since the exporter first saw it."""

    last_step: int = -1
    steps: int = 0
    duration_s: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * len(STEP_BUCKETS_S))
    phase_count: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    phase_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))

    def add(self, step: StepRecord) -> None:
        """Count a step and its measured phases (an unmeasured phase is not a zero)."""
        self.last_step = step.step
        self.steps += 1
        seconds = step.duration_ns * NS
        self.duration_s += seconds
        for i, bound in enumerate(STEP_BUCKETS_S):
            if seconds <= bound:
                self.buckets[i] += 1
        for phase, ns in _phases(step):
            if ns is not None:
                self.phase_count[phase] += 1
                self.phase_s[phase] += ns * NS


def _phases(step: StepRecord) -> tuple[tuple[str, int | None], ...]:
    return (("data", step.data_ns), ("h2d", step.h2d_ns), ("forward", step.forward_ns),
            ("backward", step.backward_ns), ("optimizer", step.optimizer_ns),
            ("other", step.other_ns))


@dataclass
class CpuTotals:
    """CPU seconds of a set of processes as a counter: exited members keep their share."""

    seconds: float = 0.0
    last: dict[tuple[int, int], float] = field(default_factory=dict)

    def update(self, rows: Iterable[ProcessSample]) -> None:
        """Add what each process used since the last frame (all of it for a new one)."""
        seen: dict[tuple[int, int], float] = {}
        for row in rows:
            if row.cpu_time_s is None:
                continue
            self.seconds += max(0.0, row.cpu_time_s - self.last.get(row.key, 0.0))
            seen[row.key] = max(row.cpu_time_s, self.last.get(row.key, 0.0))
        self.last = seen


@dataclass(frozen=True)
class View:
    """What one scrape renders: the newest Frame and the totals as of that Frame."""

    frame: Frame
    steps: dict[int, StepTotals]
    worker_cpu: dict[int, CpuTotals]
    per_worker: bool
    scenario: str | None


class Totals:
    """Accumulates counters across frames, for trainers present in the newest one."""

    def __init__(self) -> None:
        self.steps: dict[int, StepTotals] = {}
        self.worker_cpu: dict[int, CpuTotals] = {}

    def update(self, frame: Frame) -> None:
        """Count new steps and worker CPU time; forget trainers that left the frame."""
        live = {a.pid for a in exported_attached(frame)}
        self.steps = {pid: t for pid, t in self.steps.items() if pid in live}
        for state in exported_attached(frame):
            totals = self.steps.setdefault(state.pid, StepTotals())
            for step in state.steps:
                if step.step > totals.last_step:
                    totals.add(step)
        groups = {g.pid: g for g in frame.trainers}
        self.worker_cpu = {pid: t for pid, t in self.worker_cpu.items() if pid in groups}
        rows = {r.pid: r for r in frame.processes}
        for pid, group in groups.items():
            workers = [rows[w] for w in group.worker_pids if w in rows]
            self.worker_cpu.setdefault(pid, CpuTotals()).update(workers)

    def snapshot(self) -> tuple[dict[int, StepTotals], dict[int, CpuTotals]]:
        """Copies the collector can render while the next frame is being counted."""
        steps = {pid: StepTotals(t.last_step, t.steps, t.duration_s, list(t.buckets),
                                 dict(t.phase_count), dict(t.phase_s))
                 for pid, t in self.steps.items()}
        cpu = {pid: CpuTotals(t.seconds) for pid, t in self.worker_cpu.items()}
        return steps, cpu


def exported_attached(frame: Frame) -> list[AttachState]:
    """Attached trainers that still run: an exited trainer's series go away with it."""
    return [a for a in frame.attached if a.state != "exited" and a.alive]


class FrameCollector(Collector):
    """A prometheus-client collector that renders the newest Frame on each scrape."""

    def __init__(self, *, per_worker: bool = False, scenario: str | None = None) -> None:
        self.per_worker = per_worker
        self.scenario = scenario
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
            self._view = View(frame, steps, cpu, self.per_worker, self.scenario)

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
                            "simulated=\"true\" when the GPUs are simulated (--demo)",
                            labels=["Hostname"])
    info.add_metric([host], {
        "version": __version__, "gpu_source": frame.gpu.source,
        "simulated": "true" if frame.simulated else "false",
        "scenario": frame.gpu.scenario or view.scenario or "",
        "driver_version": frame.gpu.driver_version or "",
    })
    stamp = GaugeMetricFamily("gputop_frame_timestamp_seconds", "When the newest sample was "
                              "taken (Unix time)", labels=["Hostname"])
    stamp.add_metric([host], frame.time)
    cost = GaugeMetricFamily("gputop_sample_duration_seconds", "What the newest sample cost",
                             labels=["Hostname"])
    cost.add_metric([host], frame.sample_cost_s)
    interval = GaugeMetricFamily("gputop_sample_interval_seconds", "Time the newest sample's "
                                 "rates cover", labels=["Hostname"])
    interval.add_metric([host], frame.interval_s)
    return [info, stamp, cost, interval]


GPU_GAUGES: tuple[tuple[str, str, str, float], ...] = (
    # (metric, GpuSample field, help, scale)
    ("gputop_gpu_utilization_ratio", "util_percent",
     "Share of the last sample period a kernel ran on the GPU (NVML utilization.gpu)", 0.01),
    ("gputop_gpu_memory_utilization_ratio", "memory_util_percent",
     "Share of the period device memory was read or written", 0.01),
    ("gputop_gpu_memory_used_bytes", "memory_used_bytes", "Device memory in use", 1),
    ("gputop_gpu_memory_total_bytes", "memory_total_bytes", "Device memory installed", 1),
    ("gputop_gpu_temperature_celsius", "temperature_c", "GPU die temperature", 1),
    ("gputop_gpu_power_watts", "power_w", "Power draw", 1),
    ("gputop_gpu_power_limit_watts", "power_limit_w", "Enforced power limit", 1),
    ("gputop_gpu_sm_clock_hertz", "sm_clock_mhz", "SM clock", 1e6),
    ("gputop_gpu_memory_clock_hertz", "memory_clock_mhz", "Memory clock", 1e6),
    ("gputop_gpu_pcie_receive_bytes_per_second", "pcie_rx_bytes_per_s",
     "PCIe traffic host to device (NVML's sampled throughput)", 1),
    ("gputop_gpu_pcie_transmit_bytes_per_second", "pcie_tx_bytes_per_s",
     "PCIe traffic device to host (NVML's sampled throughput)", 1),
    ("gputop_gpu_sm_occupancy_ratio", "sm_occupancy_percent",
     "SM occupancy (GPM, Hopper and later)", 0.01),
    ("gputop_gpu_tensor_active_ratio", "tensor_active_percent",
     "Tensor pipe activity (GPM, Hopper and later)", 0.01),
)


def _gpus(view: View) -> list[Metric]:
    frame = view.frame
    host = frame.host.hostname
    info = InfoMetricFamily("gputop_gpu", "A GPU's model name", labels=GPU_LABELS)
    lost = GaugeMetricFamily("gputop_gpu_lost", "1 when the GPU stopped answering NVML",
                             labels=GPU_LABELS)
    families: list[Metric] = [info, lost]
    for gpu in frame.gpu.gpus:
        key = [host, str(gpu.index), gpu.uuid]
        info.add_metric(key, {"model_name": gpu.name})
        lost.add_metric(key, 1 if gpu.lost else 0)
    for name, attr, doc, scale in GPU_GAUGES:
        family = GaugeMetricFamily(name, doc, labels=GPU_LABELS)
        for gpu in frame.gpu.gpus:
            value = getattr(gpu, attr)
            if value is not None and not gpu.lost:
                family.add_metric([host, str(gpu.index), gpu.uuid], value * scale)
        families.append(family)
    return families


def _host(view: View) -> list[Metric]:
    h = view.frame.host
    labels = ["Hostname"]
    out: list[Metric] = []
    for name, doc, value in (
        ("gputop_host_cpu_utilization_ratio", "Share of all CPUs busy over the period",
         None if h.cpu_percent is None else h.cpu_percent / 100),
        ("gputop_host_cpus", "Logical CPUs", h.cpu_count or None),
        ("gputop_host_memory_total_bytes", "Host memory installed", h.memory_total_bytes or None),
        ("gputop_host_memory_available_bytes", "Host memory available without swapping",
         h.memory_available_bytes if h.memory_total_bytes else None),
        ("gputop_host_swap_used_bytes", "Swap in use",
         h.swap_used_bytes if h.memory_total_bytes else None),
    ):
        family = GaugeMetricFamily(name, doc, labels=labels)
        if value is not None:
            family.add_metric([h.hostname], value)
        out.append(family)
    return out


MEMBW_GAUGES: tuple[tuple[str, str, str, float, bool], ...] = (
    # (metric, MemoryBandwidthSample field, help, scale, labelled with the bandwidth source)
    ("gputop_host_memory_bandwidth_pressure_ratio", "pressure",
     "Host memory-bandwidth pressure, 0..1, as judged by the labelled source", 1, True),
    ("gputop_host_memory_read_bytes_per_second", "read_bytes_per_s",
     "Host memory read traffic (counters only; the estimate measures none)", 1, True),
    ("gputop_host_memory_write_bytes_per_second", "write_bytes_per_s",
     "Host memory write traffic (counters only)", 1, True),
    ("gputop_host_memory_traffic_bytes_per_second", "total_bytes_per_s",
     "Host memory traffic, read and write", 1, True),
    ("gputop_host_memory_bandwidth_peak_bytes_per_second", "peak_bytes_per_s",
     "The peak the pressure is relative to", 1, True),
    ("gputop_host_memory_psi_some_ratio", "psi_some_avg10",
     "Share of the last 10 s some task stalled on memory (PSI avg10)", 0.01, False),
    ("gputop_host_memory_psi_full_ratio", "psi_full_avg10",
     "Share of the last 10 s all tasks stalled on memory (PSI avg10)", 0.01, False),
    ("gputop_host_swap_in_pages_per_second", "swap_in_per_s",
     "Pages swapped in per second (/proc/vmstat pswpin)", 1, False),
    ("gputop_host_major_faults_per_second", "major_faults_per_s",
     "Major page faults per second (/proc/vmstat pgmajfault)", 1, False),
)


def _membw(view: View) -> list[Metric]:
    sample = view.frame.memory_bandwidth
    host = view.frame.host.hostname
    info = InfoMetricFamily("gputop_host_memory_bandwidth", "Where the memory-bandwidth "
                            "figures come from (resctrl, uncore counters, or an estimate)",
                            labels=["Hostname"])
    families: list[Metric] = [info]
    for name, attr, doc, scale, by_source in MEMBW_GAUGES:
        family = GaugeMetricFamily(name, doc, labels=["Hostname", "source"] if by_source
                                   else ["Hostname"])
        value = getattr(sample, attr) if sample is not None else None
        if sample is not None and value is not None:
            family.add_metric([host, sample.source] if by_source else [host], value * scale)
        families.append(family)
    if sample is not None:
        info.add_metric([host], {"source": sample.source, "confidence": sample.confidence,
                                 "relative_to": sample.relative_to or ""})
    return families


def _trainers(view: View) -> list[Metric]:
    frame = view.frame
    host = frame.host.hostname
    rows = {r.pid: r for r in frame.processes}
    probed = {a.pid for a in exported_attached(frame)}
    groups = {g.pid: g for g in frame.trainers}
    pids = sorted(groups.keys() | probed)
    info = InfoMetricFamily("gputop_trainer", "A training process: its name, user, launcher "
                            "and whether the step probe runs in it", labels=TRAINER_LABELS)
    workers = GaugeMetricFamily("gputop_trainer_workers", "DataLoader worker processes",
                                labels=TRAINER_LABELS)
    threads = GaugeMetricFamily("gputop_trainer_threads", "Threads of the trainer and its "
                                "workers together", labels=TRAINER_LABELS)
    pin = GaugeMetricFamily("gputop_trainer_pin_memory_thread", "1 when the trainer runs "
                            "DataLoader's pin-memory thread", labels=TRAINER_LABELS)
    cpu = CounterMetricFamily("gputop_trainer_cpu_seconds_total", "CPU time of the trainer "
                              "process itself", labels=TRAINER_LABELS)
    worker_cpu = CounterMetricFamily("gputop_trainer_workers_cpu_seconds_total", "CPU time "
                                     "of its DataLoader workers, exited ones included",
                                     labels=TRAINER_LABELS)
    rss = GaugeMetricFamily("gputop_trainer_resident_memory_bytes", "Resident memory of the "
                            "trainer process", labels=TRAINER_LABELS)
    gpu_mem = GaugeMetricFamily("gputop_trainer_gpu_memory_bytes", "GPU memory the trainer "
                                "process holds on all its GPUs", labels=TRAINER_LABELS)
    on_gpu = GaugeMetricFamily("gputop_trainer_gpu", "1 per GPU the trainer holds memory on "
                               "(joins trainers to GPU series)",
                               labels=[*TRAINER_LABELS, "gpu", "UUID"])
    uuids = {g.index: g.uuid for g in frame.gpu.gpus}
    for pid in pids:
        key = [host, str(pid)]
        row, group = rows.get(pid), groups.get(pid)
        info.add_metric(key, {
            "name": row.name if row else "", "user": (row.username or "") if row else "",
            "probe": "true" if pid in probed else "false",
            "launcher": str(group.launcher_pid) if group and group.launcher_pid else "",
        })
        if group is not None:
            _group_samples(key, group, workers, threads, pin)
            totals = view.worker_cpu.get(pid)
            if totals is not None:
                worker_cpu.add_metric(key, totals.seconds)
        if row is None:
            continue
        if row.cpu_time_s is not None:
            cpu.add_metric(key, row.cpu_time_s)
        if row.rss_bytes is not None:
            rss.add_metric(key, row.rss_bytes)
        if row.gpu_memory_bytes is not None:
            gpu_mem.add_metric(key, row.gpu_memory_bytes)
        for index in row.gpu_indices:
            on_gpu.add_metric([*key, str(index), uuids.get(index, "")], 1)
    return [info, workers, threads, pin, cpu, worker_cpu, rss, gpu_mem, on_gpu]


def _group_samples(key: list[str], group: TrainerGroup, workers: GaugeMetricFamily,
                   threads: GaugeMetricFamily, pin: GaugeMetricFamily) -> None:
    workers.add_metric(key, len(group.worker_pids))
    threads.add_metric(key, group.num_threads_total)
    pin.add_metric(key, 1 if group.pin_memory_thread else 0)


def _workers(view: View) -> list[Metric]:
    """Per-worker series, only with --per-worker (one series per worker process)."""
    if not view.per_worker:
        return []
    frame = view.frame
    labels = [*TRAINER_LABELS, "worker"]
    cpu = CounterMetricFamily("gputop_worker_cpu_seconds_total", "CPU time of one DataLoader "
                              "worker (--per-worker)", labels=labels)
    threads = GaugeMetricFamily("gputop_worker_threads", "Threads of one DataLoader worker "
                                "(--per-worker)", labels=labels)
    rss = GaugeMetricFamily("gputop_worker_resident_memory_bytes", "Resident memory of one "
                            "DataLoader worker (--per-worker)", labels=labels)
    for row in frame.processes:
        if row.role != "worker" or row.trainer_pid is None:
            continue
        key = [frame.host.hostname, str(row.trainer_pid), str(row.pid)]
        if row.cpu_time_s is not None:
            cpu.add_metric(key, row.cpu_time_s)
        if row.num_threads is not None:
            threads.add_metric(key, row.num_threads)
        if row.rss_bytes is not None:
            rss.add_metric(key, row.rss_bytes)
    return [cpu, threads, rss]


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
    for state in exported_attached(frame):
        key = [host, str(state.pid)]
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


def _window(view: View) -> list[Metric]:
    """The rolling window's verdict and the numbers it rests on, per probed trainer."""
    frame = view.frame
    host = frame.host.hostname
    gauges = {
        "ratio": GaugeMetricFamily("gputop_trainer_data_wait_ratio", "Input time (data wait "
                                   "+ host-to-device copy) over step time, rolling window",
                                   labels=TRAINER_LABELS),
        "waited": GaugeMetricFamily("gputop_trainer_waited_steps_ratio", "Share of the "
                                    "window's steps that waited for input",
                                    labels=TRAINER_LABELS),
        "median": GaugeMetricFamily("gputop_trainer_median_step_seconds", "Median step time "
                                    "over the window", labels=TRAINER_LABELS),
        "p95_data": GaugeMetricFamily("gputop_trainer_p95_data_wait_seconds", "95th "
                                      "percentile data wait over the window",
                                      labels=TRAINER_LABELS),
        "rate": GaugeMetricFamily("gputop_trainer_samples_per_second", "Samples per second "
                                  "over the window", labels=TRAINER_LABELS),
        "idle": GaugeMetricFamily("gputop_trainer_idle_seconds", "Since the newest step "
                                  "closed", labels=TRAINER_LABELS),
    }
    verdict = StateSetMetricFamily("gputop_trainer_verdict", "The window's verdict: did "
                                   "steps wait for data or for compute", labels=TRAINER_LABELS)
    band = StateSetMetricFamily("gputop_trainer_input_band", "Input-bound band (>= 20 % "
                                "highly, >= 5 % moderately)", labels=TRAINER_LABELS)
    state_set = StateSetMetricFamily("gputop_trainer_state", "running, or stalled (no step "
                                     "closed for max(5 s, 10x the median step))",
                                     labels=TRAINER_LABELS)
    config = InfoMetricFamily("gputop_trainer_config", "DataLoader and threading settings "
                              "the probe read", labels=TRAINER_LABELS)
    job = InfoMetricFamily("gputop_trainer_job", "Rank, world size and job (launcher) of a "
                           "trainer; rendezvous names its job across hosts",
                           labels=TRAINER_LABELS)
    straggler = GaugeMetricFamily("gputop_trainer_input_straggler", "1 for the rank whose "
                                  "input waits hold its job back", labels=TRAINER_LABELS)
    groups = {g.pid: g for g in frame.trainers}
    for state in exported_attached(frame):
        key = [host, str(state.pid)]
        s = state.summary
        for name, value in (
            ("ratio", None if s.input_bound_percent is None else s.input_bound_percent / 100),
            ("waited", None if s.waited_percent is None else s.waited_percent / 100),
            ("median", None if s.median_step_ns is None else s.median_step_ns * NS),
            ("p95_data", None if s.p95_data_ns is None else s.p95_data_ns * NS),
            ("rate", s.samples_per_s), ("idle", state.idle_s),
        ):
            if value is not None:
                gauges[name].add_metric(key, value)
        verdict.add_metric(key, {v: s.verdict == v for v in VERDICTS})
        band.add_metric(key, {b: s.band == b for b in BANDS})
        state_set.add_metric(key, {k: state.state == k for k in STATES})
        config.add_metric(key, _config_labels(state, s.input_outside_model))
        group = groups.get(state.pid)
        launcher = group.launcher_pid if group is not None else None
        job.add_metric(key, {
            "rank": _text(state.config.rank), "world_size": _text(state.config.world_size),
            "job": f"{host}:{launcher or state.pid}",
            "rendezvous": dict(state.config.extra).get("rendezvous", ""),
        })
        if frame.straggler is not None:
            straggler.add_metric(key, 1 if frame.straggler.pid == state.pid else 0)
    return [*gauges.values(), verdict, band, state_set, config, job, straggler]


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
    for advice in frame.advice:
        trainer = "" if advice.trainer_pid is None else str(advice.trainer_pid)
        active.add_metric([frame.host.hostname, advice.id, advice.severity, trainer], 1)
    return [active]


SECTIONS: tuple[Section, ...] = (_exporter, _gpus, _host, _membw, _trainers, _workers, _steps,
                                 _advice)
