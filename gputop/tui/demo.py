"""Starts and stops the real demo trainer that `gputop --demo` shows on simulated GPU 0."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class DemoTrainer:
    """A running `python -m gputop.demo_trainer`; it also exits by itself when gputop dies."""

    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        """The trainer's PID: hand it to the simulated GPU source as GPU 0's owner."""
        return self.process.pid

    def stop(self, timeout_s: float = 3.0) -> None:
        """Terminate the trainer (its workers follow it) and reap it."""
        if self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout_s)


def start_demo_trainer(workers: int = 3, extra_args: Sequence[str] = ()) -> DemoTrainer:
    """Start the demo trainer quietly in the background, with the repo on its path."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    process = subprocess.Popen(
        [sys.executable, "-m", "gputop.demo_trainer", "--workers", str(workers), *extra_args],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=env, close_fds=True,
    )
    return DemoTrainer(process)
