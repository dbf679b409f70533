"""Issue 38: `python -m gputop.probe` follows the program's Python children (trainers started
by torch.multiprocessing spawn or forkserver, as in mnist_hogwild), and `--once --json
--attach PARENT` shows their steps, printing JSON while none has a ring yet."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.probe import ROOT, TRAINERS, trainer_env

pytestmark = pytest.mark.slow
WAITS = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.02)\n"
CHILD = ("import subprocess, sys\n"
         "code = 'import sys; print(\"gputop.probe\" in sys.modules)'\n"
         "subprocess.run([sys.executable, '-c', code], check=True)\n")


def _attach_once(pid: int, ring_dir: Path) -> subprocess.CompletedProcess[str]:
    """`gputop --once --json --attach PID`, as a user runs it beside the program."""
    env = {**trainer_env(ring_dir), "GPUTOP_DEBUG": ""}
    return subprocess.run(
        [sys.executable, "-m", "gputop", "--once", "--json", "--attach", str(pid),
         "--interval", "0.2"], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)


def _attached(out: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """The attached trainers of a snapshot that exited 0."""
    assert out.returncode == 0, out.stderr
    snapshot = json.loads(out.stdout)
    return [a for a in (snapshot["attach"], *snapshot["attach_ranks"]) if a is not None]


def test_a_python_child_of_the_program_loads_the_probe(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(CHILD)
    out = subprocess.run([sys.executable, "-m", "gputop.probe", str(script)],
                         capture_output=True, text=True, timeout=120,
                         env=trainer_env(tmp_path), cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"]


def test_attaching_to_a_probed_process_without_a_ring_prints_its_state(tmp_path: Path) -> None:
    """Before a ring exists (its own or its children's) the answer is JSON that says so."""
    script, stop = tmp_path / "waits.py", tmp_path / "stop"
    script.write_text(WAITS)
    proc = subprocess.Popen([sys.executable, "-m", "gputop.probe", str(script), str(stop)],
                            env=trainer_env(tmp_path), cwd=ROOT)
    try:
        attached = _attached(_attach_once(proc.pid, tmp_path))
    finally:
        stop.touch()
        proc.wait(timeout=60)
    assert [(a["pid"], a["steps"]) for a in attached] == [(proc.pid, [])]
    assert attached[0]["error"] and "no probe ring yet" in attached[0]["error"]


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_attaching_to_the_parent_shows_its_spawned_trainers_steps(
    tmp_path: Path, method: str
) -> None:
    stop = tmp_path / "stop"
    parent = subprocess.Popen(
        [sys.executable, "-m", "gputop.probe", str(TRAINERS / "hogwild.py"), method, str(stop)],
        env=trainer_env(tmp_path), cwd=ROOT)
    try:
        attached: list[dict[str, Any]] = []
        deadline = time.monotonic() + 180
        while parent.poll() is None and time.monotonic() < deadline:
            attached = _attached(_attach_once(parent.pid, tmp_path))  # every answer: JSON, 0
            if sum(bool(a["steps"]) and bool(a["summary"]["steps"]) for a in attached) == 2:
                break
        trainers = {int((tmp_path / f"stop.{rank}.pid").read_text()) for rank in range(2)}
    finally:
        stop.touch()
        parent.wait(timeout=120)
    assert parent.returncode == 0
    # the two trainers, each with its steps; neither the parent nor a DataLoader worker
    assert sorted(a["pid"] for a in attached) == sorted(trainers)
    assert all(a["steps"] and a["summary"]["steps"] for a in attached)
    assert all(a["error"] is None for a in attached)
