"""A stand-in for nvidia-ml-py's `pynvml`, kept only for what the C NVML cannot play.

Every GPU row and NVML error runs through the real nvidia-ml-py over the C library in
tests/nvml_c (tests/sources/test_nvml_c.py). This module remains for a *binding* unlike the
installed one: one that lacks a function or `nvmlMemory_v2`, or an older one that hands back
NVML's raw not-available marker (tests/sources/test_nvml.py), and for the in-process escape
test in tests/sources/test_escape_injection.py.

The names, constants, error classes and signatures that gputop uses mirror the real module
(tests/sources/test_nvml.py checks that against the installed nvidia-ml-py); everything that is not
in the real module starts with `Fake` or `fake_`.
"""

from __future__ import annotations

import ctypes
import string
import sys
from collections import Counter
from ctypes import (
    POINTER,
    Structure,
    Union,
    c_char_p,
    c_double,
    c_int,
    c_int64,
    c_longlong,
    c_uint,
    c_uint32,
    c_ulong,
    c_ulonglong,
    c_ushort,
    c_void_p,
)
from dataclasses import dataclass, field
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_VALUE_NOT_AVAILABLE_ulonglong = c_ulonglong(-1)
NVML_VALUE_NOT_AVAILABLE_uint = c_uint(-1)
NVML_GPM_METRIC_SM_OCCUPANCY = 3
NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
NVML_GPM_METRIC_PCIE_TX_PER_SEC = 20
NVML_GPM_METRIC_PCIE_RX_PER_SEC = 21
NVML_GPM_METRIC_MAX = 477
NVML_GPM_METRICS_GET_VERSION = 1
NVML_GPM_SUPPORT_VERSION = 1
NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG = 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4
NVML_VALUE_TYPE_SIGNED_INT = 5
NVML_VALUE_TYPE_UNSIGNED_SHORT = 6
NVML_FI_DEV_PCIE_COUNT_TX_BYTES = 197
NVML_FI_DEV_PCIE_COUNT_RX_BYTES = 198


class NVMLLibraryMismatchError(Exception):
    """Raised by the real module's unversioned wrappers when library and bindings differ."""


class NVMLError(Exception):
    """Base of the per-code subclasses; `NVMLError(code)` builds the matching subclass."""

    _valClassMapping: dict[int, type[NVMLError]] = {}
    value: int

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return f"NVML error {self.value}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    __hash__ = Exception.__hash__


def _add_error_classes() -> None:
    """NVML_ERROR_GPU_IS_LOST becomes NVMLError_GpuIsLost, as the real module does."""
    module = sys.modules[__name__]
    for name in [n for n in dir(module) if n.startswith("NVML_ERROR_")]:
        words = name.removeprefix("NVML_ERROR_")
        class_name = "NVMLError_" + string.capwords(words, "_").replace("_", "")
        code = getattr(module, name)

        def new(cls: type[NVMLError], *args: Any, _code: int = code) -> NVMLError:
            return NVMLError.__new__(cls, _code)

        cls = type(class_name, (NVMLError,), {"__new__": new})
        cls.__module__ = __name__
        setattr(module, class_name, cls)
        NVMLError._valClassMapping[code] = cls


_add_error_classes()


class c_nvmlMemory_t(Structure):
    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class c_nvmlMemory_v2_t(Structure):
    _fields_ = [
        ("version", c_uint),
        ("total", c_ulonglong),
        ("reserved", c_ulonglong),
        ("free", c_ulonglong),
        ("used", c_ulonglong),
    ]


nvmlMemory_v2 = 0x02000028


class c_nvmlUtilization_t(Structure):
    _fields_ = [("gpu", c_uint), ("memory", c_uint)]


class c_nvmlProcessUtilizationSample_t(Structure):
    _fields_ = [
        ("pid", c_uint),
        ("timeStamp", c_ulonglong),
        ("smUtil", c_uint),
        ("memUtil", c_uint),
        ("encUtil", c_uint),
        ("decUtil", c_uint),
    ]


class c_nvmlGpmSupport_t(Structure):
    _fields_ = [("version", c_uint), ("isSupportedDevice", c_uint)]


class struct_c_nvmlGpmSample_t(Structure):
    pass


c_nvmlGpmSample_t = POINTER(struct_c_nvmlGpmSample_t)


