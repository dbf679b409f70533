"""Builds the C NVML (tests/nvml_c/fake_nvml.c) with gcc and runs code against it.

The library is compiled against nvml.h from the pinned nvidia-nvml-dev wheel into a directory
as `libnvidia-ml.so.1`; a child with that directory on LD_LIBRARY_PATH loads it through the
real nvidia-ml-py (its own `CDLL("libnvidia-ml.so.1")`), with nothing patched in Python.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SOURCES = (HERE / "fake_nvml.c", HERE / "json.c")
SAMPLER = HERE / "sample_source.py"
LIBRARY = "libnvidia-ml.so.1"
SCENARIO_ENV = "GPUTOP_FAKE_NVML_SCENARIO"
LOG_ENV = "GPUTOP_FAKE_NVML_LOG"
MIB = 1 << 20


def nvml_header_dir() -> Path:
    """The folder holding NVIDIA's nvml.h, from the nvidia-nvml-dev wheel."""
    spec = importlib.util.find_spec("nvidia")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        include = Path(folder) / "cu13" / "include"
        if (include / "nvml.h").is_file():
            return include
    pytest.fail("nvml.h not found: install the test tools (pip install -r requirements/test.lock)")


def compile_library(out_dir: Path, defines: tuple[str, ...] = ()) -> Path:
    """`out_dir` holding a freshly built libnvidia-ml.so.1 (with `-D` for each define)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("gcc not found: the C NVML needs it (.ci/run installs it)")
    out_dir.mkdir(parents=True, exist_ok=True)
    command = [
        gcc, "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror",
        "-Wno-deprecated-declarations", f"-Wl,-soname,{LIBRARY}", f"-I{nvml_header_dir()}",
        *(f"-D{d}" for d in defines), "-o", str(out_dir / LIBRARY), *map(str, SOURCES),
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out_dir


@dataclass(frozen=True)
class Call:
    """One call the C NVML answered; device and tick are None for calls on no device."""

    device: int | None
    function: str
    code: int
    tick: int | None


@dataclass
class CallLog:
    """The calls the C NVML answered, in order, from its log."""

    calls: list[Call]

    @classmethod
    def read(cls, path: Path) -> CallLog:
        calls = []
        for line in path.read_text().splitlines() if path.exists() else []:
            device, function, code, tick = line.split()
            calls.append(Call(None if device == "-" else int(device), function, int(code),
                              None if tick == "-" else int(tick)))
        return cls(calls)

    def of(self, function: str, device: int | None = None) -> list[Call]:
        """The calls of `function` (on `device`, where given)."""
        return [c for c in self.calls if c.function == function and device in (None, c.device)]

    def count(self, function: str, device: int | None = None) -> int:
        """How many times `function` was called (on `device`, where given)."""
        return len(self.of(function, device))

    def per_function(self) -> Counter[str]:
        return Counter(c.function for c in self.calls)


@dataclass
class Run:
    """What a child printed and the calls it made."""

    out: dict[str, Any]
    log: CallLog
    stderr: str


@dataclass
class FakeNvml:
    """The C NVML, built once per variant (a set of defines) for the test session."""

    root: Path
    built: dict[tuple[str, ...], Path] = field(default_factory=dict)

    def library(self, *defines: str) -> Path:
        """The folder with the library built with these defines (compiled on first use)."""
        key = tuple(sorted(defines))
        if key not in self.built:
            name = "-".join(d.lower() for d in key) or "plain"
            self.built[key] = compile_library(self.root / name, key)
        return self.built[key]

    def env(
        self, scenario: dict[str, Any], folder: Path, defines: tuple[str, ...] = ()
    ) -> dict[str, str]:
        """An environment whose libnvidia-ml.so.1 is the C NVML playing `scenario`."""
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "scenario.json"
        path.write_text(json.dumps(scenario))
        log = folder / "nvml-calls.log"
        log.unlink(missing_ok=True)
        lib = self.library(*defines)
        env = {**os.environ, SCENARIO_ENV: str(path), LOG_ENV: str(log)}
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(lib), env.get("LD_LIBRARY_PATH")) if p
        )
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        return env

    def sample(
        self, scenario: dict[str, Any], folder: Path, ticks: int = 1,
        defines: tuple[str, ...] = (), clock_step: float = 1.0,
    ) -> Run:
        """gputop's NVML source sampled `ticks` times in a child (tests/nvml_c/sample_source.py)."""
        env = self.env(scenario, folder, defines)
        done = subprocess.run(
            [sys.executable, str(SAMPLER), str(ticks), str(clock_step)],
            capture_output=True, text=True, env=env, timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return Run(json.loads(done.stdout), CallLog.read(folder / "nvml-calls.log"), done.stderr)

    def python(
        self, code: str, scenario: dict[str, Any], folder: Path, defines: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess[str]:
        """`code` run by this Python in a child whose NVML is the C library playing `scenario`."""
        return subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True,
            env=self.env(scenario, folder, defines), timeout=120,
        )


@pytest.fixture(scope="session")
def fake_nvml(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeNvml]:
    """The C NVML builder for the session (each variant compiled once)."""
    yield FakeNvml(tmp_path_factory.mktemp("nvml_c"))
