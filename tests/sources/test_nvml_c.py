"""Every GPU row through the real nvidia-ml-py over the C NVML (tests/nvml_c), in a child process.

Each test writes a scenario, runs gputop's NVML source (or gputop itself) with the C library on
LD_LIBRARY_PATH and reads what it reported and which NVML calls it made.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gputop.sources.nvml import LOST_AFTER_UNKNOWN_TICKS, PCIE_THROUGHPUT_EVERY
from tests.nvml_c import build
from tests.nvml_c.build import LIBRARY, MIB, FakeNvml, Run

fake_nvml = build.fake_nvml  # the session's C NVML, as a fixture of this module

pytestmark = pytest.mark.slow

NOT_SUPPORTED, NO_PERMISSION, TIMEOUT, GPU_IS_LOST, UNKNOWN = 3, 4, 10, 15, 999
LIB_RM_VERSION_MISMATCH, DRIVER_NOT_LOADED = 18, 9
FI_PCIE_RX, FI_PCIE_TX = 198, 197
GPM_SM_OCCUPANCY, GPM_TENSOR, GPM_PCIE_TX, GPM_PCIE_RX = 3, 5, 20, 21
VALUE_TYPE_DOUBLE = 0
DEFAULT_UUID = "GPU-00000000-0000-0000-0000-000000000000"
V3 = "nvmlDeviceGetComputeRunningProcesses_v3"
V2 = "nvmlDeviceGetComputeRunningProcesses_v2"


def gpus(run: Run, tick: int = -1) -> list[dict[str, Any]]:
    report = run.out["reports"][tick]
    assert report["source"] == "nvml", report["note"]
    return list(report["gpus"])


def processes(gpu: dict[str, Any]) -> list[tuple[int, int | None, float | None]]:
    return [(p["pid"], p["memory_used_bytes"], p["sm_util_percent"]) for p in gpu["processes"]]


def pcie(run: Run) -> list[list[tuple[float | None, float | None]]]:
    """PCIe rx/tx of every GPU, a list a tick."""
    return [[(g["pcie_rx_bytes_per_s"], g["pcie_tx_bytes_per_s"]) for g in report["gpus"]]
            for report in run.out["reports"]]


def one_gpu(**device: Any) -> dict[str, Any]:
    return {"devices": [device]}


# ------------------------------------------------------------------ the path itself


def test_the_real_binding_loads_the_c_library(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    run = fake_nvml.sample(one_gpu(), tmp_path)
    assert run.out["source"] == "NvmlSource"
    # Closed twice: NVML shut down once, and later samples say there is no GPU data.
    assert run.out["after_close"]["source"] == "none"
    assert "site-packages" in run.out["pynvml"] and run.out["pynvml"].endswith("pynvml.py")
    assert run.out["library"] == str(fake_nvml.library() / LIBRARY)
    assert run.log.count("nvmlInitWithFlags") == 1 and run.log.count("nvmlShutdown") == 1


def test_healthy_device_every_row_and_unit(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    scenario = one_gpu(
        name="NVIDIA A100-SXM4-40GB", uuid="GPU-a100", util=[37, 64], memory_util=[12, 15],
        memory_total=40 * 2**30, memory_used=[3 * 2**30, 5 * 2**30], memory_reserved=256 * MIB,
        temperature=[61, 63], power_mw=[212_345, 250_000], power_limit_mw=400_000,
        sm_clock=[1410, 1395], memory_clock=1215, pcie_rx_kb=2000, pcie_tx_kb=700,
        processes=[{"pid": 4242, "memory": 3000 * MIB}, {"pid": 4343, "memory": 12 * MIB}],
        process_util=[[{"pid": 4242, "time": 10, "sm": 70}],
                      [{"pid": 4242, "time": 20, "sm": 75}, {"pid": 4343, "time": 21, "sm": 3}]],
    )
    run = fake_nvml.sample(scenario, tmp_path, ticks=2)
    assert run.out["reports"][0]["driver_version"] == "580.65.06"
    first, second = (gpus(run, tick)[0] for tick in (0, 1))
    assert (first["index"], first["name"], first["uuid"]) == (0, "NVIDIA A100-SXM4-40GB",
                                                              "GPU-a100")
    assert [(g["util_percent"], g["memory_util_percent"]) for g in (first, second)] == [
        (37.0, 12.0), (64.0, 15.0)]
    # v2 memory: `used` leaves out the driver-reserved memory.
    assert [(g["memory_used_bytes"], g["memory_total_bytes"]) for g in (first, second)] == [
        (3 * 2**30, 40 * 2**30), (5 * 2**30, 40 * 2**30)]
    assert [g["temperature_c"] for g in (first, second)] == [61.0, 63.0]
    assert [(g["power_w"], g["power_limit_w"]) for g in (first, second)] == [
        (212.345, 400.0), (250.0, 400.0)]
    assert [(g["sm_clock_mhz"], g["memory_clock_mhz"]) for g in (first, second)] == [
        (1410, 1215), (1395, 1215)]
    assert (first["pcie_rx_bytes_per_s"], first["pcie_tx_bytes_per_s"]) == (2000 * 1024.0,
                                                                            700 * 1024.0)
    assert (first["sm_occupancy_percent"], first["tensor_active_percent"]) == (None, None)
    assert processes(first) == [(4242, 3000 * MIB, 70.0), (4343, 12 * MIB, None)]
    assert processes(second) == [(4242, 3000 * MIB, 75.0), (4343, 12 * MIB, 3.0)]
    assert first["lost"] is False and first["processes_known"] is True


def test_slow_fields_are_read_once(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    run = fake_nvml.sample(one_gpu(), tmp_path, ticks=5)
    for function in ("nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetEnforcedPowerLimit",
                     "nvmlSystemGetDriverVersion"):
        assert run.log.count(function) == 1, function
    assert run.log.count("nvmlDeviceGetUtilizationRates") == 5


def test_names_and_driver_version_from_the_library_are_escaped(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    scenario = {"driver_version": "580\x1b[2J", "devices": [
        {"name": "\x1b]0;owned\x07H100", "uuid": "GPU-\u202e1"}]}
    run = fake_nvml.sample(scenario, tmp_path)
    (gpu,) = gpus(run)
    for text in (gpu["name"], gpu["uuid"], run.out["reports"][0]["driver_version"]):
        assert not any(ch in text for ch in "\x1b\x07\u202e"), text
    assert gpu["name"].endswith("H100")


# ------------------------------------------------------------------ init and devices


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (LIB_RM_VERSION_MISMATCH, "versions differ"),
        (DRIVER_NOT_LOADED, "driver not loaded"),
        (NO_PERMISSION, "no permission"),
        (UNKNOWN, "NVML failed to start"),
    ],
)
def test_init_failure_is_one_line(
    fake_nvml: FakeNvml, tmp_path: Path, code: int, words: str
) -> None:
    run = fake_nvml.sample({"init_error": code, "devices": [{}]}, tmp_path, ticks=2)
    assert run.out["source"] == "NoGpuSource"
    for report in run.out["reports"]:
        assert report["source"] == "none" and report["gpus"] == []
        assert words in report["note"] and "\n" not in report["note"]
    assert run.log.count("nvmlDeviceGetCount_v2") == 0


def test_version_mismatch_in_once_json_and_text(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    env = fake_nvml.env({"init_error": LIB_RM_VERSION_MISMATCH, "devices": [{}]}, tmp_path)
    done = subprocess.run([sys.executable, "-m", "gputop", "--once", "--json"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert (document["gpu_source"], document["gpus"]) == ("none", [])
    assert document["gpu_note"] == ("no GPU data: NVML library and kernel driver versions "
                                    "differ")
    text = subprocess.run([sys.executable, "-m", "gputop", "--once"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert text.returncode == 0, text.stderr
    assert text.stdout.count("versions differ") == 1
    assert "Traceback" not in done.stderr + text.stderr


def test_a_scenario_that_is_not_json_fails_init_in_one_line(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    env = fake_nvml.env({}, tmp_path)
    Path(env["GPUTOP_FAKE_NVML_SCENARIO"]).write_text('{"devices": [{"util": 5,}]}')
    code = "from gputop.sources.nvml import open_nvml; print(open_nvml().sample().note)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no GPU data: NVML failed to start (Unknown Error)"
    assert done.stderr.count("\n") == 1 and "is not a JSON object" in done.stderr


def test_no_devices_is_said_and_nvml_shut_down(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    run = fake_nvml.sample({"devices": []}, tmp_path)
    assert "found no GPUs" in run.out["reports"][0]["note"]
    assert run.log.count("nvmlShutdown") == 1


def test_device_without_a_handle_is_shown_lost(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    scenario = {"devices": [{}, {"errors": {"nvmlDeviceGetHandleByIndex_v2": GPU_IS_LOST}}]}
    first, second = gpus(fake_nvml.sample(scenario, tmp_path))
    assert (first["lost"], first["util_percent"]) == (False, 50.0)
    assert (second["index"], second["lost"], second["name"]) == (1, True, "n/a")


# ------------------------------------------------------------------ refusals and lost GPUs


@pytest.mark.parametrize("code", [NOT_SUPPORTED, NO_PERMISSION])
def test_refused_field_is_none_and_not_asked_again(
    fake_nvml: FakeNvml, tmp_path: Path, code: int
) -> None:
    run = fake_nvml.sample(one_gpu(errors={"nvmlDeviceGetTemperature": code}), tmp_path, ticks=3)
    assert [gpus(run, t)[0]["temperature_c"] for t in range(3)] == [None] * 3
    assert [gpus(run, t)[0]["power_w"] for t in range(3)] == [300.0] * 3
    assert run.log.count("nvmlDeviceGetTemperature") == 1
    assert run.log.count("nvmlDeviceGetPowerUsage") == 3


def test_passing_error_is_asked_again_next_tick(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    errors = {"nvmlDeviceGetTemperature": {"code": TIMEOUT, "to_tick": 1}}
    run = fake_nvml.sample(one_gpu(errors=errors), tmp_path, ticks=2)
    assert [gpus(run, t)[0]["temperature_c"] for t in range(2)] == [None, 55.0]
    assert run.log.count("nvmlDeviceGetTemperature") == 2


def test_gpu_lost_mid_run_is_shown_and_the_rest_go_on(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    scenario = {"devices": [{"uuid": "GPU-good"}, {"uuid": "GPU-bad", "lost_from_tick": 1},
                            {"uuid": "GPU-also-good"}]}
    run = fake_nvml.sample(scenario, tmp_path, ticks=4)
    assert [[g["lost"] for g in gpus(run, t)] for t in range(4)] == [
        [False, False, False]] + [[False, True, False]] * 3
    for tick in (1, 2, 3):
        ok, lost, also = gpus(run, tick)
        assert (ok["util_percent"], also["util_percent"]) == (50.0, 50.0)
        assert (lost["uuid"], lost["util_percent"], lost["power_w"]) == ("GPU-bad", None, None)
        assert lost["memory_total_bytes"] == 80 * 2**30 and lost["processes_known"] is False
    # Not polled once lost: its calls stop at the one that said so.
    lost_calls = [c for c in run.log.calls if c.device == 1 and c.code == GPU_IS_LOST]
    assert len(lost_calls) == 1
    assert run.log.count("nvmlDeviceGetUtilizationRates", device=0) == 4


def test_unknown_error_on_consecutive_ticks_means_lost(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    run = fake_nvml.sample(one_gpu(errors={"nvmlDeviceGetPowerUsage": UNKNOWN}), tmp_path,
                           ticks=LOST_AFTER_UNKNOWN_TICKS + 2)
    lost = [gpus(run, t)[0]["lost"] for t in range(LOST_AFTER_UNKNOWN_TICKS + 2)]
    assert lost == [False] * (LOST_AFTER_UNKNOWN_TICKS - 1) + [True] * 3
    assert run.log.count("nvmlDeviceGetPowerUsage") == LOST_AFTER_UNKNOWN_TICKS


def test_unknown_error_that_clears_is_not_lost(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    ticks = 3 * LOST_AFTER_UNKNOWN_TICKS
    every_other = {"code": UNKNOWN, "ticks": list(range(0, ticks, 2))}
    run = fake_nvml.sample(one_gpu(errors={"nvmlDeviceGetPowerUsage": every_other}), tmp_path,
                           ticks=ticks)
    assert [gpus(run, t)[0]["lost"] for t in range(ticks)] == [False] * ticks
    assert [gpus(run, t)[0]["power_w"] for t in range(4)] == [None, 300.0, None, 300.0]


# ------------------------------------------------------------------ memory API versions


def test_memory_v2_missing_from_the_driver_falls_back_to_v1(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    run = fake_nvml.sample(one_gpu(), tmp_path, ticks=3,
                           defines=("OMIT_nvmlDeviceGetMemoryInfo_v2",))
    # v1 `used` includes the driver-reserved 512 MiB.
    assert [gpus(run, t)[0]["memory_used_bytes"] for t in range(3)] == [
        10 * 2**30 + 512 * MIB] * 3
    assert run.log.count("nvmlDeviceGetMemoryInfo") == 3


def test_memory_total_survives_a_failed_memory_call(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    errors = {"nvmlDeviceGetMemoryInfo_v2": {"code": TIMEOUT, "from_tick": 1}}
    gpu = gpus(fake_nvml.sample(one_gpu(errors=errors), tmp_path, ticks=2))[0]
    assert (gpu["memory_used_bytes"], gpu["memory_total_bytes"]) == (None, 80 * 2**30)


# ------------------------------------------------------------------ PCIe


def test_throughput_missing_from_the_library_is_remembered(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    run = fake_nvml.sample(one_gpu(), tmp_path, ticks=3,
                           defines=("OMIT_nvmlDeviceGetPcieThroughput",))
    assert pcie(run) == [[(None, None)]] * 3
    assert [gpus(run, t)[0]["util_percent"] for t in range(3)] == [50.0] * 3
    assert run.log.count("nvmlDeviceGetPcieThroughput") == 0  # never reached the library


def test_pcie_counters_give_bytes_per_second_in_one_call(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    scenario = one_gpu(pcie_rx_bytes=[1_000, 4_001_000, 4_001_000],
                       pcie_tx_bytes=[50, 1_000_050, 1_000_050])
    run = fake_nvml.sample(scenario, tmp_path, ticks=3, clock_step=0.5)
    assert pcie(run) == [[(None, None)], [(8_000_000.0, 2_000_000.0)], [(0.0, 0.0)]]
    assert run.log.count("nvmlDeviceGetFieldValues") == 3
    assert run.log.count("nvmlDeviceGetPcieThroughput") == 0


def test_pcie_counter_going_backwards_is_none_then_resumes(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    scenario = one_gpu(pcie_rx_bytes=[5_000_000, 1_000, 4_000], pcie_tx_bytes=0)
    run = fake_nvml.sample(scenario, tmp_path, ticks=3)
    assert pcie(run)[1:] == [[(None, 0.0)], [(3_000.0, 0.0)]]
    assert run.log.count("nvmlDeviceGetPcieThroughput") == 0


@pytest.mark.parametrize("how", ["timeout", "double-value"])
def test_pcie_counter_field_unreadable_for_a_tick(
    fake_nvml: FakeNvml, tmp_path: Path, how: str
) -> None:
    device: dict[str, Any] = {"pcie_rx_bytes": [0, 1_000, 3_000], "pcie_tx_bytes": [0, 1_000]}
    if how == "timeout":
        device["field_errors"] = {str(FI_PCIE_RX): [None, TIMEOUT, None]}
    else:
        device["field_types"] = {str(FI_PCIE_RX): [None, VALUE_TYPE_DOUBLE, None]}
    run = fake_nvml.sample(one_gpu(**device), tmp_path, ticks=3)
    # Over both ticks, from the last good reading.
    assert pcie(run)[1:] == [[(None, 1_000.0)], [(1_500.0, 0.0)]]
    assert run.log.count("nvmlDeviceGetFieldValues") == 3


@pytest.mark.parametrize("how", ["field-refused", "call-refused", "not-in-library"])
def test_counters_unavailable_fall_back_and_are_not_asked_again(
    fake_nvml: FakeNvml, tmp_path: Path, how: str
) -> None:
    device: dict[str, Any] = {"pcie_rx_bytes": 0}  # tx refused
    defines: tuple[str, ...] = ()
    if how == "call-refused":
        device["errors"] = {"nvmlDeviceGetFieldValues": NOT_SUPPORTED}
    elif how == "not-in-library":
        defines = ("OMIT_nvmlDeviceGetFieldValues",)
    run = fake_nvml.sample(one_gpu(**device), tmp_path, ticks=3, defines=defines)
    assert pcie(run) == [[(1000 * 1024.0, 500 * 1024.0)]] * 3
    assert run.log.count("nvmlDeviceGetFieldValues") == (0 if defines else 1)


def test_unsupported_counters_use_gpm_pcie_in_the_same_request(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    gpm = {str(GPM_SM_OCCUPANCY): 40.0, str(GPM_PCIE_RX): 3.0, str(GPM_PCIE_TX): 1.5}
    run = fake_nvml.sample(one_gpu(gpm_supported=True, gpm=gpm), tmp_path, ticks=3)
    assert pcie(run) == [[(None, None)]] + [[(3.0 * MIB, 1.5 * MIB)]] * 2
    assert [gpus(run, t)[0]["sm_occupancy_percent"] for t in range(3)] == [None, 40.0, 40.0]
    assert run.log.count("nvmlDeviceGetFieldValues") == 1  # unsupported: remembered
    assert run.log.count("nvmlGpmMetricsGet") == 2  # one request a tick
    assert run.log.count("nvmlDeviceGetPcieThroughput") == 0


def test_gpm_without_pcie_metrics_falls_back_to_throughput(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    scenario = one_gpu(gpm_supported=True, gpm={str(GPM_SM_OCCUPANCY): 40.0})
    run = fake_nvml.sample(scenario, tmp_path, ticks=4)
    assert pcie(run) == [[(None, None)]] + [[(1000 * 1024.0, 500 * 1024.0)]] * 3
    assert run.log.count("nvmlDeviceGetPcieThroughput") == 2  # both once, then not due yet


def test_throughput_fallback_is_one_direction_every_nth_tick(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    n = PCIE_THROUGHPUT_EVERY
    run = fake_nvml.sample(one_gpu(pcie_rx_kb=[1000 + t for t in range(4 * n)]), tmp_path,
                           ticks=4 * n)
    asked = [c.tick for c in run.log.of("nvmlDeviceGetPcieThroughput")]
    assert asked == [0, 0, n, 2 * n, 3 * n]
    # rx is read at tick 0 and 2n and kept between reads.
    seen = [rx for [(rx, _)] in pcie(run)]
    assert seen == [1000 * 1024.0] * (2 * n) + [(1000 + 2 * n) * 1024.0] * (2 * n)


def test_throughput_fallback_is_spread_over_eight_gpus(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    ticks = 4 * PCIE_THROUGHPUT_EVERY
    run = fake_nvml.sample({"devices": [{"uuid": f"GPU-{i}"} for i in range(8)]}, tmp_path,
                           ticks=ticks)
    assert all(None not in pair for tick in pcie(run) for gpu in tick for pair in [gpu])
    per_tick = [sum(1 for c in run.log.of("nvmlDeviceGetPcieThroughput") if c.tick == t)
                for t in range(ticks)]
    assert per_tick[0] == 16  # every device, both directions, once
    assert max(per_tick[1:]) == 2  # ceil(8 / N) devices a tick, one direction each


def test_eight_gpus_in_one_tick_with_field_values_batched(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    devices = [
        {"uuid": f"GPU-{i}", "util": 10 * i, "pcie_rx_bytes": [0, 1_000 * (i + 1)],
         "pcie_tx_bytes": [0, 0],
         "processes": [{"pid": 10_000 + 100 * i + k, "memory": (k + 1) * MIB} for k in range(75)]}
        for i in range(8)
    ]
    run = fake_nvml.sample({"devices": devices}, tmp_path, ticks=3)
    report = gpus(run)
    assert [g["uuid"] for g in report] == [f"GPU-{i}" for i in range(8)]
    assert [g["util_percent"] for g in report] == [10.0 * i for i in range(8)]
    assert [rx for [rx, _] in pcie(run)[1]] == [1_000.0 * (i + 1) for i in range(8)]
    assert sum(len(g["processes"]) for g in report) == 600
    assert processes(report[7])[74] == (10_774, 75 * MIB, None)
    assert [run.log.count("nvmlDeviceGetFieldValues", device=i) for i in range(8)] == [3] * 8
    assert run.log.count("nvmlDeviceGetPcieThroughput") == 0


# ------------------------------------------------------------------ processes


def test_old_driver_without_the_v3_process_call_uses_v2(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    scenario = one_gpu(processes=[{"pid": 7, "memory": 5 * MIB}])
    run = fake_nvml.sample(scenario, tmp_path, ticks=2, defines=(f"OMIT_{V3}",))
    for tick in range(2):
        assert processes(gpus(run, tick)[0]) == [(7, 5 * MIB, None)]
    assert run.log.count(V3) == 0
    assert {c.tick for c in run.log.of(V2)} == {0, 1}


def test_failing_process_calls_leave_the_device_reported(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    errors = {V3: NO_PERMISSION, V2: NO_PERMISSION}
    scenario = one_gpu(processes=[{"pid": 7, "memory": 5 * MIB}], errors=errors)
    run = fake_nvml.sample(scenario, tmp_path, ticks=2)
    for tick in range(2):
        gpu = gpus(run, tick)[0]
        assert (gpu["processes"], gpu["processes_known"]) == ([], False)
        assert (gpu["util_percent"], gpu["lost"]) == (50.0, False)
    # Refused for good: asked on the first tick only (the unversioned call is _v3 again).
    assert {c.tick for c in run.log.of(V3) + run.log.of(V2)} == {0}


def test_no_processes_is_known_and_empty(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    gpu = gpus(fake_nvml.sample(one_gpu(), tmp_path))[0]
    assert (gpu["processes"], gpu["processes_known"]) == ([], True)


def test_process_list_failing_for_a_tick_is_retried(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    scenario = one_gpu(processes=[{"pid": 7, "memory": 5 * MIB}],
                       errors={V3: {"code": TIMEOUT, "to_tick": 1}})
    run = fake_nvml.sample(scenario, tmp_path, ticks=2)
    first, second = (gpus(run, t)[0] for t in range(2))
    assert (first["processes"], first["processes_known"]) == ([], False)
    assert ([p["pid"] for p in second["processes"]], second["processes_known"]) == ([7], True)


def test_process_memory_not_available_is_none(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    scenario = one_gpu(processes=[{"pid": 7, "memory": None}, {"pid": 8, "memory": 64 * MIB}])
    gpu = gpus(fake_nvml.sample(scenario, tmp_path))[0]
    assert processes(gpu) == [(7, None, None), (8, 64 * MIB, None)]


def test_process_sm_util_uses_the_last_seen_timestamp(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    samples = [
        [{"pid": 7, "time": 100, "sm": 70}, {"pid": 7, "time": 200, "sm": 80}],
        # Older than the last seen (200): not returned again; newer ones are.
        [{"pid": 7, "time": 150, "sm": 99}, {"pid": 8, "time": 300, "sm": 12}],
        [{"pid": 7, "time": 300, "sm": 5}],
    ]
    scenario = one_gpu(processes=[{"pid": 7, "memory": MIB}, {"pid": 8, "memory": MIB}],
                       process_util=samples)
    run = fake_nvml.sample(scenario, tmp_path, ticks=3)
    sm = [[p["sm_util_percent"] for p in gpus(run, t)[0]["processes"]] for t in range(3)]
    assert sm == [[80.0, None], [None, 12.0], [None, None]]


def test_consumer_gpu_without_per_process_util_keeps_memory(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    scenario = one_gpu(
        name="NVIDIA GeForce RTX 4090", processes=[{"pid": 7, "memory": MIB}],
        process_util=[{"pid": 7, "time": 100, "sm": 70}],
        errors={"nvmlDeviceGetProcessUtilization": NOT_SUPPORTED},
    )
    run = fake_nvml.sample(scenario, tmp_path, ticks=2)
    for tick in range(2):
        assert processes(gpus(run, tick)[0]) == [(7, MIB, None)]
    assert run.log.count("nvmlDeviceGetProcessUtilization") == 1


# ------------------------------------------------------------------ GPM (Hopper and later)


def test_gpm_metrics_come_from_two_consecutive_ticks(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    gpm = {str(GPM_SM_OCCUPANCY): [42.5, 42.5, 60.0], str(GPM_TENSOR): 17.0}
    run = fake_nvml.sample(one_gpu(gpm_supported=True, gpm=gpm), tmp_path, ticks=3)
    got = [(g["sm_occupancy_percent"], g["tensor_active_percent"])
           for g in (gpus(run, t)[0] for t in range(3))]
    assert got == [(None, None), (42.5, 17.0), (60.0, 17.0)]
    assert run.log.count("nvmlGpmSampleAlloc") == 2
    assert run.log.count("nvmlGpmSampleFree") == 2  # at close


def test_gpm_one_metric_refused_other_kept(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    scenario = one_gpu(gpm_supported=True, gpm={str(GPM_SM_OCCUPANCY): 30.0})
    gpu = gpus(fake_nvml.sample(scenario, tmp_path, ticks=2))[0]
    assert (gpu["sm_occupancy_percent"], gpu["tensor_active_percent"]) == (30.0, None)


@pytest.mark.parametrize("how", ["unsupported-device", "query-not-supported", "not-in-library"])
def test_gpm_absent_means_none_and_no_gpm_calls(
    fake_nvml: FakeNvml, tmp_path: Path, how: str
) -> None:
    device: dict[str, Any] = {"gpm": {str(GPM_SM_OCCUPANCY): 30.0}}
    defines: tuple[str, ...] = ()
    if how == "query-not-supported":
        device.update(gpm_supported=True, errors={"nvmlGpmQueryDeviceSupport": NOT_SUPPORTED})
    elif how == "not-in-library":
        device["gpm_supported"] = True
        defines = ("OMIT_nvmlGpmQueryDeviceSupport",)
    run = fake_nvml.sample(one_gpu(**device), tmp_path, ticks=3, defines=defines)
    got = {(g["sm_occupancy_percent"], g["tensor_active_percent"])
           for g in (gpus(run, t)[0] for t in range(3))}
    assert got == {(None, None)}
    assert gpus(run)[0]["util_percent"] == 50.0
    assert run.log.count("nvmlGpmSampleAlloc") == run.log.count("nvmlGpmSampleGet") == 0


def test_gpm_refused_mid_run_frees_buffers_and_stops(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    scenario = one_gpu(gpm_supported=True, gpm={str(GPM_SM_OCCUPANCY): 1.0},
                       errors={"nvmlGpmSampleGet": {"code": NOT_SUPPORTED, "from_tick": 1}})
    run = fake_nvml.sample(scenario, tmp_path, ticks=4)
    assert [gpus(run, t)[0]["sm_occupancy_percent"] for t in range(1, 4)] == [None] * 3
    assert run.log.count("nvmlGpmSampleGet") == 2
    frees = run.log.of("nvmlGpmSampleFree")
    assert len(frees) == 2 and {c.code for c in frees} == {0}
    assert run.log.calls.index(frees[-1]) < run.log.calls.index(run.log.of("nvmlShutdown")[0])


def test_lost_gpu_frees_its_gpm_buffers(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    scenario = one_gpu(gpm_supported=True, lost_from_tick=1)
    run = fake_nvml.sample(scenario, tmp_path, ticks=3)
    assert [gpus(run, t)[0]["lost"] for t in range(3)] == [False, True, True]
    frees = run.log.of("nvmlGpmSampleFree")
    assert len(frees) == 2 and {c.code for c in frees} == {0}


# ------------------------------------------------------------------ the structs are the real ones

WRONG_LAYOUT = ("WRONG_PROCESS_INFO_LAYOUT",)
TRAINERS = [{"pid": 4101, "memory": 3000 * MIB}, {"pid": 4102, "memory": 1500 * MIB},
            {"pid": 4103, "memory": None}]


def check_process_rows(run: Run) -> None:
    """The per-process rows a scenario with TRAINERS must give; fails on garbled structs."""
    assert processes(gpus(run)[0]) == [(4101, 3000 * MIB, None), (4102, 1500 * MIB, None),
                                       (4103, None, None)]


def test_process_rows_read_through_the_real_structs(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    check_process_rows(fake_nvml.sample(one_gpu(processes=TRAINERS), tmp_path))


@pytest.mark.parametrize("version", [V3, V2])
def test_a_library_filling_the_wrong_struct_version_is_caught(
    fake_nvml: FakeNvml, tmp_path: Path, version: str
) -> None:
    """Meta-test: the same check fails when the library writes nvmlProcessInfo_v1_t records."""
    defines = WRONG_LAYOUT + ((f"OMIT_{V3}",) if version == V2 else ())
    run = fake_nvml.sample(one_gpu(processes=TRAINERS), tmp_path, defines=defines)
    assert run.log.count(version) > 0
    with pytest.raises(AssertionError):
        check_process_rows(run)


# ------------------------------------------------------------------ gputop itself


@pytest.fixture
def sleeper() -> Any:
    """A real process to stand as the GPU's compute process."""
    proc = subprocess.Popen(["sleep", "120"])
    yield proc
    proc.kill()
    proc.wait()


