"""GPUs over NVML: the one module that imports pynvml, and the one place its errors become None."""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from gputop.core.model import GpuProcess, GpuReport, GpuSample, MigInstance
from gputop.core.printable import printable
from gputop.sources.base import GpuSource

LOST_AFTER_UNKNOWN_TICKS = 3
SLOW_REFRESH_TICKS = 30
PCIE_KB = 1024
MIB = 1 << 20
PCIE_THROUGHPUT_EVERY = 5
NOT_AVAILABLE_ULL = (1 << 64) - 1
NO_INSTANCE = 0xFFFFFFFF  # a process's instance id on a GPU without MIG

# Errors that will not go away by asking again: remember them per device and field.
_PERMANENT = (
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_NO_PERMISSION",
    "NVML_ERROR_FUNCTION_NOT_FOUND",
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
)
_LOST = ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_RESET_REQUIRED")
# Union members of c_nvmlValue_t that can hold a byte counter, by value type.
_COUNTER_MEMBERS = (
    ("NVML_VALUE_TYPE_UNSIGNED_LONG_LONG", "ullVal"),
    ("NVML_VALUE_TYPE_UNSIGNED_LONG", "ulVal"),
    ("NVML_VALUE_TYPE_UNSIGNED_INT", "uiVal"),
    ("NVML_VALUE_TYPE_SIGNED_LONG_LONG", "sllVal"),
)
_INIT_NOTES = {
    "NVML_ERROR_LIBRARY_NOT_FOUND": "NVIDIA driver library (libnvidia-ml) not found",
    "NVML_ERROR_DRIVER_NOT_LOADED": "NVIDIA driver not loaded",
    "NVML_ERROR_NO_PERMISSION": "no permission to use NVML",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": "NVML library and kernel driver versions differ",
}


class NoGpuSource:
    """No usable NVML: every report says why, in one line, and the rest runs CPU-only."""

    def __init__(self, note: str) -> None:
        self.note = note
        self._report = GpuReport(source="none", note=note)

    def sample(self) -> GpuReport:
        """The same empty report every tick (one object: nothing in it changes)."""
        return self._report

    def close(self) -> None:
        """Nothing to release."""


@dataclass
class _Gpm:
    """Two GPM sample buffers used in turn; metrics come from the previous and current tick."""

    buffers: list[Any]
    current: int = 0
    have_previous: bool = False


@dataclass(frozen=True)
class _Mig:
    """One MIG device of a GPU in MIG mode, as listed (its handle and what does not change)."""

    handle: Any
    gpu_instance_id: int | None
    compute_instance_id: int | None
    uuid: str
    profile: str


@dataclass
class _Device:
    """What we keep about one device between ticks."""

    index: int
    handle: Any
    name: str = "n/a"
    uuid: str = "n/a"
    memory_total: int | None = None
    power_limit_w: float | None = None
    unsupported: set[str] = field(default_factory=set)
    lost: bool = False
    unknown_ticks: int = 0
    unknown_now: bool = False
    process_util_seen: int = 0
    gpm: _Gpm | None = None
    pcie_counts: dict[int, tuple[int, float]] = field(default_factory=dict)
    pcie_kept: dict[str, float | None] = field(default_factory=dict)
    pcie_turn: int = 0
    mig_enabled: bool | None = None
    migs: tuple[_Mig, ...] = ()
    minor: int | None = None  # the N of its /dev/nvidiaN


def _text(value: Any) -> str:
    """A string NVML handed back (a name, a UUID, a version), escaped for the terminal."""
    return printable(value.decode(errors="replace") if isinstance(value, bytes) else str(value))


def _one_line(text: str) -> str:
    """An error message on one line, escaped for the terminal."""
    return printable(" ".join(text.split()))


