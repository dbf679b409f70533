"""The `gputop.snapshot/1` JSON document: the contract scripts rely on (DESIGN.md)."""

from __future__ import annotations

import json
import math
from typing import Any

from gputop.analysis.steps import STEP_STATISTIC
from gputop.core.mig import instance_label, process_places, processes_on
from gputop.core.model import (
    Advice,
    AttachState,
    CpuStarvation,
    Frame,
    GpuSample,
    HostSample,
    MemoryBandwidthSample,
    MemoryLayoutCheck,
    MigInstance,
    ProcessSample,
    StepRecord,
    StepSummary,
    TrainerConfig,
    TrainerGroup,
)

SCHEMA = "gputop.snapshot/1"


def snapshot(frame: Frame) -> dict[str, Any]:
    """The whole frame as plain JSON-ready data, keys and units as the contract fixes them."""
    places = process_places(frame.gpu)  # PID -> its GPUs, or MIG instances, by name
    return {
        "schema": SCHEMA,
        "time": frame.time,
        "interval_s": frame.interval_s,
        "hostname": frame.host.hostname,
        "gpu_source": frame.gpu.source,
        "simulated": frame.simulated,
        "gpu_scenario": frame.gpu.scenario,
        "gpu_note": frame.gpu.note,
        "driver_version": frame.gpu.driver_version,
        "gpus": [gpu_json(g) for g in frame.gpu.gpus],
        "host": host_json(frame.host),
        "processes": [process_json(p, places.get(p.pid, ())) for p in frame.processes],
        "trainers": [trainer_json(t, places.get(t.pid, ())) for t in frame.trainers],
        "memory_bandwidth": membw_json(frame.memory_bandwidth),
        "attach": attach_json(frame.attached[0]) if frame.attached else None,
        "attach_ranks": [attach_json(a) for a in frame.attached[1:]],
        "advice": [advice_json(a) for a in frame.advice],
        "foreign_gpu_pids": [{"host_pid": f.host_pid, "gpu_index": f.gpu_index, "pid": f.pid,
                              "how": f.how} for f in frame.foreign_gpu_pids],
        "sample_cost_s": frame.sample_cost_s,
    }


def dumps(frame: Frame) -> str:
    """The snapshot as one JSON text."""
    return json.dumps(_finite(snapshot(frame)), indent=2, allow_nan=False)


def gpu_json(gpu: GpuSample) -> dict[str, Any]:
    """One device; None where NVML (or the simulation) had no value."""
    return {
        "index": gpu.index,
        "name": gpu.name,
        "uuid": gpu.uuid,
        "util_percent": gpu.util_percent,
        "memory_util_percent": gpu.memory_util_percent,
        "memory_used_bytes": gpu.memory_used_bytes,
        "memory_total_bytes": gpu.memory_total_bytes,
        "temperature_c": gpu.temperature_c,
        "power_w": gpu.power_w,
        "power_limit_w": gpu.power_limit_w,
        "sm_clock_mhz": gpu.sm_clock_mhz,
        "memory_clock_mhz": gpu.memory_clock_mhz,
        "pcie_rx_bytes_per_s": gpu.pcie_rx_bytes_per_s,
        "pcie_tx_bytes_per_s": gpu.pcie_tx_bytes_per_s,
        "sm_occupancy_percent": gpu.sm_occupancy_percent,
        "tensor_active_percent": gpu.tensor_active_percent,
        "lost": gpu.lost,
        "processes_known": gpu.processes_known,
        "processes": [
            {
                "pid": p.pid,
                "memory_used_bytes": p.memory_used_bytes,
                "sm_util_percent": p.sm_util_percent,
                "gpu_instance_id": p.gpu_instance_id,
                "compute_instance_id": p.compute_instance_id,
            }
            for p in gpu.processes
        ],
        "mig_enabled": gpu.mig_enabled,
        "mig_instances": [mig_json(gpu, m) for m in gpu.mig_instances],
    }


def mig_json(gpu: GpuSample, m: MigInstance) -> dict[str, Any]:
    """One MIG instance of a GPU in MIG mode, with the processes on it."""
    return {
        "label": instance_label(gpu, m),
        "gpu_instance_id": m.gpu_instance_id,
        "compute_instance_id": m.compute_instance_id,
        "uuid": m.uuid,
        "profile": m.profile,
        "memory_used_bytes": m.memory_used_bytes,
        "memory_total_bytes": m.memory_total_bytes,
        "util_percent": m.util_percent,
        "processes": [{"pid": p.pid, "memory_used_bytes": p.memory_used_bytes}
                      for p in processes_on(gpu, m)],
    }


