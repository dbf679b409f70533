"""The stand-in pynvml (NVML's error paths, where no driver exists) as a fixture."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest

from gputop.sources.gpu import open_gpu_source
from gputop.sources.nvml import NvmlSource
from tests.helpers.modules import load_file

STAND_IN = Path(__file__).resolve().parents[1] / "sources" / "stand_in_pynvml" / "pynvml.py"


def load_stand_in() -> ModuleType:
    """A fresh stand-in module, so no fake-driver state leaks between tests."""
    return load_file("pynvml", STAND_IN)


@pytest.fixture
def nv(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The stand-in as `pynvml` (what `import pynvml` inside the source finds), one healthy GPU."""
    monkeypatch.setitem(sys.modules, "pynvml", None)  # so teardown restores what was there
    module = load_stand_in()
    module.fake_install(module.FakeDriver(devices=[module.FakeDevice()]))
    return module


def open_source(nv: ModuleType) -> NvmlSource:
    """The GPU source gputop opens, checked to be NVML's (the stand-in's)."""
    source = open_gpu_source()
    assert isinstance(source, NvmlSource), source.sample().note
    return source