class c_metricInfo_t(Structure):
    _fields_ = [("shortName", c_char_p), ("longName", c_char_p), ("unit", c_char_p)]


class c_nvmlGpmMetric_t(Structure):
    _fields_ = [
        ("metricId", c_uint),
        ("nvmlReturn", c_uint),
        ("value", c_double),
        ("metricInfo", c_metricInfo_t),
    ]


class c_nvmlGpmMetricsGet_t(Structure):
    _fields_ = [
        ("version", c_uint),
        ("numMetrics", c_uint),
        ("sample1", c_nvmlGpmSample_t),
        ("sample2", c_nvmlGpmSample_t),
        ("metrics", c_nvmlGpmMetric_t * NVML_GPM_METRIC_MAX),
    ]


class c_nvmlValue_t(Union):
    _fields_ = [
        ("dVal", c_double),
        ("uiVal", c_uint),
        ("ulVal", c_ulong),
        ("ullVal", c_ulonglong),
        ("sllVal", c_longlong),
        ("siVal", c_int),
        ("usVal", c_ushort),
    ]


class c_nvmlFieldValue_t(Structure):
    _fields_ = [
        ("fieldId", c_uint32),
        ("scopeId", c_uint32),
        ("timestamp", c_int64),
        ("latencyUsec", c_int64),
        ("valueType", c_uint),
        ("nvmlReturn", c_uint),
        ("value", c_nvmlValue_t),
    ]


class nvmlFriendlyObject:
    """Attribute bag the real module returns for process records."""

    def __init__(self, dictionary: dict[str, Any]) -> None:
        for key, value in dictionary.items():
            setattr(self, key, value)


# ---------------------------------------------------------------- the fake driver


@dataclass
class FakeDevice:
    """One simulated card; `errors` maps an NVML function name to the error code it raises."""

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    util: int = 50
    memory_util: int = 20
    memory_total: int = 80 * 2**30
    memory_used: int = 10 * 2**30
    memory_reserved: int = 512 * 2**20
    temperature: int = 55
    power_mw: int = 300_000
    power_limit_mw: int = 700_000
    sm_clock: int = 1980
    memory_clock: int = 2619
    pcie_rx_kb: int = 1000
    pcie_tx_kb: int = 500
    # PCIe byte counters (field values 198/197); None: the driver refuses the field.
    pcie_rx_bytes: int | None = None
    pcie_tx_bytes: int | None = None
    field_errors: dict[int, int] = field(default_factory=dict)
    field_types: dict[int, int] = field(default_factory=dict)
    processes: list[tuple[int, int | None]] = field(default_factory=list)
    process_util: list[tuple[int, int, int]] = field(default_factory=list)
    gpm_supported: bool = False
    gpm_values: dict[int, float] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)
    gpm_ticks: int = 0


@dataclass
class FakeDriver:
    """The whole fake machine: devices, and how nvmlInit and the library behave."""

    devices: list[FakeDevice] = field(default_factory=list)
    init_error: int | None = None
    driver_version: str = "580.65.06"
    missing: set[str] = field(default_factory=set)
    init_count: int = 0
    calls: Counter[str] = field(default_factory=Counter)
    gpm_buffers: dict[int, Any] = field(default_factory=dict)
    gpm_readings: dict[int, tuple[int, int]] = field(default_factory=dict)


fake_driver = FakeDriver()


def fake_install(driver: FakeDriver) -> FakeDriver:
    """Make `driver` the machine every call talks to."""
    global fake_driver
    fake_driver = driver
    return driver


class _Handle:
    def __init__(self, index: int) -> None:
        self.index = index


def _enter(function: str, handle: _Handle | None = None) -> FakeDevice | None:
    """Count the call, then fail the way the fake driver is set up to."""
    fake_driver.calls[function] += 1
    if function in fake_driver.missing:
        raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
    if fake_driver.init_count == 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    if handle is None:
        return None
    device = fake_driver.devices[handle.index]
    device.calls[function] += 1
    if function in device.errors:
        raise NVMLError(device.errors[function])
    return device


def nvmlInit() -> None:
    """Like the real library, init and shutdown nest: each init needs its own shutdown."""
    fake_driver.calls["nvmlInit"] += 1
    if fake_driver.init_error is not None:
        raise NVMLError(fake_driver.init_error)
    fake_driver.init_count += 1