def open_nvml(
    module: ModuleType | None = None, clock: Callable[[], float] = time.monotonic
) -> GpuSource:
    """Start NVML and return a source over its devices, or a NoGpuSource that says why not."""
    if module is None and not _driver_library_loads():
        return NoGpuSource(f"no GPU data: {_INIT_NOTES['NVML_ERROR_LIBRARY_NOT_FOUND']}")
    try:
        nv = module if module is not None else _import_pynvml()
    except ImportError:
        return NoGpuSource("no GPU data: nvidia-ml-py (module pynvml) is not installed")
    try:
        nv.nvmlInit()
    except nv.NVMLError as err:
        return NoGpuSource(f"no GPU data: {_init_note(nv, err)}")
    except Exception as err:  # the binding failing in its own way must not become a traceback
        return NoGpuSource(_one_line(f"no GPU data: NVML failed to start ({err!r})"))
    try:
        count = int(nv.nvmlDeviceGetCount())
        driver = _text(nv.nvmlSystemGetDriverVersion())
    except Exception as err:
        _shutdown(nv)
        return NoGpuSource(_one_line(f"no GPU data: NVML could not list devices ({err})"))
    if count == 0:
        _shutdown(nv)
        return NoGpuSource(f"no GPU data: NVML (driver {driver}) found no GPUs")
    return NvmlSource(nv, count, driver, clock=clock)


def _driver_library_loads() -> bool:
    """Whether the library pynvml would load is there: on CPU-only hosts this skips its import.

    A pynvml already imported (or a stand-in put in its place) is used as it is.
    """
    if "pynvml" in sys.modules or not sys.platform.startswith("linux"):
        return True
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def _import_pynvml() -> ModuleType:
    import pynvml

    return pynvml


def _init_note(nv: ModuleType, err: Any) -> str:
    for name, note in _INIT_NOTES.items():
        if getattr(err, "value", None) == getattr(nv, name, None):
            return note
    return _one_line(f"NVML failed to start ({err})")


def _codes(nv: ModuleType, names: tuple[str, ...]) -> frozenset[int]:
    """The error codes behind these constant names (older bindings may lack some)."""
    return frozenset(getattr(nv, name) for name in names if hasattr(nv, name))


def _shutdown(nv: ModuleType) -> None:
    with contextlib.suppress(Exception):
        nv.nvmlShutdown()


