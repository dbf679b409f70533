"""gpu-idle on real processes: a sleeping one and a stopped one holding GPU memory through the
GPU sources the tests use (the stand-in NVML and the simulated GPUs), and `gputop --demo mixed
--once`, whose idle holder gets gpu-idle and never the DataLoader's advice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType

import pytest

from gputop.advice import Advisor
from gputop.core.model import Advice, Frame
from gputop.frames.sampler import Sampler
from gputop.sources.host import ProcHostSource
from gputop.sources.processes import ProcProcessSource
from gputop.sources.simulated import SimulatedGpuSource
from tests.helpers.cli import gputop
from tests.helpers.nvml import (
    nv,  # noqa: F401  (the stand-in pynvml fixture)
    open_source,
)
from tests.helpers.processes import gone

GIB = 1 << 30
TICK_S = 0.2
MAX_TICKS = 60  # a bound for a loaded box, not a speed check
LOADER_WORDS = ("num_workers", "pin_memory", "DataLoader")
SLEEPER = "import time; time.sleep(600)"
SPINNER = "while True: pass"


@contextmanager
def running(code: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real `python -c CODE`, ended when the block is left."""
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        yield child
    finally:
        child.send_signal(signal.SIGCONT)  # a stopped child would not take SIGKILL's reaping
        child.kill()
        child.wait()


def until(sampler: Sampler, done: Callable[[Frame], bool]) -> Frame:
    """Sample every TICK_S until `done` holds (MAX_TICKS at most)."""
    for _ in range(MAX_TICKS):
        frame = sampler.sample()
        if done(frame):
            return frame
        sampler.wait(TICK_S)
    raise AssertionError(f"not seen in {MAX_TICKS} ticks: {frame.advice}")


def found(frame: Frame, rule: str) -> Advice | None:
    return next((a for a in frame.advice if a.id == rule), None)


def sampler_on(gpu: object) -> Sampler:
    return Sampler(gpu=gpu, host=ProcHostSource(), processes=ProcProcessSource(),  # type: ignore[arg-type]
                   advisor=Advisor(on_after=1), interval_s=TICK_S)


def test_a_sleeping_then_stopped_holder_gets_gpu_idle_never_loader_advice(
        nv: ModuleType) -> None:  # noqa: F811
    with running(SLEEPER) as sleeper:
        nv.fake_driver.devices = [nv.FakeDevice(util=0, memory_util=0, memory_used=78 * GIB,
                                                processes=[(sleeper.pid, 78 * GIB)])]
        sampler = sampler_on(open_source(nv))
        try:
            idle = until(sampler, lambda f: found(f, "gpu-idle") is not None)
            got = found(idle, "gpu-idle")
            assert got is not None
            assert f"GPU 0 holds 78.0 GiB for PID {sleeper.pid} (" in got.evidence
            program = os.path.basename(sys.executable)
            assert f"{program} -c): an idle process, sleeping, no CPU for " in got.evidence
            assert f"`kill {sleeper.pid}`" in got.action and "the whole GPU 0" in got.action
            row = idle.process(sleeper.pid)
            assert row is not None and row.cpu_idle_s is not None and row.cpu_idle_s > 0
            # However long the GPU stays quiet, it is never called a wait for input.
            for _ in range(6):
                frame = sampler.sample()
                assert found(frame, "gpu-starved") is None, frame.advice
                assert not any(w in a.action for a in frame.advice for w in LOADER_WORDS)
                sampler.wait(TICK_S)
            sleeper.send_signal(signal.SIGSTOP)
            stopped = until(sampler, lambda f: "a stopped job" in (
                getattr(found(f, "gpu-idle"), "evidence", "")))
            row = stopped.process(sleeper.pid)
            assert row is not None and row.state == "T"
            got = found(stopped, "gpu-idle")
            assert got is not None and "stopped (T)" in got.evidence
            assert f"`kill -CONT {sleeper.pid}` to resume it" in got.action
        finally:
            sampler.close()


def test_on_simulated_gpus_the_busy_holder_is_starved_and_the_idle_one_is_idle() -> None:
    with running(SLEEPER) as sleeper, running(SPINNER) as spinner:
        # "mixed": GPU 0 the data-starved sawtooth, GPU 2 memory full at zero util.
        gpu = SimulatedGpuSource("mixed", count=4, owner_pids=[spinner.pid, 0, sleeper.pid])
        sampler = sampler_on(gpu)
        try:
            frame = until(sampler, lambda f: found(f, "gpu-starved") is not None
                          and found(f, "gpu-idle") is not None)
        finally:
            sampler.close()
    starved, idle = found(frame, "gpu-starved"), found(frame, "gpu-idle")
    assert starved is not None and idle is not None
    assert "GPU 0:" in starved.evidence and "GPU 2" not in starved.evidence
    assert f"gputop --attach {spinner.pid}" in starved.action
    assert "--attach PID" not in starved.action
    assert idle.title == "GPU 2 is held by an idle process"
    assert f"for PID {sleeper.pid} (" in idle.evidence and str(spinner.pid) not in idle.evidence


@pytest.mark.slow  # --demo --once starts the scenario's trainer and waits for its verdict
def test_demo_mixed_once_names_its_idle_holder() -> None:
    out = gputop("--demo", "mixed", "--once", "--json", "--interval", "0.5", "--membw", "off")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["simulated"] is True
    (held,) = [g for g in doc["gpus"] if g["index"] == 2]
    (holder,) = held["processes"]
    pid = holder["pid"]
    idle = [a for a in doc["advice"] if a["id"] == "gpu-idle"]
    assert len(idle) == 1, doc["advice"]
    assert idle[0]["evidence"].startswith("GPU 2 holds ") and f"PID {pid} (" in idle[0][
        "evidence"]
    assert "gputop.app.demo_holder" in idle[0]["evidence"]
    assert not [a for a in doc["advice"] if "GPU 2" in a["evidence"] and any(
        w in a["action"] for w in LOADER_WORDS)]
    assert gone(pid)  # the demo's holder ends with gputop
    text = gputop("--demo", "mixed", "--once", "--interval", "0.5", "--membw", "off")
    assert text.returncode == 0, text.stderr
    assert "SIMULATED GPUs — scenario mixed" in text.stdout
    assert "[info] GPU 2 is held by an idle process" in text.stdout  # idle ~1 s: info
