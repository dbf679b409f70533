"""The NVML source against a stand-in pynvml (error paths) and the real one (no driver here)."""

from __future__ import annotations

import ctypes.util
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
from dataclasses import replace as dataclass_replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gputop.core.model import GpuReport
from gputop.sources import nvml as nvml_source
from gputop.sources.gpu import open_gpu_source
from gputop.sources.nvml import (
    LOST_AFTER_UNKNOWN_TICKS,
    PCIE_THROUGHPUT_EVERY,
    NoGpuSource,
    NvmlSource,
)
from tests.helpers.modules import load_file
from tests.helpers.nvml import load_stand_in, open_source

MIB = 1 << 20


def device(nv: ModuleType, **fields: Any) -> Any:
    return nv.FakeDevice(**fields)


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def open_clocked(clock: Clock) -> NvmlSource:
    source = nvml_source.open_nvml(clock=clock)
    assert isinstance(source, NvmlSource), source.sample().note
    return source


def pcie(source: NvmlSource) -> list[tuple[float | None, float | None]]:
    return [(g.pcie_rx_bytes_per_s, g.pcie_tx_bytes_per_s) for g in source.sample().gpus]


# ------------------------------------------------------------------ no NVML at all


@pytest.mark.parametrize(
    ("code", "words"),
    [
        ("NVML_ERROR_LIBRARY_NOT_FOUND", "libnvidia-ml"),
        ("NVML_ERROR_DRIVER_NOT_LOADED", "driver not loaded"),
        ("NVML_ERROR_LIB_RM_VERSION_MISMATCH", "versions differ"),
        ("NVML_ERROR_UNKNOWN", "NVML failed to start"),
    ],
)
def test_init_failure_gives_none_source_with_one_line(
    nv: ModuleType, code: str, words: str
) -> None:
    nv.fake_driver.init_error = getattr(nv, code)
    source = open_gpu_source()
    report = source.sample()
    assert isinstance(source, NoGpuSource)
    assert report.source == "none" and report.gpus == ()
    assert report.note is not None and "\n" not in report.note
    assert words in report.note
    assert source.sample() == report


def test_pynvml_not_importable_gives_none_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    report = open_gpu_source().sample()
    assert report.source == "none"
    assert report.note == "no GPU data: nvidia-ml-py (module pynvml) is not installed"


def test_no_devices_gives_none_source_and_shuts_nvml_down(nv: ModuleType) -> None:
    nv.fake_driver.devices = []
    report = open_gpu_source().sample()
    assert report.source == "none"
    assert report.note is not None and "found no GPUs" in report.note
    assert nv.fake_driver.calls["nvmlShutdown"] == 1


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None, reason="a real libnvidia-ml is present"
)
def test_real_pynvml_without_driver_gives_none_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    note = "no GPU data: NVIDIA driver library (libnvidia-ml) not found"
    if not nvml_source._driver_library_loads():  # no driver here: pynvml is not even imported
        assert open_gpu_source().sample() == GpuReport(source="none", note=note)
        assert "pynvml" not in sys.modules
    source = nvml_source.open_nvml(importlib.import_module("pynvml"))
    report = source.sample()
    source.close()
    assert type(sys.modules["pynvml"]).__name__ == "module"
    assert Path(sys.modules["pynvml"].__file__ or "").parent.name == "site-packages"
    assert report == GpuReport(source="none", note=note)


# ------------------------------------------------------------------ a healthy device


def test_healthy_device_fields_and_units(nv: ModuleType) -> None:
    nv.fake_driver.devices = [
        device(nv, processes=[(4242, 3000 * MIB)], process_util=[(4242, 10, 70)])
    ]
    source = open_source(nv)
    report = source.sample()
    assert report.source == "nvml" and report.driver_version == "580.65.06"
    (gpu,) = report.gpus
    assert (gpu.index, gpu.name, gpu.uuid) == (0, "NVIDIA H100 80GB HBM3", nv.FakeDevice().uuid)
    assert (gpu.util_percent, gpu.memory_util_percent) == (50.0, 20.0)
    # v2 memory: `used` leaves out the driver-reserved 512 MiB.
    assert (gpu.memory_used_bytes, gpu.memory_total_bytes) == (10 * 2**30, 80 * 2**30)
    assert (gpu.temperature_c, gpu.power_w, gpu.power_limit_w) == (55.0, 300.0, 700.0)
    assert (gpu.sm_clock_mhz, gpu.memory_clock_mhz) == (1980, 2619)
    assert (gpu.pcie_rx_bytes_per_s, gpu.pcie_tx_bytes_per_s) == (1000 * 1024.0, 500 * 1024.0)
    assert (gpu.sm_occupancy_percent, gpu.tensor_active_percent) == (None, None)
    assert [(p.pid, p.memory_used_bytes, p.sm_util_percent) for p in gpu.processes] == [
        (4242, 3000 * MIB, 70.0)
    ]
    assert gpu.lost is False
    source.close()


