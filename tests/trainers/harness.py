"""Start real trainer scripts for tests, wait on their ready-file, and always kill them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
READY_TIMEOUT_S = 120.0


class TrainerFailed(RuntimeError):
    """The trainer exited or never became ready; carries its stderr."""


@contextmanager
def running_trainer(
    out: Path, args: Sequence[str] = (), script: str = "loader_trainer.py",
    prefix: Sequence[str] = (),
) -> Iterator[dict]:
    """Run a trainer in its own session until its READY file appears; kill the session after."""
    out.mkdir(parents=True, exist_ok=True)
    err = open(out / "stderr.txt", "w+b")  # noqa: SIM115 - closed in finally
    command = [*prefix] or [sys.executable]
    proc = subprocess.Popen(
        [*command, str(HERE / script), "--out", str(out), *args],
        stdout=subprocess.DEVNULL, stderr=err, start_new_session=True, cwd=REPO,
    )
    try:
        yield _wait_ready(proc, out / "READY", err)
    finally:
        _kill_session(proc)
        err.close()


def _wait_ready(proc: subprocess.Popen[bytes], ready: Path, err) -> dict:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            err.seek(0)
            raise TrainerFailed(f"trainer not ready (rc={proc.returncode}): "
                                f"{err.read().decode(errors='replace')[-2000:]}")
        time.sleep(0.05)
    return json.loads(ready.read_text())


def _kill_session(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the trainer's whole session (workers, forkserver, resource tracker) and reap."""
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