def nvmlShutdown() -> None:
    _enter("nvmlShutdown")
    fake_driver.init_count -= 1


def nvmlSystemGetDriverVersion() -> str:
    _enter("nvmlSystemGetDriverVersion")
    return fake_driver.driver_version


def nvmlDeviceGetCount() -> int:
    _enter("nvmlDeviceGetCount")
    return len(fake_driver.devices)


def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
    _enter("nvmlDeviceGetHandleByIndex")
    if not 0 <= index < len(fake_driver.devices):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    device = fake_driver.devices[index]
    if "nvmlDeviceGetHandleByIndex" in device.errors:
        raise NVMLError(device.errors["nvmlDeviceGetHandleByIndex"])
    return _Handle(index)


def _device(function: str, handle: _Handle) -> FakeDevice:
    device = _enter(function, handle)
    assert device is not None
    return device


def nvmlDeviceGetName(handle: _Handle) -> str:
    return _device("nvmlDeviceGetName", handle).name


def nvmlDeviceGetUUID(handle: _Handle) -> str:
    return _device("nvmlDeviceGetUUID", handle).uuid


def nvmlDeviceGetUtilizationRates(handle: _Handle) -> c_nvmlUtilization_t:
    device = _device("nvmlDeviceGetUtilizationRates", handle)
    return c_nvmlUtilization_t(device.util, device.memory_util)


def nvmlDeviceGetMemoryInfo(handle: _Handle, version: int | None = None) -> Any:
    if not version:
        device = _device("nvmlDeviceGetMemoryInfo", handle)
        free = device.memory_total - device.memory_used - device.memory_reserved
        used = device.memory_used + device.memory_reserved
        return c_nvmlMemory_t(device.memory_total, free, used)
    device = _device("nvmlDeviceGetMemoryInfo_v2", handle)
    free = device.memory_total - device.memory_used - device.memory_reserved
    return c_nvmlMemory_v2_t(
        version, device.memory_total, device.memory_reserved, free, device.memory_used
    )


def nvmlDeviceGetTemperature(handle: _Handle, sensor: int) -> int:
    return _device("nvmlDeviceGetTemperature", handle).temperature


def nvmlDeviceGetPowerUsage(handle: _Handle) -> int:
    return _device("nvmlDeviceGetPowerUsage", handle).power_mw


def nvmlDeviceGetEnforcedPowerLimit(handle: _Handle) -> int:
    return _device("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw


def nvmlDeviceGetClockInfo(handle: _Handle, type: int) -> int:
    device = _device("nvmlDeviceGetClockInfo", handle)
    return device.sm_clock if type == NVML_CLOCK_SM else device.memory_clock


def nvmlDeviceGetPcieThroughput(device: _Handle, counter: int) -> int:
    fake = _device("nvmlDeviceGetPcieThroughput", device)
    return fake.pcie_rx_kb if counter == NVML_PCIE_UTIL_RX_BYTES else fake.pcie_tx_kb


def nvmlDeviceGetFieldValues(handle: _Handle, fieldIds: list[Any]) -> Any:
    """One call for many fields; each entry has its own nvmlReturn, as in the real library."""
    device = _device("nvmlDeviceGetFieldValues", handle)
    values = (c_nvmlFieldValue_t * len(fieldIds))()
    counters = {
        NVML_FI_DEV_PCIE_COUNT_RX_BYTES: device.pcie_rx_bytes,
        NVML_FI_DEV_PCIE_COUNT_TX_BYTES: device.pcie_tx_bytes,
    }
    for value, field_id in zip(values, fieldIds, strict=True):
        value.fieldId = field_id
        reading = counters.get(field_id)
        value.nvmlReturn = device.field_errors.get(
            field_id, NVML_ERROR_NOT_SUPPORTED if reading is None else NVML_SUCCESS
        )
        value.valueType = device.field_types.get(field_id, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG)
        if value.nvmlReturn == NVML_SUCCESS and reading is not None:
            value.value.ullVal = reading
    return values


def _process_records(function: str, handle: _Handle) -> list[nvmlFriendlyObject]:
    device = _device(function, handle)
    records = []
    for pid, used in device.processes:
        # The real module turns the driver's not-available marker into None, as here.
        record = {"pid": pid, "usedGpuMemory": used, "gpuInstanceId": 0, "computeInstanceId": 0}
        records.append(nvmlFriendlyObject(record))
    return records


def nvmlDeviceGetComputeRunningProcesses_v3(handle: _Handle) -> list[nvmlFriendlyObject]:
    return _process_records("nvmlDeviceGetComputeRunningProcesses_v3", handle)


def nvmlDeviceGetComputeRunningProcesses_v2(handle: _Handle) -> list[nvmlFriendlyObject]:
    return _process_records("nvmlDeviceGetComputeRunningProcesses_v2", handle)


def nvmlDeviceGetComputeRunningProcesses(handle: _Handle) -> list[nvmlFriendlyObject]:
    return _process_records("nvmlDeviceGetComputeRunningProcesses", handle)


def nvmlDeviceGetProcessUtilization(
    handle: _Handle, timeStamp: int
) -> list[c_nvmlProcessUtilizationSample_t]:
    device = _device("nvmlDeviceGetProcessUtilization", handle)
    newer = [s for s in device.process_util if s[1] > timeStamp]
    if not newer:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return [c_nvmlProcessUtilizationSample_t(pid, stamp, sm, 0, 0, 0) for pid, stamp, sm in newer]


def nvmlGpmQueryDeviceSupport(device: _Handle) -> c_nvmlGpmSupport_t:
    fake = _device("nvmlGpmQueryDeviceSupport", device)
    return c_nvmlGpmSupport_t(NVML_GPM_SUPPORT_VERSION, int(fake.gpm_supported))


def _address(sample: Any) -> int:
    return ctypes.cast(sample, c_void_p).value or 0


def nvmlGpmSampleAlloc() -> Any:
    _enter("nvmlGpmSampleAlloc")
    buffer = ctypes.create_string_buffer(16)
    sample = ctypes.cast(buffer, c_nvmlGpmSample_t)
    fake_driver.gpm_buffers[_address(sample)] = buffer
    return sample


def nvmlGpmSampleFree(gpmSample: Any) -> None:
    _enter("nvmlGpmSampleFree")
    if fake_driver.gpm_buffers.pop(_address(gpmSample), None) is None:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)


