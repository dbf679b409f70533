"""`k` in a real terminal (tmux) on a real torch trainer with DataLoader workers: the filter
is on screen while typed, the confirmation names the trainer and every worker, and t ends
them all; under `gputop run --readonly`, k sends nothing."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from gputop.tui.views.signals import READ_ONLY
from tests.helpers import tmux
from tests.helpers.processes import alive
from tests.helpers.trainer_harness import LOADER_TRAINER, running_trainer

REPO = Path(__file__).resolve().parents[2]
PYTHON = tmux.PYTHON
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


def _gputop(args: str) -> str:
    return (f"env PYTHONPATH={REPO} TERM=xterm-256color {PYTHON} -m gputop --membw off "
            f"--interval 0.5 {args}")


def _flat(screen: str) -> str:
    """The screen's words on one line (a long question wraps)."""
    return " ".join(screen.split())


def _keys(name: str, *keys: str) -> None:
    tmux.tmux("send-keys", "-t", name, *keys)


def _wait_until_gone(pids: list[int], timeout_s: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]


def test_k_with_confirmation_ends_a_real_trainer_and_its_workers(tmp_path: Path) -> None:
    with running_trainer(tmp_path / "trainer", ["--workers", "2"]) as ready, \
            tmux.session(REPO, width=120, height=40) as name:
        trainer, workers = ready["pid"], ready["worker_pids"]
        tmux.spawn(name, _gputop(""))
        tmux.wait_for(name, lambda s: "COMMAND" in s and "[2w" in s)  # the trainer, grouped
        _keys(name, "/", *str(trainer))
        tmux.wait_for(name, lambda s: str(trainer) in s.splitlines()[-2])  # above the keys
        _keys(name, "Enter")
        tmux.wait_for(name, lambda s: f"filter: {trainer} · sort: %CPU" in s)
        _keys(name, "k")
        question = _flat(tmux.wait_for(name, lambda s: "send a signal to" in s))
        assert f"send a signal to 3 processes: {trainer} " in question
        assert re.search(rf"{trainer} \S+ \(trainer\)", question), question
        for pid in workers:
            assert f"{pid} pt_data_worker (worker)" in question
        assert "t SIGTERM" in question and "K SIGKILL" in question and "Esc cancel" in question
        assert all(alive(pid) for pid in (trainer, *workers))  # nothing sent before the answer
        _keys(name, "t")
        assert _wait_until_gone([trainer, *workers]) == []
        tmux.wait_for(name, lambda s: "SIGTERM sent to 3 processes" in _flat(s))
        _keys(name, "q")
        assert tmux.exit_code(name) == 0


def test_readonly_run_sends_no_signal(tmp_path: Path) -> None:
    out = tmp_path / "trainer"
    out.mkdir()
    command = (f"{_gputop('').replace(' -m gputop ', ' -m gputop run ')} --readonly "
               f"--log {tmp_path / 'run.log'} -- {PYTHON} {LOADER_TRAINER} --out {out} "
               "--workers 2")
    ready: dict = {}
    try:
        with tmux.session(REPO, width=120, height=40) as name:
            tmux.spawn(name, command)
            ready = _ready(out / "READY")
            tmux.wait_for(name, lambda s: "COMMAND" in s and "[2w" in s)
            _keys(name, "k")
            screen = _flat(tmux.wait_for(name, lambda s: READ_ONLY in _flat(s)))
            assert "send a signal" not in screen and " k kill " not in screen
            assert all(alive(pid) for pid in (ready["pid"], *ready["worker_pids"]))
            _keys(name, "q")
            tmux.wait_for(name, lambda s: "training is still running" in s)
            _keys(name, "Q")  # stop it, as without --readonly: q's question still works
            tmux.exit_code(name, timeout_s=60)
            assert _wait_until_gone([ready["pid"]]) == []
    finally:
        for pid in (ready.get("pid"), *ready.get("worker_pids", ())):
            with contextlib.suppress(ProcessLookupError, TypeError):
                os.kill(pid, signal.SIGKILL)


def _ready(path: Path, timeout_s: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"the trainer never wrote {path}"
        time.sleep(0.1)
    return json.loads(path.read_text())
