"""The demo trainer: real workers named pt_data_worker, and it dies with its parent."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-m", "gputop.app.demo_trainer", *sys.argv[1:]])
print(child.pid, flush=True)
time.sleep(600)
"""


def _children_named(pid: int, comm: str) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        ppid = int(text.rsplit(")", 1)[1].split()[1])
        if ppid == pid and name == comm:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("mode", [["--stand-in"], []], ids=["stdlib", "torch"])
def test_workers_are_named_and_everything_exits_with_the_parent(mode: list[str]) -> None:
    if not mode:
        pytest.importorskip("torch")
    parent = subprocess.Popen([sys.executable, "-c", PARENT, "--workers", "2", *mode],
                              stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert parent.stdout is not None
        trainer = int(parent.stdout.readline())
        deadline = time.monotonic() + 120
        while len(_children_named(trainer, "pt_data_worker")) < 2:
            assert time.monotonic() < deadline, "workers never appeared"
            assert _alive(trainer), "the trainer died"
            time.sleep(0.2)
        workers = _children_named(trainer, "pt_data_worker")
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in (trainer, *workers)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in (trainer, *workers))
