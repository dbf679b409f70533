"""A real trainer pinned to one core that two busy loops share reads `cpu-starved`, with the
loops named, through `gputop --once --json --attach PID`; once they are killed its steps
recover, measured against its starved steps in the same test.

The trainer (tests/advice/trainer.py under `python -m gputop.probe`) and each loop run in a
favoured session of their own (tests/helpers/scheduling.py), pinned to CPU 0: the kernel
gives the three equal shares of that core, whatever else the host runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from statistics import median
from typing import Any

import pytest

from tests.helpers.advice_run import Trainer, probed_trainer
from tests.helpers.probe import trainer_env
from tests.helpers.scheduling import favoured

pytestmark = [pytest.mark.slow, pytest.mark.alone]  # it loads a core with busy loops

ROOT = Path(__file__).resolve().parents[2]
CORE = frozenset({0})
LOOP = "while True: pass"
SETTLE_S = 3.0  # the trainer steps this long in each condition before it is looked at
RECOVERED = 1.5  # three equal shares of a core: starved steps take about three times as long


@contextmanager
def busy_loops(count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`count` `python -c 'while True: pass'` pinned to CORE, as `taskset -c 0` would."""
    loops = [subprocess.Popen([sys.executable, "-c", LOOP], start_new_session=True,
                              preexec_fn=favoured(CORE), stdin=subprocess.DEVNULL)
             for _ in range(count)]
    try:
        yield loops
    finally:
        stop(loops)


def stop(loops: list[subprocess.Popen[bytes]]) -> None:
    for loop in loops:
        loop.kill()
    for loop in loops:
        loop.wait(timeout=30)


def snapshot(trainer: Trainer) -> dict[str, Any]:
    """`gputop --once --json --attach PID` of the trainer."""
    out = subprocess.run(
        [sys.executable, "-m", "gputop", "--once", "--json", "--attach", str(trainer.pid),
         "--interval", "1"],
        capture_output=True, text=True, cwd=ROOT, env=trainer_env(trainer.ring_dir),
        timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["attach"] is not None and doc["attach"]["pid"] == trainer.pid, doc["attach"]
    return doc


def newest_step(doc: dict[str, Any]) -> int:
    steps = doc["attach"]["steps"]
    assert steps, "no steps in the window"
    return max(s["step"] for s in steps)


def step_ms_after(doc: dict[str, Any], step: int) -> float:
    """The median duration of the window's steps numbered above `step`."""
    durations = [s["duration_ns"] / 1e6 for s in doc["attach"]["steps"] if s["step"] > step]
    assert len(durations) >= 5, f"too few steps after step {step}: {durations}"
    return median(durations)


def advice_of(doc: dict[str, Any], trainer: Trainer) -> dict[str, dict[str, Any]]:
    return {a["id"]: a for a in doc["advice"] if a["trainer_pid"] == trainer.pid}


def test_a_trainer_sharing_its_core_with_busy_loops_is_starved_until_they_go(
        tmp_path: Path) -> None:
    with probed_trainer(tmp_path, "--step-spin-ms", "10", cpus=CORE) as trainer:
        time.sleep(SETTLE_S)
        alone = snapshot(trainer)
        assert alone["attach"]["cpu_starved"] is None, alone["attach"]["cpu_starved"]
        assert "cpu-starved" not in advice_of(alone, trainer)
        before_loops = newest_step(alone)

        with busy_loops(2) as loops:
            time.sleep(SETTLE_S)
            starved = snapshot(trainer)
            stop(loops)
        found = starved["attach"]["cpu_starved"]
        assert found is not None, [p for p in starved["processes"] if p["pid"] == trainer.pid]
        loop_pids = {loop.pid for loop in loops}
        assert loop_pids <= {o["pid"] for o in found["competitors"]}, found
        assert found["main_thread_wait_percent"] >= 25.0
        assert found["cores_got"] < found["cores_wanted"] <= found["cores_allowed"] == 1
        advised = advice_of(starved, trainer)
        assert "cpu-threads" not in advised
        words = advised["cpu-starved"]["evidence"]
        assert f"waited for a core {found['main_thread_wait_percent']:.0f}%" in words
        for pid in loop_pids:
            assert f"pid {pid} (" in words and "while True: pass" in words
        predicted = advised["cpu-starved"]["action"]
        assert "Predicted: mean step about" in predicted, predicted
        starved_ms = step_ms_after(starved, before_loops + 1)
        loops_gone = newest_step(starved)

        time.sleep(SETTLE_S)
        recovered = snapshot(trainer)
        recovered_ms = step_ms_after(recovered, loops_gone + 1)
        print(f"\nstep {starved_ms:.1f} ms starved, {recovered_ms:.1f} ms once the loops "
              f"are gone; {predicted.split('Predicted: ')[1]}")
        assert recovered_ms * RECOVERED <= starved_ms
        assert recovered["attach"]["cpu_starved"] is None, recovered["attach"]["cpu_starved"]
        assert "cpu-starved" not in advice_of(recovered, trainer)
