"""Start real trainer scripts for tests, wait on their ready-file, and always kill them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

from tests.helpers.processes import alive
from tests.helpers.shm import of_killed, remove_torch_segments

REPO = Path(__file__).resolve().parents[2]
LOADER_TRAINER = REPO / "tests" / "sources" / "loader_trainer.py"
READY_TIMEOUT_S = 120.0
TAG = "GPUTOP_TEST_TRAINER"  # every process of one trainer run inherits it, torchrun ranks too
TRACKER = b"multiprocessing.resource_tracker"  # in a resource tracker's command line
TRACKER_GRACE_S = 10.0


class TrainerFailed(RuntimeError):
    """The trainer exited or never became ready; carries its stderr."""


@contextmanager
def running_trainer(
    out: Path, args: Sequence[str] = (), launcher: Sequence[str] = (), ranks: int = 0,
) -> Iterator[dict]:
    """Run the trainer in its own session until READY appears; kill the session after.

    With `launcher` (e.g. torchrun) and `ranks`, waits for every rank's READY and yields
    {"launcher_pid": ..., "ranks": [ready, ...]}.
    """
    out.mkdir(parents=True, exist_ok=True)
    err = open(out / "stderr.txt", "w+b")  # noqa: SIM115 - closed in finally
    tag = f"{TAG}={out}"
    proc = subprocess.Popen(
        [*(launcher or [sys.executable]), str(LOADER_TRAINER), "--out", str(out),
         *args],
        stdout=subprocess.DEVNULL, stderr=err, start_new_session=True, cwd=REPO,
        env={**os.environ, TAG: str(out)},
    )
    try:
        if not ranks:
            yield _wait_ready(proc, [out / "READY"], err)[0]
        else:
            paths = [out / f"rank{r}" / "READY" for r in range(ranks)]
            yield {"launcher_pid": proc.pid, "ranks": _wait_ready(proc, paths, err)}
    finally:
        doomed = _tagged(tag.encode())
        killed = {*doomed, *_in_session(proc.pid)}
        _kill_session(proc)
        _kill_tagged(tag.encode())
        _wait_gone(doomed)
        remove_torch_segments(of_killed(killed))
        err.close()


def _wait_ready(proc: subprocess.Popen[bytes], paths: list[Path], err: IO[bytes]) -> list[dict]:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not all(p.exists() for p in paths):
        if proc.poll() is not None or time.monotonic() > deadline:
            err.seek(0)
            raise TrainerFailed(f"trainer not ready (rc={proc.returncode}): "
                                f"{err.read().decode(errors='replace')[-2000:]}")
        time.sleep(0.05)
    return [json.loads(p.read_text()) for p in paths]


def _kill_session(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the trainer's whole session (workers, forkserver) and reap, its resource
    trackers last (see _trackers_last)."""
    _trackers_last(lambda: _in_session(proc.pid))
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _kill_tagged(tag: bytes) -> None:
    """SIGKILL every process whose environment carries `tag` (ranks torchrun moved elsewhere),
    their resource trackers last."""
    _trackers_last(lambda: _tagged(tag))


def _trackers_last(members: Callable[[], list[int]]) -> None:
    """SIGKILL `members()` but multiprocessing's resource trackers until none is left, then
    give the trackers TRACKER_GRACE_S to see their last user gone, unlink the semaphores the
    killed left in /dev/shm (a spawn or forkserver DataLoader's ~50 a run) and exit; SIGKILL
    those still there."""
    for _ in range(20):
        found = members()
        doomed = [pid for pid in found if TRACKER not in _proc_file(pid, "cmdline")]
        if not doomed:
            break
        for pid in doomed:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _wait_gone(doomed)
    trackers = members()
    _wait_gone(trackers, TRACKER_GRACE_S)
    for pid in trackers:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _wait_gone(trackers)


def _in_session(sid: int) -> list[int]:
    """The live processes of session `sid`."""
    found = []
    for pid in _pids():
        with suppress(OSError):
            if os.getsid(pid) == sid and alive(pid):
                found.append(pid)
    return found


def _tagged(tag: bytes) -> list[int]:
    entry = b"\0" + tag + b"\0"
    return [pid for pid in _pids() if entry in b"\0" + _proc_file(pid, "environ") + b"\0"]


def _wait_gone(pids: list[int], timeout_s: float = 10.0) -> None:
    """A SIGKILLed process lingers (state R) while the kernel tears it down: wait it out."""
    deadline = time.monotonic() + timeout_s
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _proc_file(pid: int, name: str) -> bytes:
    """/proc/PID/`name`, or nothing for a process gone."""
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:
        return b""
