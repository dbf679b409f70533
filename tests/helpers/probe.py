"""Runs real trainer scripts under the probe and collects what the attach source saw."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gputop.derive import Derivation
from gputop.model import AttachState, Frame
from gputop.probe import ring as layout
from gputop.sampler import Sampler
from gputop.sources.attach import RingAttachSource
from tests.helpers.scheduling import favoured

ROOT = Path(__file__).resolve().parents[2]
TRAINERS = ROOT / "tests" / "probe" / "trainers"


def torchrun(ranks: int) -> list[str]:
    """The command line that starts `ranks` local ranks of a script (append it and its
    arguments): torchrun, standalone (its own rendezvous on a free port)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
            str(ranks)]


def trainer_env(ring_dir: Path, **extra: str) -> dict[str, str]:
    """Our environment with rings in `ring_dir` and this checkout importable."""
    env = {**os.environ, "GPUTOP_RING_DIR": str(ring_dir), **extra}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def payload(**values: int) -> tuple[int, ...]:
    """A record's payload as RingWriter.append takes it, by field name (the rest NONE)."""
    unknown = values.keys() - set(layout.PAYLOAD_FIELDS)
    assert not unknown, unknown
    return tuple(values.get(name, layout.NONE) for name in layout.PAYLOAD_FIELDS)


def watch_process(
    proc: subprocess.Popen[bytes], ring_dir: Path, timeout_s: float = 120.0
) -> AttachState:
    """Poll the ring of `proc` until it exits; the state after the final read."""
    source = RingAttachSource(directory=str(ring_dir))
    source.attach(proc.pid)
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        source.sample()
        time.sleep(0.02)
    proc.wait(timeout=30)
    states = source.sample()  # the trainer is gone: this reads what it wrote last
    source.close()
    return Derivation().attached(states, time.monotonic_ns())[0][0]


def run_probed(
    script: str, *args: str, ring_dir: Path, probe_args: tuple[str, ...] = ()
) -> tuple[int, AttachState]:
    """`python -m gputop.probe tests/probe/trainers/SCRIPT ARGS`: exit code and final state."""
    cmd = [sys.executable, "-m", "gputop.probe", *probe_args, str(TRAINERS / script), *args]
    # Favoured: its timers and the probe's are compared, and other work on a shared box
    # should stretch neither.
    proc = subprocess.Popen(cmd, env=trainer_env(ring_dir), cwd=ROOT, start_new_session=True,
                            preexec_fn=favoured())
    state = watch_process(proc, ring_dir)
    return proc.returncode, state


def sample_until(
    sampler: Sampler, done: Callable[[Frame], bool], timeout_s: float = 60.0,
    pause_s: float = 0.05,
) -> Frame:
    """Sample until `done(frame)`; fails after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        frame = sampler.sample()
        if done(frame):
            return frame
        time.sleep(pause_s)
    raise AssertionError("the expected frame never came")


def header_only_ring(pid: int, ticks: int, namespace: tuple[int, int] | None) -> bytes:
    """A ring file with no steps, as a killed trainer `pid` (started at `ticks`) leaves it;
    `namespace` is its PID namespace as the header records it (None: a probe before the field)."""
    raw = bytearray(layout.FILE_SIZE)
    layout.HEADER.pack_into(raw, 0, layout.MAGIC, layout.VERSION, layout.HEADER_SIZE,
                            layout.RECORD_SIZE, layout.SLOTS, pid, ticks, time.time_ns(),
                            0, 0, 0)
    layout.NAMESPACE.pack_into(raw, layout.NAMESPACE_OFFSET, *(namespace or (0, 0)))
    return bytes(raw)
