"""Reads a `gputop.record/1` recording (layout 2, 3 or 4) back into Frames: the replay's source,
as NVML and /proc are the live view's.

Each Frame holds what the tick stored: the processes kept, each attached trainer's window
of steps (first_step..last_step of that tick) with its recorded state, and the advice shown
then. The window's summary and the straggler are left to the sampler layer (sources never
import analysis), which derives them as it did live.
"""

from __future__ import annotations

import threading
from array import array
from typing import Any

from gputop.core.model import (
    Advice,
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
    Role,
    Severity,
    SourceError,
    SourceName,
    StepRecord,
    TrainerConfig,
    TrainerGroup,
    TrainerState,
    Trend,
)
from gputop.recording.schema import (
    KIB,
    MIB,
    PROCESS_TICK,
    from_units,
    gpu_process_rows,
    gpu_values,
    open_read_only,
    unpack_cores,
    unscaled,
)
from gputop.recording.trainers import read_attached, read_groups, read_steps
from gputop.recording.values import Texts, built, checked, checked_rows, conforming, field, refusing
from gputop.sources.processes import gpu_usage

IDENTITY = ("pid, ppid, name, cmdline_id, username, start_ticks, role, trainer_pid, has_probe, "
            "in_proc")  # a `process_info` row, as the replay reads it
IDENTITY_HINTS = (int, int | None, str, int | None, str | None, int, Role | None, int | None,
                  bool, bool)
UNKNOWN_PROCESS = (0, None, "?", None, None, 0, None, None, False, True)
FRAME_COLUMNS = ("id, time, interval_ms, sample_cost_us, host_id, gpu_id, cpu_percent_x10, "
                 "per_cpu_percent, memory_available_bytes, swap_used_bytes, load1_x100, "
                 "load5_x100, load15_x100, uptime_s, errors_id")  # then per_cpu_classes (3, 4)
FRAME_HINTS = (int, float, float, float | None, int | None, int | None, float | None,
               bytes | None, int | None, int | None, float | None, float | None, float | None,
               float | None, int | None, bytes | None)
PROCESS_HINTS = (int, str | None, int | None, float | None, int | None, float | None)
MEMBW_COLUMNS = ("info_id, read_bytes_per_s, write_bytes_per_s, total_bytes_per_s, "
                 "peak_bytes_per_s, pressure_x1000, psi_some_avg10_x100, psi_full_avg10_x100, "
                 "swap_in_per_s_x10, major_faults_per_s_x10, canary_bytes_per_s")
ATTACHED_HINTS = (int, TrainerState, float | None, bool, int | None, int | None, int | None,
                  int | None, int | None)
ERRORS = tuple[tuple[SourceName, str, int, float, float | None, bool], ...]


class ReplayError(Exception):
    """A file that cannot be replayed; one line saying why."""