def host_json(host: HostSample) -> dict[str, Any]:
    """Host CPU and memory."""
    return {
        "cpu_count": host.cpu_count,
        "cpu_percent": host.cpu_percent,
        "per_cpu_percent": list(host.per_cpu_percent),
        "memory_total_bytes": host.memory_total_bytes,
        "memory_available_bytes": host.memory_available_bytes,
        "swap_total_bytes": host.swap_total_bytes,
        "swap_used_bytes": host.swap_used_bytes,
        "load_average": list(host.load_average),
        "uptime_s": host.uptime_s,
    }


def process_json(p: ProcessSample, gpu_devices: tuple[str, ...] = ()) -> dict[str, Any]:
    """One process row; `gpu_devices` names where it runs ("GPU 0", or its MIG instance)."""
    return {
        "pid": p.pid,
        "ppid": p.ppid,
        "name": p.name,
        "cmdline": list(p.cmdline),
        "username": p.username,
        "state": p.state,
        "num_threads": p.num_threads,
        "cpu_percent": p.cpu_percent,
        "rss_bytes": p.rss_bytes,
        "cpu_time_s": p.cpu_time_s,
        "gpu_memory_bytes": p.gpu_memory_bytes,
        "gpu_indices": list(p.gpu_indices),
        "role": p.role,
        "trainer_pid": p.trainer_pid,
        "has_probe": p.has_probe,
        "in_proc": p.in_proc,
        "runqueue_wait_percent": p.runqueue_wait_percent,
        "io_wait_percent": p.io_wait_percent,
        "read_bytes_per_s": p.read_bytes_per_s,
        "main_thread_busy_percent": p.main_thread_busy_percent,
        "container": p.container,
        "container_pod": p.container_pod,
        "container_pid": p.container_pid,
        "gpu_devices": list(gpu_devices),
    }


def trainer_json(t: TrainerGroup, gpu_devices: tuple[str, ...] = ()) -> dict[str, Any]:
    """A trainer with its DataLoader workers, and where it runs (its GPUs or MIG instances)."""
    return {
        "pid": t.pid,
        "worker_pids": list(t.worker_pids),
        "workers_cpu_percent": t.workers_cpu_percent,
        "num_threads_total": t.num_threads_total,
        "pin_memory_thread": t.pin_memory_thread,
        "launcher_pid": t.launcher_pid,
        "gpu_devices": list(gpu_devices),
    }


def membw_json(m: MemoryBandwidthSample | None) -> dict[str, Any] | None:
    """Memory-bandwidth pressure with its source, or None when the pane is off."""
    if m is None:
        return None
    return {
        "source": m.source,
        "confidence": m.confidence,
        "read_bytes_per_s": m.read_bytes_per_s,
        "write_bytes_per_s": m.write_bytes_per_s,
        "peak_bytes_per_s": m.peak_bytes_per_s,
        "pressure": m.pressure,
        "psi_some_avg10": m.psi_some_avg10,
        "psi_full_avg10": m.psi_full_avg10,
        "swap_in_per_s": m.swap_in_per_s,
        "major_faults_per_s": m.major_faults_per_s,
        "total_bytes_per_s": m.total_bytes_per_s,
        "canary_bytes_per_s": m.canary_bytes_per_s,
        "measured_peak_bytes_per_s": m.measured_peak_bytes_per_s,
        "expected_peak_bytes_per_s": m.expected_peak_bytes_per_s,
        "layout": m.layout,
        "relative_to": m.relative_to,
        "note": m.note,
        "top_consumers": [{"pid": c.pid, "name": c.name, "bytes_per_s": c.bytes_per_s}
                          for c in m.top_consumers],
        "layout_check": layout_check_json(m.layout_check),
    }


def layout_check_json(c: MemoryLayoutCheck | None) -> dict[str, Any] | None:
    """The memory-layout verdict with its findings and the slots they name."""
    if c is None:
        return None
    return {
        "verdict": c.verdict,
        "source": c.source,
        "channels_populated": c.channels_populated,
        "channels_total": c.channels_total,
        "findings": list(c.findings),
        "fill_slots": list(c.fill_slots),
        "slow_slots": list(c.slow_slots),
        "usual_module": c.usual_module,
        "reason": c.reason,
    }


def config_json(c: TrainerConfig) -> dict[str, Any]:
    """The trainer's settings as the probe recorded them."""
    out: dict[str, Any] = {
        "num_workers": c.num_workers,
        "pin_memory": c.pin_memory,
        "batch_size": c.batch_size,
        "prefetch_factor": c.prefetch_factor,
        "persistent_workers": c.persistent_workers,
        "num_threads": c.num_threads,
        "device": c.device,
        "rank": c.rank,
        "world_size": c.world_size,
        "pin_memory_effective": c.pin_memory_effective,
    }
    out["extra"] = dict(c.extra)
    return out


