"""Each --demo scenario's trainer behaves as its simulated GPUs look, so the GPU rows, the
step pane's verdict and the advice tell one story: the real demo trainer, the real sources."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

from gputop.advice import Advisor
from gputop.app.children import DemoTrainer, start_demo_trainer
from gputop.app.demo_cpu_hog import PROCESS_NAME
from gputop.app.demo_trainer import NO_TRAINER, SHAPES, parse_args
from gputop.core.model import Frame
from gputop.frames.sampler import Sampler
from gputop.probe.ring import ring_path
from gputop.sources.attach import RingAttachSource
from gputop.sources.host import ProcHostSource
from gputop.sources.processes import ProcProcessSource
from gputop.sources.simulated import SAWTOOTH_PERIOD, SCENARIOS, SimulatedGpuSource
from tests.helpers.cli import gputop
from tests.helpers.tui import scenario_frames

pytestmark = pytest.mark.alone

READY_S = 120.0  # torch's import on a loaded 2-core box; a bound, not a speed check
TICK_S = 0.5
STEPS = 8
TICKS = 2 * SAWTOOTH_PERIOD + 2  # two rises of the sawtooth: what gpu-starved needs
COMPUTE_BOUND = ("compute-bound", "small-batch")
STARVED = ("data-starved", "mixed", "memory-full-util-zero")


def test_every_scenario_has_a_trainer_shape_or_none() -> None:
    assert set(SCENARIOS) == set(SHAPES) | set(NO_TRAINER)
    assert not set(SHAPES) & set(NO_TRAINER)


def test_scenario_shapes_say_what_they_are() -> None:
    computing, starved, small = (parse_args(["--scenario", s])
                                 for s in ("compute-bound", "data-starved", "small-batch"))
    assert computing.item_sleep == 0 and computing.passes > starved.passes
    assert starved.item_sleep > 0
    assert small.batch < computing.batch and small.optimizer == "adam"  # the update weighs
    assert parse_args(["--scenario", "compute-bound", "--workers", "5"]).workers == 5


def test_host_bound_and_cpu_starved_shapes_say_what_they_are() -> None:
    host, starved, busy = (parse_args(["--scenario", s])
                           for s in ("host-bound", "cpu-starved", "compute-bound"))
    assert host.loop == "get-batch" and host.workers == 0 and not host.cpu_hog
    assert starved.cpu_hog and not busy.cpu_hog and starved.loop == busy.loop == "loader"
    # starved computes as compute-bound does: only the cores it gets differ
    assert (starved.passes, starved.hidden, starved.batch) == (busy.passes, busy.hidden,
                                                               busy.batch)


def test_idle_demo_starts_no_trainer(monkeypatch: pytest.MonkeyPatch) -> None:
    import gputop.app.children
    import gputop.tui
    from gputop.app.live import run_live

    started: list[object] = []
    seen: list[int | None] = []
    monkeypatch.setattr(gputop.app.children, "start_demo_trainer",
                        lambda **kw: started.append(kw))

    def run_tui(sampler: object, attach_pid: int | None = None, **kw: object) -> int:
        seen.append(attach_pid)
        return 0

    monkeypatch.setattr(gputop.tui, "run_tui", run_tui)
    assert run_live(demo="idle", membw="off") == 0
    assert started == [] and seen == [None]


@contextmanager
def demo(scenario: str, ring_dir: Path, monkeypatch: pytest.MonkeyPatch,
         *extra: str) -> Iterator[DemoTrainer]:
    """The demo trainer `gputop --demo SCENARIO` starts, its ring in `ring_dir`."""
    monkeypatch.setenv("GPUTOP_RING_DIR", str(ring_dir))
    trainer = start_demo_trainer(extra_args=("--scenario", scenario, *extra))
    try:
        yield trainer
    finally:
        trainer.stop()


def watch(trainer: DemoTrainer, scenario: str, ring_dir: Path) -> Frame:
    """Sample as `gputop --demo` would until the trainer's window holds STEPS steps and the
    GPU history is long enough for the GPU rules."""
    sampler = Sampler(gpu=SimulatedGpuSource(scenario, count=1, owner_pids=[trainer.pid]),
                      host=ProcHostSource(), processes=ProcProcessSource(),
                      attach=RingAttachSource(directory=str(ring_dir)),
                      advisor=Advisor(on_after=1), interval_s=TICK_S)
    sampler.attach(trainer.pid)
    deadline = time.monotonic() + READY_S
    ticks = 0
    try:
        while True:
            frame = sampler.sample()
            ticks += 1
            steps = frame.attached[0].summary.steps if frame.attached else 0
            if steps >= STEPS and ticks >= TICKS:
                return frame
            assert trainer.process.poll() is None, "the demo trainer died"
            assert time.monotonic() < deadline, f"only {steps} steps; {frame.attached}"
            time.sleep(TICK_S)
    finally:
        sampler.close()


@pytest.mark.slow
@pytest.mark.parametrize("scenario", [*COMPUTE_BOUND, "data-starved", "memory-full-util-zero"])
def test_demo_trainer_agrees_with_its_gpus(scenario: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    with demo(scenario, tmp_path, monkeypatch) as trainer:
        frame = watch(trainer, scenario, tmp_path)
    (state,) = frame.attached
    ids = {a.id for a in frame.advice}
    if scenario in COMPUTE_BOUND:
        assert state.summary.verdict == "compute-bound", state.summary
        assert "gpu-starved" not in ids and not ids & {"raise-num-workers", "io-bound-loading"}
    else:
        assert state.summary.verdict == "data-bound", state.summary
        assert "gpu-starved" in ids
    assert ("raise-batch-size" in ids) is (scenario == "small-batch"), frame.advice
    assert state.config.batch_size == SHAPES[scenario].batch


INPUT_ITEMS = {"num-workers-zero", "raise-num-workers", "io-bound-loading", "pin-memory-off"}


@pytest.mark.parametrize("scenario", ["idle", *COMPUTE_BOUND, "data-starved",
                                      "memory-full-util-zero"])
def test_demo_frames_tell_one_story(scenario: str) -> None:
    # The frames the snapshot tests draw: what the GPU rows show, the verdict says, and the
    # advice follows from.
    shown = scenario_frames(scenario)
    last = shown[-1]
    utils = [f.gpu.gpus[0].util_percent or 0.0 for f in shown[-2 * SAWTOOTH_PERIOD:]]
    ids = {a.id for a in last.advice}
    if scenario in NO_TRAINER:
        assert not last.attached and not last.gpu.gpus[0].processes and not ids
        assert max(utils) == 0
        return
    (state,) = last.attached
    busy = min(utils) >= 90
    assert (state.summary.verdict == "compute-bound") is busy
    assert ("gpu-starved" in ids) is not busy
    assert bool(ids & INPUT_ITEMS) is not busy
    gpu0 = last.gpu.gpus[0]
    assert gpu0.memory_used_bytes is not None and gpu0.memory_total_bytes
    memory = gpu0.memory_used_bytes / gpu0.memory_total_bytes
    assert ("raise-batch-size" in ids) is (busy and memory < 0.6)
    assert state.config.batch_size == SHAPES[scenario].batch


ONCE_INTERVAL_S = "3"
PARTS = ("data", "h2d", "forward", "backward", "optimizer", "host", "sync")


def probed(trainer: DemoTrainer, ring_dir: Path) -> None:
    """Wait until the trainer's probe has made its ring (torch imported, the loop begun)."""
    deadline = time.monotonic() + READY_S
    while not Path(ring_path(trainer.pid, directory=str(ring_dir))).exists():
        assert trainer.process.poll() is None, "the demo trainer died"
        assert time.monotonic() < deadline, "the demo trainer made no ring"
        time.sleep(TICK_S)