class NvmlSource:
    """Samples every NVML device once per call; fields NVML cannot give are None."""

    def __init__(
        self,
        nv: ModuleType,
        count: int,
        driver_version: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nv = nv
        self._clock = clock
        self._lock = threading.Lock()
        self._closed = False
        self._ticks = 0
        self.driver_version = driver_version
        self._permanent = _codes(nv, _PERMANENT)
        self._lost = _codes(nv, _LOST)
        self._unknown = _codes(nv, ("NVML_ERROR_UNKNOWN",))
        self._memory_v2 = getattr(nv, "nvmlMemory_v2", None)
        self._success = getattr(nv, "NVML_SUCCESS", 0)
        self._pcie_fields = (
            getattr(nv, "NVML_FI_DEV_PCIE_COUNT_RX_BYTES", 198),
            getattr(nv, "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", 197),
        )
        # SM occupancy, tensor activity, then PCIe rx and tx in MiB/s.
        self._gpm_ids = (
            getattr(nv, "NVML_GPM_METRIC_SM_OCCUPANCY", 3),
            getattr(nv, "NVML_GPM_METRIC_ANY_TENSOR_UTIL", 5),
            getattr(nv, "NVML_GPM_METRIC_PCIE_RX_PER_SEC", 21),
            getattr(nv, "NVML_GPM_METRIC_PCIE_TX_PER_SEC", 20),
        )
        self._counter_members = {
            getattr(nv, name): member for name, member in _COUNTER_MEMBERS if hasattr(nv, name)
        }
        self._devices = [self._open_device(index) for index in range(count)]

    def _open_device(self, index: int) -> _Device:
        dev = _Device(index, handle=None)
        dev.handle = self._call(dev, "handle", "nvmlDeviceGetHandleByIndex", index)
        if dev.handle is None:
            dev.lost = True
            return dev
        dev.name = _text(self._call(dev, "name", "nvmlDeviceGetName", dev.handle) or "n/a")
        dev.uuid = _text(self._call(dev, "uuid", "nvmlDeviceGetUUID", dev.handle) or "n/a")
        minor = self._call(dev, "minor", "nvmlDeviceGetMinorNumber", dev.handle)
        dev.minor = int(minor) if isinstance(minor, int) else None
        if self._memory_v2 is None:
            dev.unsupported.update(("memory_v2", "mig_memory_v2"))
        dev.gpm = self._open_gpm(dev)
        dev.mig_enabled = self._mig_mode(dev)
        return dev

    def _call(self, dev: _Device, key: str, function: str, *args: Any, **kwargs: Any) -> Any:
        """Call NVML for one field of one device; every failure ends here and becomes None."""
        if dev.lost or key in dev.unsupported:
            return None
        fn = getattr(self._nv, function, None)
        if fn is None:
            dev.unsupported.add(key)
            return None
        try:
            return fn(*args, **kwargs)
        except self._nv.NVMLError as err:
            code = getattr(err, "value", None)
            if code in self._permanent:
                dev.unsupported.add(key)
            elif code in self._lost:
                dev.lost = True
            elif code in self._unknown:
                dev.unknown_now = True
            return None
        except Exception:  # a binding that does not match the driver: stop asking for this field
            dev.unsupported.add(key)
            return None

    def sample(self) -> GpuReport:
        """One report over all devices; a lost device is shown, not polled."""
        with self._lock:
            if self._closed:
                return GpuReport(source="none", note="no GPU data: NVML source closed")
            gpus = tuple(self._sample_device(dev) for dev in self._devices)
            self._ticks += 1
            return GpuReport(source="nvml", gpus=gpus, driver_version=self.driver_version)

    def _sample_device(self, dev: _Device) -> GpuSample:
        if dev.lost:
            return _lost_sample(dev)
        dev.unknown_now = False
        if self._ticks % SLOW_REFRESH_TICKS == 0:
            limit = self._call(dev, "power_limit", "nvmlDeviceGetEnforcedPowerLimit", dev.handle)
            dev.power_limit_w = limit / 1000 if limit is not None else dev.power_limit_w
            if dev.mig_enabled:  # instances come and go without a reset: list them again
                dev.migs = self._list_migs(dev)
        sample = self._read(dev)
        dev.unknown_ticks = dev.unknown_ticks + 1 if dev.unknown_now else 0
        if dev.unknown_ticks >= LOST_AFTER_UNKNOWN_TICKS:
            dev.lost = True
        if dev.lost:
            self._close_gpm(dev)
            return _lost_sample(dev)
        return sample

    def _read(self, dev: _Device) -> GpuSample:
        h = dev.handle
        nv = self._nv
        util = self._call(dev, "util", "nvmlDeviceGetUtilizationRates", h)
        memory = self._memory(dev)
        if memory is not None:
            dev.memory_total = int(memory.total)
        temp = self._call(dev, "temperature", "nvmlDeviceGetTemperature", h,
                          getattr(nv, "NVML_TEMPERATURE_GPU", 0))
        power = self._call(dev, "power", "nvmlDeviceGetPowerUsage", h)
        sm_clock = self._call(dev, "sm_clock", "nvmlDeviceGetClockInfo", h,
                              getattr(nv, "NVML_CLOCK_SM", 1))
        mem_clock = self._call(dev, "memory_clock", "nvmlDeviceGetClockInfo", h,
                               getattr(nv, "NVML_CLOCK_MEM", 2))
        rx, tx, occupancy, tensor = self._pcie_and_gpm(dev)
        instances: tuple[MigInstance, ...] = ()
        if dev.mig_enabled:
            instances, processes = self._read_migs(dev)
        else:
            processes = self._processes(dev)
        return GpuSample(
            index=dev.index,
            name=dev.name,
            uuid=dev.uuid,
            minor_number=dev.minor,
            util_percent=_percent(util.gpu) if util is not None else None,
            memory_util_percent=_percent(util.memory) if util is not None else None,
            memory_used_bytes=int(memory.used) if memory is not None else None,
            memory_total_bytes=dev.memory_total,
            temperature_c=float(temp) if temp is not None else None,
            power_w=power / 1000 if power is not None else None,
            power_limit_w=dev.power_limit_w,
            sm_clock_mhz=int(sm_clock) if sm_clock is not None else None,
            memory_clock_mhz=int(mem_clock) if mem_clock is not None else None,
            pcie_rx_bytes_per_s=rx,
            pcie_tx_bytes_per_s=tx,
            sm_occupancy_percent=occupancy,
            tensor_active_percent=tensor,
            processes=processes or (),
            processes_known=processes is not None,
            mig_enabled=dev.mig_enabled,
            mig_instances=instances,
        )

    def _pcie_and_gpm(
        self, dev: _Device
    ) -> tuple[float | None, float | None, float | None, float | None]:
        """PCIe rx/tx from the cheapest source the device has, then SM occupancy and tensor.

        Byte counters first; else GPM's PCIe metrics in the request GPM makes anyway;
        else the slow throughput call, spread over ticks.
        """
        rx, tx = self._pcie_counters(dev)
        gpm_pcie = "pcie_counters" in dev.unsupported and self._gpm_gives_pcie(dev)
        ids = list(self._gpm_ids[:4] if gpm_pcie else self._gpm_ids[:2])
        gpm = self._gpm_metrics(dev, ids)
        if gpm_pcie:
            rx, tx = _rate(gpm[2], MIB), _rate(gpm[3], MIB)
        if "pcie_counters" in dev.unsupported and not self._gpm_gives_pcie(dev):
            rx, tx = self._pcie_throughput(dev)
        return rx, tx, _percent(gpm[0]), _percent(gpm[1])

    def _pcie_counters(self, dev: _Device) -> tuple[float | None, float | None]:
        """PCIe rx/tx bytes per second from the driver's byte counters, in one call."""
        if "pcie_counters" in dev.unsupported:
            return None, None
        values = self._call(dev, "pcie_counters", "nvmlDeviceGetFieldValues", dev.handle,
                            list(self._pcie_fields))
        now = self._clock()
        if values is None:
            return None, None
        counts: dict[int, int | None] = {}
        for value in values:
            code = int(value.nvmlReturn)
            if code in self._permanent:
                dev.unsupported.add("pcie_counters")
                return None, None
            counts[int(value.fieldId)] = self._counter(value) if code == self._success else None
        rx, tx = (self._counter_rate(dev, i, counts.get(i), now) for i in self._pcie_fields)
        return rx, tx

    def _counter(self, value: Any) -> int | None:
        """A field value as a byte count, or None for an unexpected type or a marker."""
        member = self._counter_members.get(int(value.valueType))
        if member is None:
            return None
        count = int(getattr(value.value, member))
        return count if 0 <= count < NOT_AVAILABLE_ULL else None

    def _counter_rate(
        self, dev: _Device, field_id: int, count: int | None, now: float
    ) -> float | None:
        """Bytes per second since the last reading; None first, and where it went backwards."""
        if count is None:
            return None
        previous = dev.pcie_counts.get(field_id)
        dev.pcie_counts[field_id] = (count, now)
        if previous is None or count < previous[0] or now <= previous[1]:
            return None
        return (count - previous[0]) / (now - previous[1])

    def _gpm_gives_pcie(self, dev: _Device) -> bool:
        return dev.gpm is not None and not {"gpm", "gpm_pcie"} & dev.unsupported

    def _pcie_throughput(self, dev: _Device) -> tuple[float | None, float | None]:
        """Last resort: each call samples for ~20 ms, so it is spread over ticks."""
        nv = self._nv
        directions = (
            ("pcie_rx", getattr(nv, "NVML_PCIE_UTIL_RX_BYTES", 1)),
            ("pcie_tx", getattr(nv, "NVML_PCIE_UTIL_TX_BYTES", 0)),
        )
        # One direction per device every Nth tick, devices staggered: a value is up to 2N ticks old.
        due = (self._ticks + dev.index) % PCIE_THROUGHPUT_EVERY == 0
        for turn, (key, counter) in enumerate(directions):
            if key not in dev.pcie_kept or (due and dev.pcie_turn == turn):
                kb = self._call(dev, key, "nvmlDeviceGetPcieThroughput", dev.handle, counter)
                dev.pcie_kept[key] = float(kb * PCIE_KB) if kb is not None else None
        if due:
            dev.pcie_turn = 1 - dev.pcie_turn
        return dev.pcie_kept["pcie_rx"], dev.pcie_kept["pcie_tx"]

    def _memory(self, dev: _Device, mig: _Mig | None = None) -> Any:
        """v2 memory info (its `used` leaves out driver-reserved memory) where present, else v1.

        Of the MIG device `mig` where given (its own keys: one refusal does not stop the GPU's).
        """
        handle, prefix = (dev.handle, "") if mig is None else (mig.handle, "mig_")
        if prefix + "memory_v2" not in dev.unsupported:
            memory = self._call(dev, prefix + "memory_v2", "nvmlDeviceGetMemoryInfo", handle,
                                version=self._memory_v2)
            if memory is not None or prefix + "memory_v2" not in dev.unsupported:
                return memory
        return self._call(dev, prefix + "memory", "nvmlDeviceGetMemoryInfo", handle)

    def _processes(
        self, dev: _Device, mig: _Mig | None = None, sm_util: dict[int, float] | None = None
    ) -> tuple[GpuProcess, ...] | None:
        """Compute processes with their GPU memory, newest API first, SM util joined in.

        Of the MIG device `mig` where given, each on its instance (`sm_util`: the GPU's, read
        once for all its MIG devices). None when NVML refused every query: the process list is
        unknown, not empty.
        """
        handle, prefix = (dev.handle, "") if mig is None else (mig.handle, "mig_")
        infos = None
        for key, function in (
            ("processes_v3", "nvmlDeviceGetComputeRunningProcesses_v3"),
            ("processes_v2", "nvmlDeviceGetComputeRunningProcesses_v2"),
            ("processes", "nvmlDeviceGetComputeRunningProcesses"),
        ):
            infos = self._call(dev, prefix + key, function, handle)
            if infos is not None or prefix + key not in dev.unsupported:
                break
        if infos is None:
            return None
        if not infos:
            return ()
        memory: dict[int, int | None] = {}
        instance: dict[int, tuple[int | None, int | None]] = {}
        for info in infos:
            pid = int(info.pid)
            used = _bytes_or_none(info.usedGpuMemory)
            if pid in memory:
                previous = memory[pid]
                used = previous if used is None else used + (previous or 0)
            memory[pid] = used
            instance.setdefault(pid, _instance_of(info, mig))
        if sm_util is None:
            sm_util = self._process_util(dev)
        return tuple(
            GpuProcess(pid=pid, memory_used_bytes=used, sm_util_percent=sm_util.get(pid),
                       gpu_instance_id=instance[pid][0], compute_instance_id=instance[pid][1])
            for pid, used in memory.items()
        )

    def _mig_mode(self, dev: _Device) -> bool | None:
        """Whether MIG mode is on (it changes only with a reset); None where the GPU has no MIG."""
        mode = self._call(dev, "mig_mode", "nvmlDeviceGetMigMode", dev.handle)
        if mode is None:
            return None
        return int(mode[0]) == getattr(self._nv, "NVML_DEVICE_MIG_ENABLE", 1)

    def _list_migs(self, dev: _Device) -> tuple[_Mig, ...]:
        """The GPU's MIG devices now: each index up to the most it can have (empty ones skipped)."""
        count = self._call(dev, "mig_count", "nvmlDeviceGetMaxMigDeviceCount", dev.handle)
        migs = []
        for index in range(int(count or 0)):
            handle = self._call(dev, "mig_handle", "nvmlDeviceGetMigDeviceHandleByIndex",
                                dev.handle, index)
            if handle is None:
                continue
            gi = self._call(dev, "mig_gi", "nvmlDeviceGetGpuInstanceId", handle)
            ci = self._call(dev, "mig_ci", "nvmlDeviceGetComputeInstanceId", handle)
            uuid = self._call(dev, "mig_uuid", "nvmlDeviceGetUUID", handle)
            name = self._call(dev, "mig_name", "nvmlDeviceGetName", handle)
            migs.append(_Mig(handle, _id_or_none(gi), _id_or_none(ci),
                             _text(uuid) if uuid is not None else "n/a", _profile(name)))
        return tuple(migs)

    def _read_migs(
        self, dev: _Device
    ) -> tuple[tuple[MigInstance, ...], tuple[GpuProcess, ...] | None]:
        """Each MIG device's memory and util, and the GPU's processes read from them.

        The processes come from the MIG devices, which answer without the privileges the GPU's
        own aggregate list needs; None when every one refused.
        """
        instances = []
        processes: list[GpuProcess] = []
        known = not dev.migs
        sm_util = self._process_util(dev) if dev.migs else {}
        for mig in dev.migs:
            memory = self._memory(dev, mig)
            util = self._call(dev, "mig_util", "nvmlDeviceGetUtilizationRates", mig.handle)
            instances.append(MigInstance(
                gpu_instance_id=mig.gpu_instance_id, compute_instance_id=mig.compute_instance_id,
                uuid=mig.uuid, profile=mig.profile,
                memory_used_bytes=int(memory.used) if memory is not None else None,
                memory_total_bytes=int(memory.total) if memory is not None else None,
                util_percent=_percent(util.gpu) if util is not None else None,
            ))
            on_it = self._processes(dev, mig, sm_util)
            if on_it is not None:
                known = True
                processes.extend(on_it)
        return tuple(instances), tuple(processes) if known else None

    def _process_util(self, dev: _Device) -> dict[int, float]:
        """SM util per PID from the driver's samples newer than the last one seen."""
        samples = self._call(dev, "process_util", "nvmlDeviceGetProcessUtilization",
                             dev.handle, dev.process_util_seen)
        latest: dict[int, tuple[int, float]] = {}
        for s in samples or ():
            stamp, util = int(s.timeStamp), _percent(s.smUtil)
            dev.process_util_seen = max(dev.process_util_seen, stamp)
            if util is not None and stamp >= latest.get(int(s.pid), (-1, 0.0))[0]:
                latest[int(s.pid)] = (stamp, util)
        return {pid: util for pid, (_, util) in latest.items()}

    def _open_gpm(self, dev: _Device) -> _Gpm | None:
        """Two GPM buffers on a device that supports GPM (Hopper and later), else None."""
        support = self._call(dev, "gpm", "nvmlGpmQueryDeviceSupport", dev.handle)
        if support is None or not support.isSupportedDevice:
            return None
        buffers = [self._call(dev, "gpm", "nvmlGpmSampleAlloc") for _ in range(2)]
        gpm = _Gpm([b for b in buffers if b is not None])
        if len(gpm.buffers) < 2:
            self._free_gpm(gpm)
            return None
        return gpm

    def _gpm_metrics(self, dev: _Device, ids: list[int]) -> list[float | None]:
        """GPM metrics `ids` between the previous tick's GPM sample and this one."""
        gpm = dev.gpm
        result: list[float | None] = [None] * len(ids)
        if gpm is None:
            return result
        current = gpm.buffers[gpm.current]
        if self._call(dev, "gpm", "nvmlGpmSampleGet", dev.handle, current) is None:
            gpm.have_previous = False
            if "gpm" in dev.unsupported:
                self._close_gpm(dev)
            return result
        if gpm.have_previous:
            result = self._gpm_between(dev, ids, gpm.buffers[1 - gpm.current], current)
        gpm.have_previous = True
        gpm.current = 1 - gpm.current
        if "gpm" in dev.unsupported:
            self._close_gpm(dev)
        return result

    def _gpm_between(
        self, dev: _Device, ids: list[int], first: Any, second: Any
    ) -> list[float | None]:
        nv = self._nv
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(ids)
        request.sample1 = first
        request.sample2 = second
        for i, metric_id in enumerate(ids):
            request.metrics[i].metricId = metric_id
        got = self._call(dev, "gpm", "nvmlGpmMetricsGet", request)
        if got is None:
            return [None] * len(ids)
        metrics = [got.metrics[i] for i in range(len(ids))]
        if any(m.metricId in self._gpm_ids[2:] and m.nvmlReturn in self._permanent
               for m in metrics):
            dev.unsupported.add("gpm_pcie")
        return [float(m.value) if m.nvmlReturn == nv.NVML_SUCCESS else None for m in metrics]

    def _close_gpm(self, dev: _Device) -> None:
        if dev.gpm is not None:
            self._free_gpm(dev.gpm)
            dev.gpm = None

    def _free_gpm(self, gpm: _Gpm) -> None:
        free = getattr(self._nv, "nvmlGpmSampleFree", None)
        for buffer in gpm.buffers:
            with contextlib.suppress(Exception):
                if free is not None:
                    free(buffer)
        gpm.buffers = []

    def close(self) -> None:
        """Free GPM buffers and shut NVML down; later samples report no GPU data."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for dev in self._devices:
                self._close_gpm(dev)
            _shutdown(self._nv)


def _percent(value: Any) -> float | None:
    """A 0..100 reading, or None for NVML's not-available markers and other nonsense."""
    if value is None:
        return None
    number = float(value)
    return number if 0.0 <= number <= 100.0 else None


def _rate(value: float | None, unit: int) -> float | None:
    """A non-negative per-second reading in bytes, or None."""
    if value is None or not math.isfinite(value) or value < 0:
        return None
    return value * unit


def _id_or_none(value: Any) -> int | None:
    """A GPU or compute instance id, or None for the no-instance marker."""
    if value is None or not 0 <= int(value) < NO_INSTANCE:
        return None
    return int(value)


def _instance_of(info: Any, mig: _Mig | None) -> tuple[int | None, int | None]:
    """The (GPU, compute) instance a process record names; else that of the MIG device asked."""
    gi = _id_or_none(getattr(info, "gpuInstanceId", None))
    ci = _id_or_none(getattr(info, "computeInstanceId", None))
    if gi is None and mig is not None:
        return mig.gpu_instance_id, mig.compute_instance_id
    return gi, ci


def _profile(name: Any) -> str:
    """The profile in a MIG device's name ("NVIDIA A100-SXM4-40GB MIG 1g.5gb" -> "1g.5gb")."""
    if name is None:
        return "n/a"
    text = _text(name)
    if " MIG " not in text:
        return text
    return text.split(" MIG ", 1)[1].strip() or "n/a"


def _bytes_or_none(value: Any) -> int | None:
    if value is None or int(value) >= NOT_AVAILABLE_ULL:
        return None
    return int(value)


def _lost_sample(dev: _Device) -> GpuSample:
    """A lost device keeps its identity; everything measured is unknown."""
    return GpuSample(
        index=dev.index, name=dev.name, uuid=dev.uuid, util_percent=None,
        memory_util_percent=None, memory_used_bytes=None, memory_total_bytes=dev.memory_total,
        temperature_c=None, power_w=None, power_limit_w=dev.power_limit_w, sm_clock_mhz=None,
        memory_clock_mhz=None, pcie_rx_bytes_per_s=None, pcie_tx_bytes_per_s=None, lost=True,
        processes_known=False,
    )