def step_json(s: StepRecord) -> dict[str, Any]:
    """One step; unmeasured phases stay null."""
    return {
        "step": s.step,
        "duration_ns": s.duration_ns,
        "data_ns": s.data_ns,
        "h2d_ns": s.h2d_ns,
        "forward_ns": s.forward_ns,
        "backward_ns": s.backward_ns,
        "optimizer_ns": s.optimizer_ns,
        "other_ns": s.other_ns,
        "gpu_ns": s.gpu_ns,
        "gpu_gap_ns": s.gpu_gap_ns,
        "batch_size": s.batch_size,
        "epoch": s.epoch,
        "warmup": s.warmup,
        "verdict": s.verdict,
        "implicit": s.implicit,
        "input_outside_model": s.input_outside_model,
        "host_ns": s.host_ns,
        "sync_ns": s.sync_ns,
        "at_backward": s.at_backward,
        "samples": s.samples,
        "host_site": s.host_site,
        "host_site_samples": s.host_site_samples,
        "data_site": s.data_site,
        "data_site_samples": s.data_site_samples,
        "host_samples": s.host_samples,
        "data_samples": s.data_samples,
    }


def summary_json(s: StepSummary) -> dict[str, Any]:
    """The rolling window's verdict and the numbers behind it.

    input_bound_percent leaves out the outlier_steps (runaway compute); input_time_percent
    is the plain total-time ratio over every step. Step times, samples/s and the share are
    null with unmeasured_reason when the steps have no real boundaries.
    """
    return {
        "steps": s.steps,
        "input_bound_percent": s.input_bound_percent,
        "band": s.band,
        "verdict": s.verdict,
        "median_step_ns": s.median_step_ns,
        "p95_step_ns": s.p95_step_ns,
        "samples_per_s": s.samples_per_s,
        "waited_percent": s.waited_percent,
        "p95_data_ns": s.p95_data_ns,
        "median_phase_ns": dict(s.median_phase_ns),
        "input_time_percent": s.input_time_percent,
        "outlier_steps": s.outlier_steps,
        "data_bound_steps": s.data_bound_steps,
        "compute_bound_steps": s.compute_bound_steps,
        "data_bound_steps_percent": s.data_bound_steps_percent,
        "compute_bound_steps_percent": s.compute_bound_steps_percent,
        "step_time_modes": [
            {"percent_of_steps": share, "median_ns": median} for share, median in s.step_modes
        ],
        "unmeasured_reason": s.unmeasured_reason,
        "input_outside_model": s.input_outside_model,
        # the window's one step time: the screen's, the advice's and the exit summary's
        "step_ns": s.mean_step_ns,
        "step_statistic": STEP_STATISTIC,
        "host_percent": s.host_percent,
        "host_bound_steps": s.host_bound_steps,
        "host_bound_steps_percent": s.host_bound_steps_percent,
        "verdict_percent": s.verdict_percent,
        "verdict_part": s.verdict_part,
        "steps_verdict": s.steps_verdict or s.verdict,
        "stack_samples": s.stack_samples,
        "host_site": s.host_site,
        "host_site_percent": s.host_site_percent,
        "data_site": s.data_site,
        "data_site_percent": s.data_site_percent,
    }


def attach_json(a: AttachState) -> dict[str, Any]:
    """The attached trainer: settings, steps (newest last), dropped records, summary."""
    return {
        "pid": a.pid,
        "alive": a.alive,
        "state": a.state,
        "idle_s": a.idle_s,
        "step_in_progress_s": a.step_in_progress_s,
        "activity": a.activity,  # what the probe says the trainer does outside its steps
        "activity_s": a.activity_s,  # ... and for how long so far
        "error": a.error,
        "config": config_json(a.config),
        "dropped_records": a.dropped_records,
        "steps": [step_json(s) for s in a.steps],
        "summary": summary_json(a.summary),
        "cpu_starved": cpu_starved_json(a.cpu_starvation),
    }


def cpu_starved_json(c: CpuStarvation | None) -> dict[str, Any] | None:
    """Why the trainer is CPU-starved (None: it is not, or it is not known)."""
    if c is None:
        return None
    return {
        "main_thread_wait_percent": c.main_thread_wait_percent,
        "main_thread_run_percent": c.main_thread_run_percent,
        "runqueue_wait_percent": c.runqueue_wait_percent,
        "cores_got": c.cores_got,
        "cores_wanted": c.cores_wanted,
        "cores_allowed": c.cores_allowed,
        "competitors_cores": c.competitors_cores,
        "competitors": [{"pid": o.pid, "username": o.username, "command": o.command,
                         "cpu_percent": o.cpu_percent} for o in c.competitors],
    }


def advice_json(a: Advice) -> dict[str, Any]:
    """One piece of advice."""
    return {
        "id": a.id,
        "severity": a.severity,
        "title": a.title,
        "evidence": a.evidence,
        "action": a.action,
        "trainer_pid": a.trainer_pid,
    }


def _finite(value: Any) -> Any:
    """The same data with NaN and infinities as null: JSON has no spelling for them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