class Recording:
    """A recording opened read-only (a recorder may still be appending to it); the replay's
    thread and the UI's read it, one at a time."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._reading = threading.Lock()
        self.db, self.layout = open_read_only(path, ReplayError)
        self.texts = Texts(self.db)
        self._identities: dict[int, tuple[Any, ...]] = {}  # process_info rows never change
        self._trainer_pids: dict[int, int] = {}
        self.ids = array("q")
        self.times = array("d")
        try:
            self.refresh()
        except ReplayError:
            self.db.close()
            raise

    def refresh(self) -> None:
        """Learn the ticks recorded since the last look (the oldest may have been trimmed)."""
        last = self.ids[-1] if self.ids else 0
        with self._reading, refusing(self.path, ReplayError):
            rows = checked_rows(self.db.execute(
                "SELECT id, time FROM frames WHERE id > ? ORDER BY id", (last,)),
                (int, float), "frames")
        for fid, at in rows:
            self.ids.append(fid)
            self.times.append(at)

    def __len__(self) -> int:
        return len(self.ids)

    def close(self) -> None:
        """Release the file."""
        self.db.close()

    def frame(self, index: int) -> Frame:
        """The Frame of the `index`-th tick (oldest first) as it was recorded."""
        with self._reading, refusing(self.path, ReplayError):
            return self._frame(self.ids[index])

    def trend(self, index: int, count: int) -> Trend:
        """What the sparklines drew at the `index`-th tick: the values of the `count` ticks
        up to it, read in two queries instead of `count` Frames."""
        first, last = self.ids[max(0, index - count + 1)], self.ids[index]
        util: dict[int, list[float | None]] = {}
        with self._reading, refusing(self.path, ReplayError):
            changes = iter(checked_rows(self.db.execute(
                "SELECT frame, gpu, info_id FROM gpu_info WHERE frame <= ? ORDER BY frame",
                (last,)), (int, int, int), "gpu_info"))
            change = next(changes, None)
            info: dict[int, int] = {}  # device -> its info id in effect
            for fid, devices in checked_rows(self.db.execute(
                    "SELECT frame, devices FROM gpu_ticks WHERE frame BETWEEN ? AND ? "
                    "ORDER BY frame", (first, last)), (int, bytes), "gpu_ticks"):
                while change is not None and change[0] <= fid:
                    info[change[1]] = change[2]
                    change = next(changes, None)
                for values in gpu_values(self.layout, devices):
                    gpu = values["gpu"] or 0
                    lost = field(self.texts(info.get(gpu), dict) or {}, "lost", bool, "gpu")
                    util.setdefault(gpu, []).append(
                        None if lost else _float(values["util_percent"]))
            pressure = [unscaled(value, 1000) for (value,) in checked_rows(self.db.execute(
                "SELECT m.pressure_x1000 FROM frames f LEFT JOIN memory_bandwidth m "
                "ON m.frame = f.id WHERE f.id BETWEEN ? AND ? ORDER BY f.id", (first, last)),
                (float | None,), "memory_bandwidth")]
        return Trend(util, pressure)

    def _frame(self, fid: int) -> Frame:
        row = self.db.execute(f"SELECT {FRAME_COLUMNS}, "
                              f"{'NULL' if self.layout == 2 else 'per_cpu_classes'} FROM frames "
                              "WHERE id = ?", (fid,)).fetchone()
        if row is None:
            raise ReplayError(f"tick {fid} is no longer in {self.path} (trimmed)")
        (_, at, interval_ms, cost_us, host_id, gpu_id, cpu_x10, per_cpu, available, swap_used,
         load1, load5, load15, uptime_s, errors_id, per_cpu_classes) = checked(
            row, FRAME_HINTS, "frames")
        host = self.texts(host_id, dict) or {}
        gpus = self._gpus(fid, self.texts(gpu_id, dict) or {})
        return Frame(
            time=at, interval_s=interval_ms / 1000, sample_cost_s=(cost_us or 0) / 1e6,
            host=HostSample(
                hostname=field(host, "hostname", str, "host", "?"),
                cpu_count=field(host, "cpu_count", int, "host", 0),
                cpu_percent=unscaled(cpu_x10, 10),
                per_cpu_percent=unpack_cores(per_cpu, per_cpu_classes),
                memory_total_bytes=field(host, "memory_total_bytes", int, "host", 0),
                memory_available_bytes=available or 0,
                swap_total_bytes=field(host, "swap_total_bytes", int, "host", 0),
                swap_used_bytes=swap_used or 0,
                load_average=(unscaled(load1, 100) or 0.0, unscaled(load5, 100) or 0.0,
                              unscaled(load15, 100) or 0.0),
                uptime_s=float(uptime_s or 0)),
            gpu=gpus, processes=self._processes(fid, gpus), trainers=self._trainer_groups(fid),
            memory_bandwidth=self._membw(fid), attached=self._attached(fid),
            advice=self._advice(fid), errors=self._errors(errors_id))

    def _gpus(self, fid: int, report: dict[str, Any]) -> GpuReport:
        owners: dict[int, list[GpuProcess]] = {}
        for gpu, pid, mib, sm_x10 in checked_rows(gpu_process_rows(self.db, self.layout, fid),
                                                  (int | None, int, int | None, float | None),
                                                  "gpu_processes"):
            owners.setdefault(gpu, []).append(
                GpuProcess(pid, from_units(mib, MIB), unscaled(sm_x10, 10)))
        gpus = []
        for v in self._gpu_values(fid):
            index = v["gpu"] or 0
            info = self.texts(self._gpu_info_id(index, fid), dict) or {}
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

    def _gpu_values(self, fid: int) -> list[dict[str, int | None]]:
        """The tick's devices by column; in layout 3 with the details stored last by then."""
        row = self.db.execute("SELECT devices FROM gpu_ticks WHERE frame = ?", (fid,)).fetchone()
        if row is None:
            return []
        details = None if self.layout == 2 else self.db.execute(
            "SELECT devices FROM gpu_details WHERE frame <= ? ORDER BY frame DESC LIMIT 1",
            (fid,)).fetchone()
        return gpu_values(self.layout, conforming(row[0], bytes, "gpu_ticks.devices"),
                          conforming(details[0], bytes, "gpu_details.devices") if details
                          else None)

    def _gpu_info_id(self, gpu: int, fid: int) -> int | None:
        """The `gpu_info` text id in effect for device `gpu` at frame `fid`."""
        row = self.db.execute("SELECT info_id FROM gpu_info WHERE gpu = ? AND frame <= ? "
                              "ORDER BY frame DESC LIMIT 1", (gpu, fid)).fetchone()
        return None if row is None else checked(row, (int,), "gpu_info")[0]

    def _processes(self, fid: int, gpus: GpuReport) -> tuple[ProcessSample, ...]:
        """The processes kept, their GPU memory and devices from the tick's GPU processes (as
        the process source derived them live)."""
        on_gpu = gpu_usage(gpus)
        out = []
        for process, state, threads, cpu_x10, rss_kib, time_x100 in self._process_numbers(fid):
            (pid, ppid, name, cmdline_id, user, ticks, role, trainer, probe,
             in_proc) = self._identity(process)
            out.append(ProcessSample(
                pid=pid, ppid=ppid, name=name,
                cmdline=self.texts(cmdline_id, tuple[str, ...]) or (),
                username=user, state=state or "?", num_threads=threads,
                cpu_percent=unscaled(cpu_x10, 10), rss_bytes=from_units(rss_kib, KIB),
                cpu_time_s=unscaled(time_x100, 100), start_ticks=ticks,
                gpu_memory_bytes=on_gpu.get(pid, (None, ()))[0],
                gpu_indices=on_gpu.get(pid, (None, ()))[1], role=role or "other",
                trainer_pid=trainer, has_probe=probe, in_proc=in_proc))
        return tuple(out)

    def _process_numbers(self, fid: int) -> list[tuple[Any, ...]]:
        """Each kept process's `process_info` id and its numbers that tick, as stored."""
        if self.layout == 2:
            return checked_rows(self.db.execute(
                "SELECT process, state, num_threads, cpu_percent_x10, rss_kib, cpu_time_s_x100 "
                "FROM processes WHERE frame = ?", (fid,)), PROCESS_HINTS, "processes")
        row = self.db.execute("SELECT processes FROM process_ticks WHERE frame = ?",
                              (fid,)).fetchone()
        blob = conforming(row[0], bytes, "process_ticks.processes") if row else b""
        return checked_rows(((process, None if state is None else chr(state), *numbers)
                             for process, state, *numbers in PROCESS_TICK.unpack(blob)),
                            PROCESS_HINTS, "process_ticks")

    def _identity(self, process: int) -> tuple[Any, ...]:
        """Who `process` (a `process_info` id) is: IDENTITY's columns."""
        found = self._identities.get(process)
        if found is None:
            row = self.db.execute(f"SELECT {IDENTITY} FROM process_info WHERE id = ?",
                                  (process,)).fetchone()
            found = self._identities[process] = checked(
                row, IDENTITY_HINTS, "process_info") if row else UNKNOWN_PROCESS
        return found

    def _trainer_groups(self, fid: int) -> tuple[TrainerGroup, ...]:
        return tuple(
            TrainerGroup(pid=pid, worker_pids=self.texts(workers_id, tuple[int, ...]) or (),
                         workers_cpu_percent=unscaled(cpu_x10, 10) or 0.0,
                         num_threads_total=threads or 0, pin_memory_thread=pin,
                         launcher_pid=launcher)
            for pid, workers_id, cpu_x10, threads, pin, launcher in checked_rows(
                read_groups(self.db, self.layout, fid),
                (int, int | None, float | None, int | None, bool, int | None), "trainer_groups"))

    def _membw(self, fid: int) -> MemoryBandwidthSample | None:
        row = self.db.execute(f"SELECT {MEMBW_COLUMNS} FROM memory_bandwidth WHERE frame = ?",
                              (fid,)).fetchone()
        if row is None:
            return None
        (info_id, read, write, total, peak, pressure_x1000, psi_some_x100, psi_full_x100,
         swap_in_x10, faults_x10, canary) = checked(row, (int, *(float | None,) * 10),
                                                    "memory_bandwidth")
        info = self.texts(info_id, dict) or {}
        check = field(info, "layout_check", dict, "membw")
        consumers = tuple(MemoryConsumer(pid, name, rate or 0.0) for pid, name, rate in
                          checked_rows(self.db.execute(
                              "SELECT pid, name, bytes_per_s FROM memory_consumers "
                              "WHERE frame = ? ORDER BY position", (fid,)),
                              (int, str | None, float | None), "memory_consumers"))
        return built(
            MemoryBandwidthSample, info, "membw", read_bytes_per_s=_float(read),
            write_bytes_per_s=_float(write),
            total_bytes_per_s=_float(total), peak_bytes_per_s=_float(peak),
            pressure=unscaled(pressure_x1000, 1000), psi_some_avg10=unscaled(psi_some_x100, 100),
            psi_full_avg10=unscaled(psi_full_x100, 100), swap_in_per_s=unscaled(swap_in_x10, 10),
            major_faults_per_s=unscaled(faults_x10, 10), canary_bytes_per_s=_float(canary),
            top_consumers=consumers,
            layout_check=None if check is None else built(MemoryLayoutCheck, check, "layout"))

    def _attached(self, fid: int) -> tuple[AttachState, ...]:
        states = []
        for (trainer, state, idle_ms, alive, dropped, first, last, config_id,
             error_id) in checked_rows(read_attached(self.db, self.layout, fid), ATTACHED_HINTS,
                                       "trainer_ticks"):
            steps = self._steps(trainer, first, last) if first is not None else ()
            config = self.texts(config_id, dict)
            states.append(AttachState(
                pid=self._trainer_pid(trainer),
                config=built(TrainerConfig, config, "config") if config else TrainerConfig(),
                dropped_records=dropped or 0, steps=steps, alive=alive,
                error=self.texts(error_id, str), state=state, idle_s=unscaled(idle_ms, 1000)))
        return tuple(states)

    def _trainer_pid(self, trainer: int) -> int:
        """The PID of `trainer` (a `trainers` id)."""
        found = self._trainer_pids.get(trainer)
        if found is None:
            row = self.db.execute("SELECT pid FROM trainers WHERE id = ?", (trainer,)).fetchone()
            found = self._trainer_pids[trainer] = checked(row, (int,), "trainers")[0] if (
                row) else 0
        return found

    def _steps(self, trainer: int, first: int, last: int) -> tuple[StepRecord, ...]:
        return tuple(
            StepRecord(step=step, duration_ns=duration, data_ns=data, h2d_ns=h2d,
                       forward_ns=forward, backward_ns=backward, optimizer_ns=optimizer,
                       gpu_ns=gpu, gpu_gap_ns=gap, batch_size=batch, epoch=epoch,
                       warmup=bool(flags & 1), implicit=bool(flags & 2),
                       input_outside_model=bool(flags & 4), verdict=verdict, end_ns=end)
            for (step, _frame, end, duration, data, h2d, forward, backward, optimizer, gpu, gap,
                 batch, epoch, flags, verdict) in read_steps(self.db, self.layout, trainer,
                                                             first, last))

    def _advice(self, fid: int) -> tuple[Advice, ...]:
        shown = []
        for (key,) in self.db.execute("SELECT DISTINCT id FROM advice").fetchall():
            row = self.db.execute(
                "SELECT shown, severity, title, evidence, action FROM advice WHERE id = ? AND "
                "frame <= ? ORDER BY frame DESC LIMIT 1", (key, fid)).fetchone()
            if row is not None and conforming(row[0], bool, "advice.shown"):
                words = checked(row[1:], (Severity, str, str, str), "advice")
                shown.append(Advice(conforming(key, str, "advice.id"), *words))
        return tuple(shown)

    def _errors(self, errors_id: int | None) -> tuple[SourceError, ...]:
        return tuple(SourceError(*error) for error in self.texts(errors_id, ERRORS) or ())


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)