def nvmlGpmSampleGet(device: _Handle, gpmSample: Any) -> Any:
    fake = _device("nvmlGpmSampleGet", device)
    address = _address(gpmSample)
    if address not in fake_driver.gpm_buffers:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    fake.gpm_ticks += 1
    fake_driver.gpm_readings[address] = (device.index, fake.gpm_ticks)
    return gpmSample


def nvmlGpmMetricsGet(metricsGet: Any) -> Any:
    _enter("nvmlGpmMetricsGet")
    first = fake_driver.gpm_readings.get(_address(metricsGet.sample1))
    second = fake_driver.gpm_readings.get(_address(metricsGet.sample2))
    if first is None or second is None or first[0] != second[0] or first[1] >= second[1]:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    device = fake_driver.devices[first[0]]
    for i in range(metricsGet.numMetrics):
        metric = metricsGet.metrics[i]
        if metric.metricId in device.gpm_values:
            metric.nvmlReturn = NVML_SUCCESS
            metric.value = device.gpm_values[metric.metricId]
        else:
            metric.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
    return metricsGet


# MIG is played by the C NVML (tests/nvml_c) only: here every GPU is one without MIG.
NVML_DEVICE_MIG_ENABLE = 1


def nvmlDeviceGetMigMode(device: _Handle) -> list[int]:
    _device("nvmlDeviceGetMigMode", device)
    raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


def nvmlDeviceGetMaxMigDeviceCount(device: _Handle) -> int:
    _device("nvmlDeviceGetMaxMigDeviceCount", device)
    return 0


def nvmlDeviceGetMigDeviceHandleByIndex(device: _Handle, index: int) -> _Handle:
    _device("nvmlDeviceGetMigDeviceHandleByIndex", device)
    raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


def nvmlDeviceGetGpuInstanceId(device: _Handle) -> int:
    _device("nvmlDeviceGetGpuInstanceId", device)
    raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)


def nvmlDeviceGetComputeInstanceId(device: _Handle) -> int:
    _device("nvmlDeviceGetComputeInstanceId", device)
    raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)


def nvmlDeviceGetMinorNumber(handle: _Handle) -> int:
    """The N of /dev/nvidiaN: the device's index here (the C NVML takes a scenario's)."""
    _device("nvmlDeviceGetMinorNumber", handle)
    return int(handle.index)
