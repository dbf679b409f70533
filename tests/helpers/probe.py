"""Runs real trainer scripts under the probe and collects what the attach source saw."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gputop.core.model import AttachState, Frame
from gputop.frames.derive import Derivation
from gputop.frames.sampler import Sampler
from gputop.probe import ring as ring_format
from gputop.probe.reader import RawRecord, RingReader
from gputop.probe.steps import Recorder
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


def def_site(script: Path, function: str) -> str:
    """"function (file:line)" of the function's def in `script`, as the sampler names it."""
    lines = script.read_text().splitlines()
    line = next(n for n, text in enumerate(lines, 1) if text.startswith(f"def {function}("))
    return f"{function} ({script.name}:{line})"


def payload(**values: int) -> tuple[int, ...]:
    """A record's payload as RingWriter.append takes it, by field name (the rest NONE)."""
    unknown = values.keys() - set(ring_format.PAYLOAD_FIELDS)
    assert not unknown, unknown
    counts = (*ring_format.SAMPLED_FIELDS, "part_samples")  # counts and site ids: 0 is none
    return tuple(values.get(name, 0 if name in counts else ring_format.NONE)
                 for name in ring_format.PAYLOAD_FIELDS)


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
    raw = bytearray(ring_format.FILE_SIZE)
    ring_format.HEADER.pack_into(raw, 0, ring_format.MAGIC, ring_format.VERSION,
                                 ring_format.HEADER_SIZE,
                            ring_format.RECORD_SIZE, ring_format.SLOTS, pid, ticks, time.time_ns(),
                            0, 0, 0)
    ring_format.NAMESPACE.pack_into(raw, ring_format.NAMESPACE_OFFSET, *(namespace or (0, 0)))
    return bytes(raw)


# A trainer on the probe's API that steps until the file argv[1] exists (argv[2] seconds at
# most) and says "up PID RING" once its ring holds steps; argv[3:] are left for its argv.
STEPPING_TRAINER = """
import itertools, os, sys, time
import gputop.probe as p
stop, deadline = sys.argv[1], time.monotonic() + float(sys.argv[2])
rec = p.recorder()
for n in p.watch(itertools.count()):
    with p.phase("optimizer"):
        time.sleep(0.002)
    if n == 3:
        rec.publish(wait=True)
        print("up", os.getpid(), rec.ring.path, flush=True)
    if os.path.exists(stop) or time.monotonic() > deadline:
        break
"""

UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
TRAINER_WAIT_S = 60.0


def pid_namespace_refusal() -> str | None:
    """Why a PID namespace cannot be made here (root, and a working unshare(1)), or None."""
    if os.getuid() != 0:
        return "a PID namespace needs root"
    try:
        done = subprocess.run([*UNSHARE, "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare(1) is not usable here: {exc}"
    if done.returncode != 0:
        return f"unshare --pid is not permitted here: {done.stderr.decode().strip()}"
    return None


@contextmanager
def stepping_trainer(ring_dir: Path, stop: Path, *, contained: bool = False,
                     argv: Sequence[str] = (), user: int | None = None, limit_s: float = 120,
                     stderr: int | None = None
                     ) -> Iterator[tuple[subprocess.Popen[str], int, Path]]:
    """STEPPING_TRAINER (in a PID namespace of its own when `contained`, as `user`) once it
    is up: its process, its PID as it sees itself and its ring; stopped and reaped after."""
    cmd = [*(UNSHARE if contained else []), sys.executable, "-c", STEPPING_TRAINER, str(stop),
           str(limit_s), *argv]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True,
                            env=trainer_env(ring_dir), cwd=ROOT, user=user, group=user,
                            extra_groups=None if user is None else [])
    try:
        assert proc.stdout is not None
        word, pid, ring = proc.stdout.readline().split()
        assert word == "up"
        yield proc, int(pid), Path(ring)
    finally:
        stop.touch()
        try:
            proc.wait(timeout=TRAINER_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=TRAINER_WAIT_S)


def attach_once(pid: int, ring_dir: Path) -> dict[str, Any]:
    """`gputop --once --json --attach PID`'s trainer, as a user runs it beside the program."""
    out = subprocess.run(
        [sys.executable, "-m", "gputop", "--once", "--json", "--attach", str(pid),
         "--interval", "0.2"], capture_output=True, text=True, timeout=120,
        env={**trainer_env(ring_dir), "GPUTOP_DEBUG": ""}, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    attached: dict[str, Any] = json.loads(out.stdout)["attach"]
    return attached


def published_records(rec: Recorder) -> list[RawRecord]:
    """Every record `rec` has staged, published to its ring and read back."""
    rec.publish(wait=True)
    assert rec.ring is not None
    reader = RingReader(rec.ring.path)
    try:
        return reader.read_new()
    finally:
        reader.close()
