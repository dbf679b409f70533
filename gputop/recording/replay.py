"""A recording's ticks as the Frames they recorded: the replay's source, as NVML and /proc are
the live view's (gputop/frames/playback.py plays it).

Each Frame holds what the tick stored, read through the one reader (reader.py): the
processes kept, each attached trainer's window of steps (first_step..last_step of that tick)
with its recorded state, and the advice shown then. The window's summary and the straggler
are left to the frames layer, which derives them as it did live.
"""

from __future__ import annotations

from array import array
from typing import Any

from gputop.core.model import (
    AttachState,
    Frame,
    GpuProcess,
    GpuReport,
    GpuSample,
    GpuSourceKind,
    HostSample,
    MemoryBandwidthSample,
    MemoryConsumer,
    MemoryLayoutCheck,
    ProcessSample,
    SourceError,
    SourceName,
    TrainerConfig,
    TrainerGroup,
    Trend,
)
from gputop.recording.reader import Recording, UnreadableRecording
from gputop.recording.schema import KIB, MIB, from_units, unpack_cores, unscaled
from gputop.recording.values import built, field
from gputop.sources.processes import gpu_usage

ERRORS = tuple[tuple[SourceName, str, int, float, float | None, bool], ...]


class Replay:
    """The ticks of the recording at `path`, oldest first, each as its Frame; the replay's
    thread and the UI's read it, one at a time."""

    def __init__(self, path: str) -> None:
        self.recording = Recording(path)
        self.ids = array("q")
        self.times = array("d")
        try:
            self.refresh()
        except UnreadableRecording:
            self.recording.close()
            raise

    def refresh(self) -> None:
        """Learn the ticks recorded since the last look (the oldest may have been trimmed)."""
        with self.recording.reading():
            ticks = self.recording.ticks(after=self.ids[-1] if self.ids else 0)
        for tick in ticks:
            self.ids.append(tick.id)
            self.times.append(tick.time)

    def __len__(self) -> int:
        return len(self.ids)

    def close(self) -> None:
        """Release the file."""
        self.recording.close()

    def frame(self, index: int) -> Frame:
        """The Frame of the `index`-th tick (oldest first) as it was recorded."""
        with self.recording.reading():
            return recorded_frame(self.recording, self.ids[index])

    def trend(self, index: int, count: int) -> Trend:
        """What the sparklines drew at the `index`-th tick: the values of the `count` ticks
        up to it, read in a few queries instead of `count` Frames."""
        first, last = self.ids[max(0, index - count + 1)], self.ids[index]
        recording = self.recording
        util: dict[int, list[float | None]] = {}
        with recording.reading():
            changes = iter(recording.gpu_info_changes(last))
            change = next(changes, None)
            info: dict[int, int] = {}  # device -> its info id in effect
            for fid, devices in recording.gpu_series(first, last):
                while change is not None and change.frame <= fid:
                    info[change.gpu] = change.info_id
                    change = next(changes, None)
                for values in devices:
                    gpu = values["gpu"] or 0
                    lost = field(recording.texts(info.get(gpu), dict) or {}, "lost", bool, "gpu")
                    util.setdefault(gpu, []).append(
                        None if lost else _float(values["util_percent"]))
            pressure = [unscaled(value, 1000) for value in recording.pressures(first, last)]
        return Trend(util, pressure)


def recorded_frame(recording: Recording, fid: int) -> Frame:
    """Tick `fid` of `recording` as the Frame it recorded (read inside `reading()`)."""
    tick = recording.tick(fid)
    if tick is None:
        raise UnreadableRecording(f"tick {fid} is no longer in {recording.path} (trimmed)")
    host = recording.texts(tick.host_id, dict) or {}
    gpus = _gpus(recording, fid, recording.texts(tick.gpu_id, dict) or {})
    return Frame(
        time=tick.time, interval_s=tick.interval_ms / 1000,
        sample_cost_s=(tick.sample_cost_us or 0) / 1e6,
        host=HostSample(
            hostname=field(host, "hostname", str, "host", "?"),
            cpu_count=field(host, "cpu_count", int, "host", 0),
            cpu_percent=unscaled(tick.cpu_percent_x10, 10),
            per_cpu_percent=unpack_cores(tick.per_cpu_percent, tick.per_cpu_classes),
            memory_total_bytes=field(host, "memory_total_bytes", int, "host", 0),
            memory_available_bytes=tick.memory_available_bytes or 0,
            swap_total_bytes=field(host, "swap_total_bytes", int, "host", 0),
            swap_used_bytes=tick.swap_used_bytes or 0,
            load_average=(unscaled(tick.load1_x100, 100) or 0.0,
                          unscaled(tick.load5_x100, 100) or 0.0,
                          unscaled(tick.load15_x100, 100) or 0.0),
            uptime_s=float(tick.uptime_s or 0)),
        gpu=gpus, processes=_processes(recording, fid, gpus),
        trainers=_trainer_groups(recording, fid), memory_bandwidth=_membw(recording, fid),
        attached=_attached(recording, fid), advice=tuple(recording.advice_shown(fid)),
        errors=tuple(SourceError(*error) for error in recording.texts(tick.errors_id, ERRORS)
                     or ()))