def test_pcie_throughput_kilobytes_become_bytes(nv: ModuleType) -> None:
    nv.fake_driver.devices = [device(nv, pcie_rx_kb=12_000_000, pcie_tx_kb=0)]
    (gpu,) = open_source(nv).sample().gpus
    assert gpu.pcie_rx_bytes_per_s == 12_000_000 * 1024
    assert gpu.pcie_tx_bytes_per_s == 0.0


def test_slow_fields_are_read_once(nv: ModuleType) -> None:
    source = open_source(nv)
    for _ in range(5):
        source.sample()
    calls = nv.fake_driver.devices[0].calls
    assert calls["nvmlDeviceGetName"] == calls["nvmlDeviceGetUUID"] == 1
    assert calls["nvmlDeviceGetEnforcedPowerLimit"] == 1
    assert nv.fake_driver.calls["nvmlSystemGetDriverVersion"] == 1
    assert calls["nvmlDeviceGetUtilizationRates"] == 5


def test_close_shuts_down_once_and_later_samples_say_so(nv: ModuleType) -> None:
    source = open_source(nv)
    source.close()
    source.close()
    assert nv.fake_driver.calls["nvmlShutdown"] == 1
    assert source.sample().source == "none"


# ------------------------------------------------------------------ fields NVML refuses


@pytest.mark.parametrize("code", ["NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION"])
def test_refused_field_is_none_and_not_asked_again(nv: ModuleType, code: str) -> None:
    nv.fake_driver.devices[0].errors["nvmlDeviceGetTemperature"] = getattr(nv, code)
    source = open_source(nv)
    reports = [source.sample() for _ in range(3)]
    assert [r.gpus[0].temperature_c for r in reports] == [None, None, None]
    assert [r.gpus[0].power_w for r in reports] == [300.0, 300.0, 300.0]
    assert nv.fake_driver.devices[0].calls["nvmlDeviceGetTemperature"] == 1
    assert nv.fake_driver.devices[0].calls["nvmlDeviceGetPowerUsage"] == 3


def test_passing_error_is_asked_again_next_tick(nv: ModuleType) -> None:
    fake = nv.fake_driver.devices[0]
    fake.errors["nvmlDeviceGetTemperature"] = nv.NVML_ERROR_TIMEOUT
    source = open_source(nv)
    assert source.sample().gpus[0].temperature_c is None
    del fake.errors["nvmlDeviceGetTemperature"]
    assert source.sample().gpus[0].temperature_c == 55.0
    assert fake.calls["nvmlDeviceGetTemperature"] == 2


def test_function_missing_from_the_library_is_remembered(nv: ModuleType) -> None:
    nv.fake_driver.missing.add("nvmlDeviceGetPcieThroughput")
    source = open_source(nv)
    for _ in range(3):
        gpu = source.sample().gpus[0]
    assert (gpu.pcie_rx_bytes_per_s, gpu.pcie_tx_bytes_per_s) == (None, None)
    assert nv.fake_driver.calls["nvmlDeviceGetPcieThroughput"] == 2  # rx once, tx once


