"""`gputop --demo SCENARIO --once`: the demo's real processes run until its trainer has a
verdict, the one sample is printed, and nothing the demo started outlives the command, also
on Ctrl-C and on an error."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import psutil
import pytest

from gputop.app.children import group_members
from gputop.app.demo_processes import demo_processes
from tests.helpers.cli import ROOT

pytestmark = pytest.mark.slow

# --once's own bound on the wait is 30 s; this one only keeps a hung command from hanging the
# suite (torch's import on a loaded 2-core box included)
RUN_BOUND_S = 180.0
STARTED_S = 120.0
VERDICTS = {"data-starved": "data-bound", "host-bound": "host-bound",
            "cpu-starved": "cpu-starved"}
ADVICE = {"data-bound": {"raise-num-workers", "io-bound-loading"},
          "host-bound": {"host-bound"}, "cpu-starved": {"cpu-starved"}}


def start_once(scenario: str) -> subprocess.Popen[str]:
    """`gputop --demo SCENARIO --once --json`, as a user runs it."""
    env = {**os.environ, "GPUTOP_DEBUG": ""}
    return subprocess.Popen([sys.executable, "-m", "gputop", "--demo", scenario, "--once",
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env=env)


def started_by(pid: int, rows: list[dict[str, Any]]) -> dict[int, list[str]]:
    """The processes among the JSON's `rows` that descend from `pid`, with their command
    lines."""
    children: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        children.setdefault(row["ppid"], []).append(row)
    found, todo = {}, [pid]
    while todo:
        for row in children.get(todo.pop(), []):
            found[row["pid"]] = row["cmdline"]
            todo.append(row["pid"])
    return found


def descendants(pid: int) -> dict[int, tuple[int, list[str]]]:
    """The processes running under `pid` now, with their parent and command line."""
    found = {}
    for process in psutil.Process(pid).children(recursive=True):
        try:
            found[process.pid] = (process.ppid(), process.cmdline())
        except psutil.Error:
            continue  # gone meanwhile
    return found


def running(pid: int, cmdline: list[str] | None = None) -> bool:
    """Whether `pid` runs (a zombie does not), as the same program when `cmdline` is given."""
    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE and (
            cmdline is None or process.cmdline() == cmdline)
    except psutil.Error:
        return False


def left_behind(started: dict[int, list[str]]) -> list[int]:
    """What still runs of `started`, or of the process groups they lead."""
    alive = [pid for pid, cmdline in started.items() if running(pid, cmdline)]
    return alive + [pid for leader in started for pid in group_members(leader)]


@pytest.mark.parametrize("scenario", [
    "data-starved", "host-bound",
    pytest.param("cpu-starved", marks=pytest.mark.alone),  # its demo loads a core on purpose
])
def test_demo_once_has_the_scenarios_trainer_and_leaves_nothing_behind(scenario: str) -> None:
    pytest.importorskip("torch")
    once = start_once(scenario)
    out, err = once.communicate(timeout=RUN_BOUND_S)
    assert once.returncode == 0, err
    frame = json.loads(out)
    started = started_by(once.pid, frame["processes"])
    assert left_behind(started) == [], started
    assert frame["simulated"] and frame["gpu_scenario"] == scenario
    attach = frame["attach"]
    assert attach is not None, "no trainer"
    assert "gputop.app.demo_trainer" in " ".join(started.get(attach["pid"], [])), started
    assert attach["pid"] in {p["pid"] for g in frame["gpus"] for p in g["processes"]}
    summary, expected = attach["summary"], VERDICTS[scenario]
    if summary["verdict"] == "cpu-starved" != expected:  # a host loaded by others starves
        assert summary["steps_verdict"] == expected, summary  # any trainer: its steps say
    else:
        assert summary["verdict"] == expected, summary
    ids = {a["id"] for a in frame["advice"]}
    assert ids & ADVICE[summary["verdict"]], ids


def test_ctrl_c_stops_every_demo_process() -> None:
    pytest.importorskip("torch")
    once = start_once("data-starved")
    try:
        deadline = time.monotonic() + STARTED_S
        while True:  # the trainer and its DataLoader workers: a tree two deep
            assert once.poll() is None, once.communicate()
            started = descendants(once.pid)
            if any(ppid != once.pid for ppid, _ in started.values()):
                break
            assert time.monotonic() < deadline, "the demo trainer started no workers"
            time.sleep(0.2)
        once.send_signal(signal.SIGINT)
        out, _ = once.communicate(timeout=RUN_BOUND_S)
    finally:
        if once.poll() is None:
            once.kill()
            once.communicate()
    assert once.returncode == 130 and out == ""
    assert left_behind({pid: cmdline for pid, (_, cmdline) in started.items()}) == [], started


def test_an_error_inside_the_demo_stops_its_processes() -> None:
    with pytest.raises(RuntimeError), demo_processes("mixed", None) as demo:
        assert demo.trainer is not None and demo.holder is not None
        started = [demo.trainer.pid, demo.holder.pid]
        assert all(running(pid) for pid in started)
        raise RuntimeError("a sampler's bug")
    assert [pid for pid in started if running(pid)] == []
    assert [pid for leader in started for pid in group_members(leader)] == []
