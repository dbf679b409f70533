"""The NVML source where the C NVML cannot stand in: no driver, or a binding unlike the real one.

Every GPU row and NVML error is tested through the real nvidia-ml-py over the C library in
test_nvml_c.py. What stays here needs the Python side changed, which a C library cannot do:
a binding that lacks a function or a struct version, or an older binding that hands back raw
not-available markers; those run against the stand-in pynvml (tests/sources/stand_in_pynvml).
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from gputop.core.model import GpuReport
from gputop.sources import nvml as nvml_source
from gputop.sources.gpu import open_gpu_source
from gputop.sources.nvml import NvmlSource
from tests.helpers.nvml import load_stand_in, open_source

MIB = 1 << 20


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# ------------------------------------------------------------------ no NVML at all


def test_pynvml_not_importable_gives_none_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    report = open_gpu_source().sample()
    assert report.source == "none"
    assert report.note == "no GPU data: nvidia-ml-py (module pynvml) is not installed"


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


# ------------------------------------------------------------------ a binding unlike the real one


def test_binding_without_a_function_is_remembered(
    nv: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(nv, "nvmlDeviceGetPowerUsage")
    gpu = open_source(nv).sample().gpus[0]
    assert gpu.power_w is None and gpu.util_percent == 50.0


def test_binding_without_field_values_falls_back_to_throughput(
    nv: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    nv.fake_driver.devices = [nv.FakeDevice(pcie_rx_bytes=0, pcie_tx_bytes=0)]
    monkeypatch.delattr(nv, "nvmlDeviceGetFieldValues")
    source = nvml_source.open_nvml(clock=Clock())
    assert isinstance(source, NvmlSource)
    for _ in range(3):
        gpu = source.sample().gpus[0]
        assert (gpu.pcie_rx_bytes_per_s, gpu.pcie_tx_bytes_per_s) == (1000 * 1024.0, 500 * 1024.0)
    assert nv.fake_driver.calls["nvmlDeviceGetFieldValues"] == 0


def test_memory_v2_missing_from_bindings_uses_v1_only(
    nv: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(nv, "nvmlMemory_v2")
    gpu = open_source(nv).sample().gpus[0]
    assert gpu.memory_used_bytes == 10 * 2**30 + 512 * MIB
    assert nv.fake_driver.calls["nvmlDeviceGetMemoryInfo_v2"] == 0


def test_raw_not_available_marker_from_older_bindings_is_none(
    nv: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = nv.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
    raw = nv.nvmlFriendlyObject({"pid": 9, "usedGpuMemory": marker})
    monkeypatch.setattr(nv, "nvmlDeviceGetComputeRunningProcesses_v3", lambda handle: [raw])
    (process,) = open_source(nv).sample().gpus[0].processes
    assert (process.pid, process.memory_used_bytes) == (9, None)


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