def test_once_json_joins_gpu_memory_and_sm_util_to_the_process_row(
    fake_nvml: FakeNvml, tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    samples = [[{"pid": sleeper.pid, "time": 1_000 * (t + 1), "sm": 40 + t}] for t in range(4)]
    scenario = {"devices": [
        {"uuid": "GPU-0", "processes": [{"pid": sleeper.pid, "memory": 2048 * MIB}],
         "process_util": samples},
        {"uuid": "GPU-1", "lost_from_tick": 1},
    ]}
    env = fake_nvml.env(scenario, tmp_path)
    done = subprocess.run([sys.executable, "-m", "gputop", "--once", "--json"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["gpu_source"] == "nvml"
    ok, lost = document["gpus"]
    (gpu_process,) = ok["processes"]
    assert (gpu_process["pid"], gpu_process["memory_used_bytes"]) == (sleeper.pid, 2048 * MIB)
    assert gpu_process["sm_util_percent"] in {40.0 + t for t in range(4)}
    assert (lost["uuid"], lost["lost"], lost["util_percent"]) == ("GPU-1", True, None)
    (row,) = [p for p in document["processes"] if p["pid"] == sleeper.pid]
    assert row["gpu_memory_bytes"] == 2048 * MIB


GPU_CHECK = Path(__file__).parents[2] / "scripts" / "gpu_check.py"


def test_gpu_check_agrees_with_raw_nvml_through_the_c_library(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    gpm = {str(GPM_SM_OCCUPANCY): 40.0, str(GPM_TENSOR): 20.0}
    scenario = {"devices": [
        {"gpm_supported": True, "gpm": gpm, "processes": [{"pid": os.getpid(), "memory": MIB}]},
        {"uuid": "GPU-1"},
    ]}
    env = fake_nvml.env(scenario, tmp_path)
    done = subprocess.run([sys.executable, str(GPU_CHECK), "--no-load"], capture_output=True,
                          text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "driver 580.65.06, 2 device(s)" in done.stdout
    assert "FAIL" not in done.stdout


# gpu_check's own checks, in a child over the C library: raw NVML against gputop's source.
GPU_CHECK_CHILD = """
import json, sys
from dataclasses import replace
sys.path.insert(0, {scripts!r})
import gpu_check
import pynvml as nv
from gputop.export.snapshot import gpu_json
nv.nvmlInit()
ctx = gpu_check.Context(nv, "580.65.06")
out = {{"problems": gpu_check.check_raw_vs_source(ctx), "raw": [
    {{k: v for k, v in raw.items() if not isinstance(v, gpu_check.Unavailable)}}
    for raw in ctx.raw]}}
gpu = replace(ctx.report.gpus[0], temperature_c=None, sm_occupancy_percent=None)
out["lost_fields"] = gpu_check.compare(ctx.raw[0], gpu, ctx)
good = [gpu_json(g) for g in ctx.report.gpus]
bad = [dict(good[0], power_w=None, tensor_active_percent=None), *good[1:]]
once = {{}}
for name, doc in (
    ("good", {{"schema": "gputop.snapshot/1", "gpu_source": "nvml", "gpus": good}}),
    ("bad", {{"schema": "gputop.snapshot/1", "gpu_source": "none", "gpus": bad}}),
):
    path = {folder!r} + "/" + name + ".json"
    open(path, "w").write(json.dumps(doc))
    gpu_check.ONCE_COMMAND = ["cat", path]
    once[name] = gpu_check.check_once_json(ctx)
gpu_check.ONCE_COMMAND = ["false"]
once["fails"] = gpu_check.check_once_json(ctx)
out["once"] = once
nv.nvmlShutdown()
print(json.dumps(out))
"""


def test_gpu_check_compares_raw_nvml_and_flags_what_gputop_lost(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    gpm = {str(GPM_SM_OCCUPANCY): 40.0, str(GPM_TENSOR): 20.0}
    scenario = {"devices": [
        {"gpm_supported": True, "gpm": gpm, "processes": [{"pid": 99, "memory": MIB}]},
        {"uuid": "GPU-1"},
    ]}
    code = GPU_CHECK_CHILD.format(scripts=str(GPU_CHECK.parent), folder=str(tmp_path))
    done = fake_nvml.python(code, scenario, tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["problems"] == []
    assert [raw["uuid"] for raw in out["raw"]] == [DEFAULT_UUID, "GPU-1"]
    assert [raw["gpm_supported"] for raw in out["raw"]] == [True, False]
    assert out["raw"][0]["processes"] == [[99, MIB]]
    assert out["raw"][0]["pcie_counters"] == [[NOT_SUPPORTED, 0]] * 2
    assert out["lost_fields"] == [
        "temperature_c is None but raw NVML gives 55",
        "GPM is supported but gputop has no SM occupancy",
    ]
    assert out["once"] == {
        "good": [],
        "bad": [
            "JSON gpu_source is 'none', expected 'nvml'",
            "JSON gpus[0]: power_w is null (raw NVML: 300.0)",
            "JSON gpus[0]: tensor_active_percent is null though the GPU supports GPM",
        ],
        "fails": ["gputop --once --json exited 1: "],
    }