def test_binding_without_a_function_is_remembered(
    nv: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(nv, "nvmlDeviceGetPowerUsage")
    gpu = open_source(nv).sample().gpus[0]
    assert gpu.power_w is None and gpu.util_percent == 50.0


# ------------------------------------------------------------------ PCIe throughput


def test_pcie_counters_give_bytes_per_second_in_one_call(nv: ModuleType) -> None:
    fake = device(nv, pcie_rx_bytes=1_000, pcie_tx_bytes=50)
    nv.fake_driver.devices = [fake]
    clock = Clock()
    source = open_clocked(clock)
    assert pcie(source) == [(None, None)]  # one reading is no rate
    fake.pcie_rx_bytes += 4_000_000
    fake.pcie_tx_bytes += 1_000_000
    clock.now += 0.5
    assert pcie(source) == [(8_000_000.0, 2_000_000.0)]
    clock.now += 2.0
    assert pcie(source) == [(0.0, 0.0)]
    assert fake.calls["nvmlDeviceGetFieldValues"] == 3
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 0


def test_pcie_counter_going_backwards_is_none_then_resumes(nv: ModuleType) -> None:
    fake = device(nv, pcie_rx_bytes=5_000_000, pcie_tx_bytes=0)
    nv.fake_driver.devices = [fake]
    clock = Clock()
    source = open_clocked(clock)
    source.sample()
    fake.pcie_rx_bytes = 1_000  # reset (or wrapped) between ticks
    clock.now += 1.0
    assert pcie(source) == [(None, 0.0)]
    fake.pcie_rx_bytes += 3_000
    clock.now += 1.0
    assert pcie(source) == [(3_000.0, 0.0)]
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 0


@pytest.mark.parametrize("how", ["timeout", "double-value"])
def test_pcie_counter_field_unreadable_for_a_tick(nv: ModuleType, how: str) -> None:
    rx_id = nv.NVML_FI_DEV_PCIE_COUNT_RX_BYTES
    fake = device(nv, pcie_rx_bytes=0, pcie_tx_bytes=0)
    nv.fake_driver.devices = [fake]
    clock = Clock()
    source = open_clocked(clock)
    source.sample()
    if how == "timeout":
        fake.field_errors[rx_id] = nv.NVML_ERROR_TIMEOUT
    else:
        fake.field_types[rx_id] = nv.NVML_VALUE_TYPE_DOUBLE
    fake.pcie_rx_bytes = fake.pcie_tx_bytes = 1_000
    clock.now += 1.0
    assert pcie(source) == [(None, 1_000.0)]
    fake.field_errors.clear()
    fake.field_types.clear()
    fake.pcie_rx_bytes = 3_000
    clock.now += 1.0
    assert pcie(source) == [(1_500.0, 0.0)]  # over both ticks, from the last good reading
    assert fake.calls["nvmlDeviceGetFieldValues"] == 3


@pytest.mark.parametrize("how", ["field-refused", "call-refused", "not-in-library", "binding"])
def test_counters_unavailable_fall_back_and_are_not_asked_again(
    nv: ModuleType, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    fake = device(nv, pcie_rx_bytes=0, pcie_tx_bytes=None)
    nv.fake_driver.devices = [fake]
    if how == "call-refused":
        fake.errors["nvmlDeviceGetFieldValues"] = nv.NVML_ERROR_NOT_SUPPORTED
    elif how == "not-in-library":
        nv.fake_driver.missing.add("nvmlDeviceGetFieldValues")
    elif how == "binding":
        monkeypatch.delattr(nv, "nvmlDeviceGetFieldValues")
    source = open_clocked(Clock())
    for _ in range(3):
        assert pcie(source) == [(1000 * 1024.0, 500 * 1024.0)]
    assert nv.fake_driver.calls["nvmlDeviceGetFieldValues"] == (0 if how == "binding" else 1)


def test_unsupported_counters_use_gpm_pcie_in_the_same_request(nv: ModuleType) -> None:
    values = {
        nv.NVML_GPM_METRIC_SM_OCCUPANCY: 40.0,
        nv.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 3.0,
        nv.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 1.5,
    }
    fake = device(nv, gpm_supported=True, gpm_values=values)
    nv.fake_driver.devices = [fake]
    source = open_clocked(Clock())
    first, second, third = (source.sample().gpus[0] for _ in range(3))
    assert (first.pcie_rx_bytes_per_s, first.pcie_tx_bytes_per_s) == (None, None)
    for gpu in (second, third):
        assert (gpu.pcie_rx_bytes_per_s, gpu.pcie_tx_bytes_per_s) == (3.0 * MIB, 1.5 * MIB)
        assert gpu.sm_occupancy_percent == 40.0
    assert fake.calls["nvmlDeviceGetFieldValues"] == 1  # unsupported: remembered
    assert nv.fake_driver.calls["nvmlGpmMetricsGet"] == 2  # one request a tick, as before
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 0


def test_gpm_without_pcie_metrics_falls_back_to_throughput(nv: ModuleType) -> None:
    values = {nv.NVML_GPM_METRIC_SM_OCCUPANCY: 40.0}
    fake = device(nv, gpm_supported=True, gpm_values=values)
    nv.fake_driver.devices = [fake]
    source = open_clocked(Clock())
    assert pcie(source) == [(None, None)]  # GPM's first tick: not known yet
    for _ in range(3):
        assert pcie(source) == [(1000 * 1024.0, 500 * 1024.0)]
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 2  # both once, then not due yet


def test_throughput_fallback_is_one_direction_every_nth_tick(
    nv: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = device(nv)
    nv.fake_driver.devices = [fake]
    source = open_clocked(Clock())
    asked: list[tuple[int, str]] = []
    seen: list[float | None] = []
    real = nv.nvmlDeviceGetPcieThroughput

    def throughput(device: Any, counter: int) -> int:
        tick = len(seen)
        asked.append((tick, "rx" if counter == nv.NVML_PCIE_UTIL_RX_BYTES else "tx"))
        return int(real(device, counter))

    monkeypatch.setattr(nv, "nvmlDeviceGetPcieThroughput", throughput)
    n = PCIE_THROUGHPUT_EVERY
    for _ in range(4 * n):
        seen.append(pcie(source)[0][0])
        fake.pcie_rx_kb += 1
    assert asked == [(0, "rx"), (0, "tx"), (n, "tx"), (2 * n, "rx"), (3 * n, "tx")]
    # The last value is kept between reads: rx read at tick 0 (kb 1000) and 2n (kb 1000 + 2n).
    assert seen == [1000 * 1024.0] * (2 * n) + [(1000 + 2 * n) * 1024.0] * (2 * n)
    assert fake.calls["nvmlDeviceGetFieldValues"] == 1


def test_throughput_fallback_is_spread_over_devices(
    nv: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    nv.fake_driver.devices = [device(nv, uuid=f"GPU-{i}") for i in range(8)]
    source = open_clocked(Clock())
    per_tick = []
    for _ in range(4 * PCIE_THROUGHPUT_EVERY):
        before = nv.fake_driver.calls["nvmlDeviceGetPcieThroughput"]
        assert None not in [v for pair in pcie(source) for v in pair]
        per_tick.append(nv.fake_driver.calls["nvmlDeviceGetPcieThroughput"] - before)
    assert per_tick[0] == 16  # every device, both directions, once
    assert max(per_tick[1:]) == 2  # ceil(8 / N) devices a tick, one direction each


def test_counters_on_eight_gpus_cost_one_call_each_per_tick(nv: ModuleType) -> None:
    processes = [(10_000 + i, MIB) for i in range(75)]
    nv.fake_driver.devices = [
        device(nv, uuid=f"GPU-{i}", pcie_rx_bytes=0, pcie_tx_bytes=0, processes=processes)
        for i in range(8)
    ]
    source = open_clocked(Clock())
    for _ in range(3):
        report = source.sample()
    assert sum(len(g.processes) for g in report.gpus) == 600
    assert nv.fake_driver.calls["nvmlDeviceGetFieldValues"] == 3 * 8
    assert nv.fake_driver.calls["nvmlDeviceGetPcieThroughput"] == 0


# ------------------------------------------------------------------ memory API versions


def test_memory_v2_missing_from_driver_falls_back_to_v1(nv: ModuleType) -> None:
    nv.fake_driver.missing.add("nvmlDeviceGetMemoryInfo_v2")
    source = open_source(nv)
    gpus = [source.sample().gpus[0] for _ in range(3)]
    # v1 `used` includes the driver-reserved 512 MiB.
    assert [g.memory_used_bytes for g in gpus] == [10 * 2**30 + 512 * MIB] * 3
    assert nv.fake_driver.calls["nvmlDeviceGetMemoryInfo_v2"] == 1
    assert nv.fake_driver.calls["nvmlDeviceGetMemoryInfo"] == 3


def test_memory_v2_missing_from_bindings_uses_v1_only(
    nv: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(nv, "nvmlMemory_v2")
    gpu = open_source(nv).sample().gpus[0]
    assert gpu.memory_used_bytes == 10 * 2**30 + 512 * MIB
    assert nv.fake_driver.calls["nvmlDeviceGetMemoryInfo_v2"] == 0


def test_memory_total_survives_a_failed_memory_call(nv: ModuleType) -> None:
    fake = nv.fake_driver.devices[0]
    source = open_source(nv)
    source.sample()
    fake.errors["nvmlDeviceGetMemoryInfo_v2"] = nv.NVML_ERROR_TIMEOUT
    gpu = source.sample().gpus[0]
    assert (gpu.memory_used_bytes, gpu.memory_total_bytes) == (None, 80 * 2**30)


# ------------------------------------------------------------------ lost GPUs


def test_lost_gpu_stops_being_polled_and_others_carry_on(nv: ModuleType) -> None:
    good = device(nv, uuid="GPU-good")
    bad = device(nv, uuid="GPU-bad")
    nv.fake_driver.devices = [good, bad]
    source = open_source(nv)
    first = source.sample()
    assert [g.lost for g in first.gpus] == [False, False]
    bad.errors["nvmlDeviceGetUtilizationRates"] = nv.NVML_ERROR_GPU_IS_LOST
    second = source.sample()
    calls_when_lost = sum(bad.calls.values())
    third = source.sample()
    for report in (second, third):
        ok, lost = report.gpus
        assert (ok.lost, ok.util_percent, ok.uuid) == (False, 50.0, "GPU-good")
        assert (lost.lost, lost.util_percent, lost.power_w) == (True, None, None)
        assert lost.uuid == "GPU-bad"
        assert lost.name == "NVIDIA H100 80GB HBM3" and lost.memory_total_bytes == 80 * 2**30
    assert sum(bad.calls.values()) == calls_when_lost
    assert good.calls["nvmlDeviceGetUtilizationRates"] == 3


def test_unknown_error_on_consecutive_ticks_means_lost(nv: ModuleType) -> None:
    fake = nv.fake_driver.devices[0]
    fake.errors["nvmlDeviceGetPowerUsage"] = nv.NVML_ERROR_UNKNOWN
    source = open_source(nv)
    lost = [source.sample().gpus[0].lost for _ in range(LOST_AFTER_UNKNOWN_TICKS + 2)]
    assert lost == [False] * (LOST_AFTER_UNKNOWN_TICKS - 1) + [True] * 3
    assert fake.calls["nvmlDeviceGetPowerUsage"] == LOST_AFTER_UNKNOWN_TICKS


def test_unknown_error_that_clears_is_not_lost(nv: ModuleType) -> None:
    fake = nv.fake_driver.devices[0]
    source = open_source(nv)
    for _ in range(3 * LOST_AFTER_UNKNOWN_TICKS):
        if fake.errors:
            fake.errors.clear()
        else:
            fake.errors["nvmlDeviceGetPowerUsage"] = nv.NVML_ERROR_UNKNOWN
        assert source.sample().gpus[0].lost is False


def test_device_without_a_handle_is_shown_lost(nv: ModuleType) -> None:
    nv.fake_driver.devices = [device(nv), device(nv)]
    nv.fake_driver.devices[1].errors["nvmlDeviceGetHandleByIndex"] = nv.NVML_ERROR_GPU_IS_LOST
    first, second = open_source(nv).sample().gpus
    assert (first.lost, first.util_percent) == (False, 50.0)
    assert (second.index, second.lost, second.name) == (1, True, "n/a")


# ------------------------------------------------------------------ processes


def test_process_list_falls_back_from_v3_to_v2(nv: ModuleType) -> None:
    nv.fake_driver.devices = [device(nv, processes=[(7, 5 * MIB)])]
    nv.fake_driver.missing.add("nvmlDeviceGetComputeRunningProcesses_v3")
    source = open_source(nv)
    for _ in range(2):
        assert [(p.pid, p.memory_used_bytes) for p in source.sample().gpus[0].processes] == [
            (7, 5 * MIB)
        ]
    assert nv.fake_driver.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 1
    assert nv.fake_driver.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 2


def test_failing_process_calls_leave_the_device_reported(nv: ModuleType) -> None:
    fake = device(nv, processes=[(7, 5 * MIB)])
    for name in ("_v3", "_v2", ""):
        fake.errors[f"nvmlDeviceGetComputeRunningProcesses{name}"] = nv.NVML_ERROR_NO_PERMISSION
    nv.fake_driver.devices = [fake]
    source = open_source(nv)
    gpu = source.sample().gpus[0]
    later = source.sample().gpus[0]
    assert gpu.processes == () and gpu.util_percent == 50.0 and gpu.lost is False
    assert gpu.processes_known is False and later.processes_known is False
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 1


def test_no_processes_is_known_and_empty(nv: ModuleType) -> None:
    gpu = open_source(nv).sample().gpus[0]
    assert (gpu.processes, gpu.processes_known) == ((), True)


def test_process_list_failing_for_a_tick_is_retried(nv: ModuleType) -> None:
    fake = device(nv, processes=[(7, 5 * MIB)])
    fake.errors["nvmlDeviceGetComputeRunningProcesses_v3"] = nv.NVML_ERROR_TIMEOUT
    nv.fake_driver.devices = [fake]
    source = open_source(nv)
    gpu = source.sample().gpus[0]
    assert (gpu.processes, gpu.processes_known) == ((), False)
    del fake.errors["nvmlDeviceGetComputeRunningProcesses_v3"]
    gpu = source.sample().gpus[0]
    assert ([p.pid for p in gpu.processes], gpu.processes_known) == ([7], True)


def test_process_memory_not_available_is_none(nv: ModuleType) -> None:
    nv.fake_driver.devices = [device(nv, processes=[(7, None), (8, 64 * MIB)])]
    processes = open_source(nv).sample().gpus[0].processes
    assert [(p.pid, p.memory_used_bytes) for p in processes] == [(7, None), (8, 64 * MIB)]


def test_raw_not_available_marker_from_older_bindings_is_none(
    nv: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = nv.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
    raw = nv.nvmlFriendlyObject({"pid": 9, "usedGpuMemory": marker})
    monkeypatch.setattr(nv, "nvmlDeviceGetComputeRunningProcesses_v3", lambda handle: [raw])
    (process,) = open_source(nv).sample().gpus[0].processes
    assert (process.pid, process.memory_used_bytes) == (9, None)


def test_process_sm_util_uses_the_last_seen_timestamp(nv: ModuleType) -> None:
    fake = device(nv, processes=[(7, MIB), (8, MIB)], process_util=[(7, 100, 70), (7, 200, 80)])
    nv.fake_driver.devices = [fake]
    source = open_source(nv)
    assert [p.sm_util_percent for p in source.sample().gpus[0].processes] == [80.0, None]
    # Older than the last seen (200): not returned again; newer ones are.
    fake.process_util = [(7, 150, 99), (8, 300, 12)]
    assert [p.sm_util_percent for p in source.sample().gpus[0].processes] == [None, 12.0]
    fake.process_util = [(7, 300, 5)]
    assert [p.sm_util_percent for p in source.sample().gpus[0].processes] == [None, None]
    assert fake.calls["nvmlDeviceGetProcessUtilization"] == 3


def test_process_util_not_supported_keeps_memory(nv: ModuleType) -> None:
    fake = device(nv, processes=[(7, MIB)], process_util=[(7, 100, 70)])
    fake.errors["nvmlDeviceGetProcessUtilization"] = nv.NVML_ERROR_NOT_SUPPORTED
    nv.fake_driver.devices = [fake]
    source = open_source(nv)
    for _ in range(2):
        (process,) = source.sample().gpus[0].processes
        assert (process.memory_used_bytes, process.sm_util_percent) == (MIB, None)
    assert fake.calls["nvmlDeviceGetProcessUtilization"] == 1


# ------------------------------------------------------------------ GPM (Hopper and later)


def test_gpm_metrics_come_from_two_consecutive_ticks(nv: ModuleType) -> None:
    values = {nv.NVML_GPM_METRIC_SM_OCCUPANCY: 42.5, nv.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 17.0}
    nv.fake_driver.devices = [device(nv, gpm_supported=True, gpm_values=values)]
    source = open_source(nv)
    first, second, third = (source.sample().gpus[0] for _ in range(3))
    assert (first.sm_occupancy_percent, first.tensor_active_percent) == (None, None)
    assert (second.sm_occupancy_percent, second.tensor_active_percent) == (42.5, 17.0)
    assert (third.sm_occupancy_percent, third.tensor_active_percent) == (42.5, 17.0)
    assert nv.fake_driver.calls["nvmlGpmSampleAlloc"] == 2
    source.close()
    assert nv.fake_driver.gpm_buffers == {}


def test_gpm_one_metric_refused_other_kept(nv: ModuleType) -> None:
    values = {nv.NVML_GPM_METRIC_SM_OCCUPANCY: 30.0}
    nv.fake_driver.devices = [device(nv, gpm_supported=True, gpm_values=values)]
    source = open_source(nv)
    source.sample()
    gpu = source.sample().gpus[0]
    assert (gpu.sm_occupancy_percent, gpu.tensor_active_percent) == (30.0, None)


@pytest.mark.parametrize("how", ["unsupported-device", "query-not-supported", "not-in-library"])
def test_gpm_absent_means_none_and_no_gpm_calls(nv: ModuleType, how: str) -> None:
    fake = nv.fake_driver.devices[0]
    if how == "query-not-supported":
        fake.errors["nvmlGpmQueryDeviceSupport"] = nv.NVML_ERROR_NOT_SUPPORTED
    elif how == "not-in-library":
        nv.fake_driver.missing.add("nvmlGpmQueryDeviceSupport")
    source = open_source(nv)
    gpus = [source.sample().gpus[0] for _ in range(3)]
    assert {(g.sm_occupancy_percent, g.tensor_active_percent) for g in gpus} == {(None, None)}
    assert gpus[-1].util_percent == 50.0
    assert nv.fake_driver.calls["nvmlGpmSampleAlloc"] == 0
    assert nv.fake_driver.calls["nvmlGpmSampleGet"] == 0


def test_gpm_refused_mid_run_frees_buffers_and_stops(nv: ModuleType) -> None:
    fake = device(nv, gpm_supported=True, gpm_values={nv.NVML_GPM_METRIC_SM_OCCUPANCY: 1.0})
    nv.fake_driver.devices = [fake]
    source = open_source(nv)
    source.sample()
    fake.errors["nvmlGpmSampleGet"] = nv.NVML_ERROR_NOT_SUPPORTED
    for _ in range(3):
        assert source.sample().gpus[0].sm_occupancy_percent is None
    assert fake.calls["nvmlGpmSampleGet"] == 2
    assert nv.fake_driver.gpm_buffers == {}


def test_lost_gpu_frees_its_gpm_buffers(nv: ModuleType) -> None:
    fake = device(nv, gpm_supported=True)
    nv.fake_driver.devices = [fake]
    source = open_source(nv)
    source.sample()
    fake.errors["nvmlDeviceGetUtilizationRates"] = nv.NVML_ERROR_GPU_IS_LOST
    assert source.sample().gpus[0].lost
    assert nv.fake_driver.gpm_buffers == {}


# ------------------------------------------------------------------ the stand-in and the module


def _names_the_source_uses() -> set[str]:
    text = Path(nvml_source.__file__).read_text()
    quoted = set(re.findall(r'"((?:nvml|NVML)\w+)"', text))
    attributes = set(re.findall(r"\bnv\.(\w+)", text))
    return quoted | attributes


def test_stand_in_mirrors_the_real_module() -> None:
    real = pytest.importorskip("pynvml")
    if Path(real.__file__ or "").name != "pynvml.py" or "site-packages" not in str(real.__file__):
        pytest.skip("the real nvidia-ml-py is not the importable pynvml")
    stand_in = load_stand_in()
    sys.modules["pynvml"] = real
    used = _names_the_source_uses() | {"c_nvmlFieldValue_t", "c_nvmlValue_t"}
    assert {"nvmlDeviceGetMemoryInfo", "nvmlGpmMetricsGet", "NVMLError"} <= used
    assert {"nvmlDeviceGetFieldValues", "NVML_FI_DEV_PCIE_COUNT_RX_BYTES"} <= used
    for name in sorted(used):
        assert hasattr(real, name), f"real pynvml has no {name}"
        assert hasattr(stand_in, name), f"stand-in has no {name}"
        ours, theirs = getattr(stand_in, name), getattr(real, name)
        if isinstance(theirs, type) and hasattr(theirs, "_fields_"):
            assert [f[0] for f in ours._fields_] == [f[0] for f in theirs._fields_], name
        elif callable(theirs) and not isinstance(theirs, type):
            assert list(inspect.signature(ours).parameters) == list(
                inspect.signature(theirs).parameters
            ), name
        elif isinstance(theirs, int):
            assert ours == theirs, name
    for name in dir(stand_in):
        if name.startswith(("NVML_ERROR_", "NVMLError_")) or name == "NVML_SUCCESS":
            assert hasattr(real, name), name
            if name.startswith("NVML_"):
                assert getattr(stand_in, name) == getattr(real, name), name
    for module in (real, stand_in):
        error = module.NVMLError(module.NVML_ERROR_GPU_IS_LOST)
        assert type(error).__name__ == "NVMLError_GpuIsLost"
        assert isinstance(error, module.NVMLError) and error.value == 15
        assert module.NVMLError_NotSupported().value == module.NVML_ERROR_NOT_SUPPORTED


def test_importing_the_source_does_not_import_pynvml_or_textual() -> None:
    code = (
        "import sys, gputop.sources.gpu, gputop.sources.nvml, gputop.sources.simulated;"
        "print(sorted(m for m in ('pynvml', 'textual', 'rich') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------------ scripts/gpu_check.py

GPU_CHECK = Path(__file__).parents[2] / "scripts" / "gpu_check.py"


@pytest.fixture
def gpu_check(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setitem(sys.modules, "gpu_check", None)
    module = load_file("gpu_check", GPU_CHECK)
    monkeypatch.setattr(module.time, "sleep", lambda seconds: None)
    return module


def gpm_device(nv: ModuleType) -> Any:
    values = {nv.NVML_GPM_METRIC_SM_OCCUPANCY: 40.0, nv.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 20.0}
    return device(nv, gpm_supported=True, gpm_values=values, processes=[(99, MIB)])


def test_gpu_check_finds_gputop_agrees_with_raw_nvml(nv: ModuleType, gpu_check: ModuleType) -> None:
    nv.fake_driver.devices = [gpm_device(nv), device(nv, uuid="GPU-1")]
    nv.nvmlInit()
    ctx = gpu_check.Context(nv, "580.65.06")
    assert gpu_check.check_raw_vs_source(ctx) == []
    assert [raw["uuid"] for raw in ctx.raw] == [nv.FakeDevice().uuid, "GPU-1"]
    assert ctx.raw[0]["pcie_rx_bytes_per_s"] == ctx.report.gpus[0].pcie_rx_bytes_per_s
    assert ctx.raw[0]["gpm_supported"] is True and ctx.raw[1]["gpm_supported"] is False
    assert ctx.raw[0]["pcie_counters"] == [(nv.NVML_ERROR_NOT_SUPPORTED, 0)] * 2


def test_gpu_check_flags_a_field_gputop_lost(nv: ModuleType, gpu_check: ModuleType) -> None:
    nv.fake_driver.devices = [gpm_device(nv)]
    nv.nvmlInit()
    ctx = gpu_check.Context(nv, "580.65.06")
    gpu_check.check_raw_vs_source(ctx)
    gpu = dataclass_replace(ctx.report.gpus[0], temperature_c=None, sm_occupancy_percent=None)
    problems = gpu_check.compare(ctx.raw[0], gpu, ctx)
    assert problems == [
        "temperature_c is None but raw NVML gives 55",
        "GPM is supported but gputop has no SM occupancy",
    ]


def test_gpu_check_reads_the_once_json_document(
    nv: ModuleType, gpu_check: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from gputop.export.snapshot import gpu_json

    nv.fake_driver.devices = [gpm_device(nv)]
    nv.nvmlInit()
    ctx = gpu_check.Context(nv, "580.65.06")
    gpu_check.check_raw_vs_source(ctx)
    good = gpu_json(ctx.report.gpus[0])
    document = {"schema": "gputop.snapshot/1", "gpu_source": "nvml", "gpus": [good]}

    def problems_with(doc: dict[str, Any]) -> list[str]:
        path = tmp_path / "doc.json"
        path.write_text(json.dumps(doc))
        monkeypatch.setattr(gpu_check, "ONCE_COMMAND", ["cat", str(path)])
        return list(gpu_check.check_once_json(ctx))

    assert problems_with(document) == []
    bad = dict(good, power_w=None, tensor_active_percent=None)
    assert problems_with(dict(document, gpu_source="none", gpus=[bad])) == [
        "JSON gpu_source is 'none', expected 'nvml'",
        "JSON gpus[0]: power_w is null (raw NVML: 300.0)",
        "JSON gpus[0]: tensor_active_percent is null though the GPU supports GPM",
    ]
    monkeypatch.setattr(gpu_check, "ONCE_COMMAND", ["false"])
    assert gpu_check.check_once_json(ctx) == ["gputop --once --json exited 1: "]


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None, reason="a real libnvidia-ml is present"
)
def test_gpu_check_without_a_gpu_fails_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, str(GPU_CHECK), "--no-load"], capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(GPU_CHECK.parents[1])},
    )
    assert done.returncode == 1
    assert done.stdout.strip().splitlines() == [
        "gpu-check: FAILED: NVML does not start here (NVML Shared Library Not Found);"
        " this check needs a GPU"
    ]
    assert "Traceback" not in done.stderr