def once_json(scenario: str, pid: int) -> dict[str, Any]:
    """`gputop --demo SCENARIO --once --json --attach PID`, as a user runs it."""
    out = gputop("--demo", scenario, "--once", "--json", "--attach", str(pid),
                 "--interval", ONCE_INTERVAL_S, timeout=READY_S)
    assert out.returncode == 0, out.stderr
    frame: dict[str, Any] = json.loads(out.stdout)
    return frame


def low_gpu_rows(frame: dict[str, Any], scenario: str) -> None:
    """The simulated GPUs play the scenario, far from busy: the GPU waits as the trainer does."""
    assert frame["simulated"] and frame["gpu_scenario"] == scenario
    assert frame["gpus"] and all(g["util_percent"] < 50 for g in frame["gpus"]), frame["gpus"]


def largest_part(step: dict[str, Any]) -> str:
    """The part of a step's wall time that took longest."""
    return max(PARTS, key=lambda part: step[f"{part}_ns"] or 0)


@pytest.mark.slow
@pytest.mark.parametrize("stand_in", [False, True], ids=["torch", "stdlib"])
def test_host_bound_demo_is_host_bound_in_get_batch(stand_in: bool, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    if not stand_in:
        pytest.importorskip("torch")
    extra = ("--stand-in",) if stand_in else ()
    with demo("host-bound", tmp_path, monkeypatch, *extra) as trainer:
        probed(trainer, tmp_path)
        frame = once_json("host-bound", trainer.pid)
    attach = frame["attach"]
    summary = attach["summary"]
    assert summary["verdict"] == "host-bound", summary
    steps = [s for s in attach["steps"] if not s["warmup"]]
    assert steps
    largest = [largest_part(s) for s in steps]
    assert largest.count("host") > len(steps) / 2, largest
    where = "demo_host_bound.py" if stand_in else "demo_trainer.py"  # torch's in the torch file
    assert (summary["host_site"] or "").startswith(f"get_batch ({where}:"), summary
    ids = {a["id"] for a in frame["advice"]}
    assert "host-bound" in ids and not ids & INPUT_ITEMS, ids
    low_gpu_rows(frame, "host-bound")


def the_hog(trainer: DemoTrainer) -> psutil.Process:
    """The demo's busy process, the trainer's child named for it."""
    deadline = time.monotonic() + READY_S
    while True:
        named = [p for p in psutil.Process(trainer.pid).children()
                 if p.name() == PROCESS_NAME.decode()]
        if named:
            return named[0]
        assert time.monotonic() < deadline, "the demo started no busy process"
        time.sleep(TICK_S)


@pytest.mark.slow
def test_cpu_starved_demo_names_its_own_busy_process(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    with demo("cpu-starved", tmp_path, monkeypatch) as trainer:
        hog = the_hog(trainer)
        assert "gputop.app.demo_cpu_hog" in " ".join(hog.cmdline())
        pinned = psutil.Process(trainer.pid).cpu_affinity()
        assert len(pinned) == 1 and hog.cpu_affinity() == pinned  # one core: its cost bound
        probed(trainer, tmp_path)
        frame = once_json("cpu-starved", trainer.pid)
    attach = frame["attach"]
    starved = attach["cpu_starved"]
    assert starved is not None, attach["summary"]
    named = {c["pid"]: c["command"] for c in starved["competitors"]}
    assert "demo_cpu_hog" in named.get(hog.pid, ""), starved
    assert starved["cores_allowed"] == 1 and starved["cores_got"] < starved["cores_wanted"]
    assert attach["summary"]["verdict"] == "cpu-starved", attach["summary"]
    ids = {a["id"] for a in frame["advice"]}
    assert "cpu-starved" in ids and not ids & INPUT_ITEMS, ids
    low_gpu_rows(frame, "cpu-starved")
    deadline = time.monotonic() + READY_S  # it goes with the demo that started it
    while hog.is_running() and hog.status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the busy process outlived the demo"
        time.sleep(TICK_S)