def _gpus(recording: Recording, fid: int, report: dict[str, Any]) -> GpuReport:
    owners: dict[int | None, list[GpuProcess]] = {}
    for row in recording.gpu_processes(fid):
        owners.setdefault(row.gpu, []).append(GpuProcess(
            row.pid, from_units(row.memory_used_mib, MIB), unscaled(row.sm_util_percent_x10, 10)))
    gpus = []
    for v in recording.gpu_devices(fid):
        index = v["gpu"] or 0
        info = recording.texts(recording.gpu_info_id(index, fid), dict) or {}
        gpus.append(GpuSample(
            index=index, name=field(info, "name", str, "gpu", "?"),
            uuid=field(info, "uuid", str, "gpu", "?"),
            util_percent=_float(v["util_percent"]),
            memory_util_percent=_float(v["memory_util_percent"]),
            memory_used_bytes=from_units(v["memory_used_mib"], MIB),
            memory_total_bytes=field(info, "memory_total_bytes", int, "gpu"),
            temperature_c=_float(v["temperature_c"]), power_w=unscaled(v["power_w_x10"], 10),
            power_limit_w=field(info, "power_limit_w", float, "gpu"),
            sm_clock_mhz=v["sm_clock_mhz"],
            memory_clock_mhz=v["memory_clock_mhz"],
            pcie_rx_bytes_per_s=_float(from_units(v["pcie_rx_kib_per_s"], KIB)),
            pcie_tx_bytes_per_s=_float(from_units(v["pcie_tx_kib_per_s"], KIB)),
            sm_occupancy_percent=unscaled(v["sm_occupancy_percent_x10"], 10),
            tensor_active_percent=unscaled(v["tensor_active_percent_x10"], 10),
            processes=tuple(owners.get(index, ())),
            lost=field(info, "lost", bool, "gpu", False),
            processes_known=field(info, "processes_known", bool, "gpu", True)))
    return GpuReport(source=field(report, "source", GpuSourceKind, "gpus", "none"),
                     gpus=tuple(gpus), note=field(report, "note", str, "gpus"),
                     driver_version=field(report, "driver_version", str, "gpus"),
                     scenario=field(report, "scenario", str, "gpus"))


def _processes(recording: Recording, fid: int, gpus: GpuReport) -> tuple[ProcessSample, ...]:
    """The processes kept, their GPU memory and devices from the tick's GPU processes (as
    the process source derived them live)."""
    on_gpu = gpu_usage(gpus)
    out = []
    for numbers in recording.process_numbers(fid):
        who = recording.identity(numbers.process)
        memory, devices = on_gpu.get(who.pid, (None, ()))
        out.append(ProcessSample(
            pid=who.pid, ppid=who.ppid, name=who.name,
            cmdline=recording.texts(who.cmdline_id, tuple[str, ...]) or (),
            username=who.username, state=numbers.state or "?",
            num_threads=numbers.num_threads, cpu_percent=unscaled(numbers.cpu_percent_x10, 10),
            rss_bytes=from_units(numbers.rss_kib, KIB),
            cpu_time_s=unscaled(numbers.cpu_time_s_x100, 100), start_ticks=who.start_ticks,
            gpu_memory_bytes=memory, gpu_indices=devices, role=who.role or "other",
            trainer_pid=who.trainer_pid, has_probe=who.has_probe, in_proc=who.in_proc,
            container=who.container, container_pod=who.container_pod,
            container_pid=who.container_pid))
    return tuple(out)


def _trainer_groups(recording: Recording, fid: int) -> tuple[TrainerGroup, ...]:
    return tuple(
        TrainerGroup(pid=group.pid,
                     worker_pids=recording.texts(group.workers_id, tuple[int, ...]) or (),
                     workers_cpu_percent=unscaled(group.workers_cpu_percent_x10, 10) or 0.0,
                     num_threads_total=group.num_threads_total or 0,
                     pin_memory_thread=group.pin_memory_thread, launcher_pid=group.launcher_pid)
        for group in recording.groups(fid))


def _membw(recording: Recording, fid: int) -> MemoryBandwidthSample | None:
    row = recording.memory_bandwidth(fid)
    if row is None:
        return None
    info = recording.texts(row.info_id, dict) or {}
    check = field(info, "layout_check", dict, "membw")
    consumers = tuple(MemoryConsumer(c.pid, c.name, c.bytes_per_s or 0.0)
                      for c in recording.memory_consumers(fid))
    return built(
        MemoryBandwidthSample, info, "membw", read_bytes_per_s=_float(row.read_bytes_per_s),
        write_bytes_per_s=_float(row.write_bytes_per_s),
        total_bytes_per_s=_float(row.total_bytes_per_s),
        peak_bytes_per_s=_float(row.peak_bytes_per_s),
        pressure=unscaled(row.pressure_x1000, 1000),
        psi_some_avg10=unscaled(row.psi_some_avg10_x100, 100),
        psi_full_avg10=unscaled(row.psi_full_avg10_x100, 100),
        swap_in_per_s=unscaled(row.swap_in_per_s_x10, 10),
        major_faults_per_s=unscaled(row.major_faults_per_s_x10, 10),
        canary_bytes_per_s=_float(row.canary_bytes_per_s), top_consumers=consumers,
        layout_check=None if check is None else built(MemoryLayoutCheck, check, "layout"))


def _attached(recording: Recording, fid: int) -> tuple[AttachState, ...]:
    states = []
    for row in recording.attached(fid):
        steps = tuple(step.record() for step in recording.steps(
            row.trainer, row.first_step, row.last_step)) if row.first_step is not None else ()
        config = recording.texts(row.config_id, dict)
        states.append(AttachState(
            pid=recording.trainer_pid(row.trainer),
            config=built(TrainerConfig, config, "config") if config else TrainerConfig(),
            dropped_records=row.dropped_records or 0, steps=steps, alive=row.alive,
            error=recording.texts(row.error_id, str), state=row.state,
            idle_s=unscaled(row.idle_ms, 1000), job=field(config or {}, "job", int, "config")))
    return tuple(states)


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)
