"""Advice made real: the test trainer (tests/advice/trainer.py) under `python -m
gputop.probe`, a real Sampler over the real sources attached to it, and sampling until the
advice shows, or until what the host did shows the rule could not speak.

The trainer's session is favoured (tests/helpers/scheduling.py): on a shared host other
work takes as little as the kernel allows from the scenario a test set up.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Set
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import IO

import pytest

from gputop.advice import Advisor
from gputop.advice.context import figure, step_shape
from gputop.analysis.steps import STEP_STATISTIC
from gputop.app.children import probe_env
from gputop.core.model import Advice, AttachState, Frame, TrainerGroup
from gputop.frames.sampler import Sampler
from gputop.sources.attach import RingAttachSource
from gputop.sources.base import GpuSource, MemoryBandwidthSource
from gputop.sources.host import ProcHostSource
from gputop.sources.nvml import NoGpuSource
from gputop.sources.processes import ProcProcessSource
from tests.helpers.memcg import MemoryCgroup
from tests.helpers.probe import ROOT, torchrun, trainer_env
from tests.helpers.scheduling import favoured, favoured_children

TRAINER = ROOT / "tests" / "advice" / "trainer.py"
CORES = os.cpu_count() or 1
READY_TIMEOUT_S = 120.0
WAIT_S = 45.0  # how long to keep sampling for a condition before giving up (not a speed check)
TICK_S = 0.3
NEEDED_FRAMES = 3  # frames in which the host gave a rule what it needs: it had its chance
FOLLOWED_TICKS = 8  # frames of a followed trainer in which the advice must stay away
FOLLOWED_MIN_STEPS = 10
# A model wide enough and a batch large enough that torch splits each matmul over its
# intra-op threads (the default small model runs them one at a time: they never queue).
PARALLEL = ("--hidden", "1024", "--batch-size", "64")


@dataclass
class Trainer:
    """A running probed trainer: its pid, ring folder and self-measured stats file."""

    pid: int
    ring_dir: Path
    stats: Path
    ready: dict

    def own_input_percent(self) -> float:
        """The input share the trainer timed itself (since its warm-up steps)."""
        return float(json.loads(self.stats.read_text())["input_percent"])


@contextmanager
def probed_trainer(tmp_path: Path, *args: str, cpus: Set[int] | None = None,
                   ranks: int = 0, cgroup: MemoryCgroup | None = None) -> Iterator[Trainer]:
    """`python -m gputop.probe trainer.py ARGS` in a favoured session of its own, on `cpus`
    if given, in `cgroup` if given; killed with its workers afterwards. With `ranks`,
    torchrun's that many ranks of it under the probe, the Trainer being rank 0; a job that
    ends before its first step is started once more, saying so (torchrun on a busy host now
    and then aborts at start)."""
    where = tmp_path
    job, trainer = _start_probed(where, args, cpus, ranks, cgroup)
    if trainer is None and ranks:
        print(f"\n{tmp_path.name}: torchrun ended at start "
              f"({start_failure(_stderr(where))}); retried once")
        where = tmp_path / "retry"
        job, trainer = _start_probed(where, args, cpus, ranks, cgroup)
    try:
        if trainer is None:
            pytest.fail(f"trainer ended before its first step (rc={job.proc.returncode}): "
                        f"{_stderr(where)[-2000:]}")
        yield trainer
    finally:
        job.kill()


def trainer_command(ranks: int) -> list[str]:
    """The test trainer's command line before its arguments: plain, or `ranks` ranks."""
    return [*(torchrun(ranks) if ranks else [sys.executable]), str(TRAINER)]


@dataclass
class Job:
    """A started test trainer, in a favoured session of its own; with `ranks`, torchrun's
    launcher, and the ranks (each in a session of its own) found so far."""

    proc: subprocess.Popen[bytes]
    ranks: int = 0
    rank_pids: set[int] = field(default_factory=set)

    @classmethod
    def start(cls, command: list[str], err: IO[bytes], cpus: Set[int] | None = None,
              ranks: int = 0, env: dict[str, str] | None = None,
              cgroup: MemoryCgroup | None = None) -> Job:
        """Start `command`, its stderr to `err`, in `cgroup` from its start when given."""
        return cls(subprocess.Popen(command, env=env, cwd=ROOT, start_new_session=True,
                                    preexec_fn=_placed(cpus, cgroup), stdout=subprocess.DEVNULL,
                                    stderr=err), ranks)

    def poll(self) -> int | None:
        """Its exit status, None while it runs; finds and favours the ranks not yet found."""
        if len(self.rank_pids) < self.ranks:
            self.rank_pids = favoured_children(self.proc.pid, self.rank_pids)
        return self.proc.poll()

    @property
    def sessions(self) -> set[int]:
        """Its sessions: its own and its ranks'."""
        return {self.proc.pid, *self.rank_pids}

    def kill(self) -> None:
        """It, its ranks and their DataLoader workers gone, whatever state they are in."""
        for sid in (*self.rank_pids, self.proc.pid):  # the ranks first: they outlive torchrun
            with suppress(ProcessLookupError):
                os.killpg(sid, signal.SIGKILL)
        self.proc.wait(timeout=30)


def _placed(cpus: Set[int] | None, cgroup: MemoryCgroup | None) -> Callable[[], None]:
    """A preexec_fn: favoured (and pinned to `cpus`), and in `cgroup` when given."""
    favour = favoured(cpus)

    def setup() -> None:
        if cgroup is not None:
            cgroup.join()
        favour()
    return setup


def _start_probed(tmp_path: Path, args: tuple[str, ...], cpus: Set[int] | None,
                  ranks: int, cgroup: MemoryCgroup | None) -> tuple[Job, Trainer | None]:
    """The probed trainer started and ready, or None (and the job gone) when it ended
    before its first step; fails when it takes longer than READY_TIMEOUT_S."""
    ring_dir, ready, stats = tmp_path / "rings", tmp_path / "READY", tmp_path / "stats.json"
    ring_dir.mkdir(parents=True)
    command = trainer_command(ranks)
    if not ranks:  # one process: the probe's module runs the script in it
        command[1:1] = ["-m", "gputop.probe"]
    env = probe_env(trainer_env(ring_dir)) if ranks else trainer_env(ring_dir)
    with open(tmp_path / "stderr.txt", "wb") as err:
        job = Job.start([*command, "--ready", str(ready), "--stats", str(stats), *args], err,
                        cpus, ranks, env, cgroup)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not (ready.exists() and stats.exists()):
        if job.poll() is not None:
            job.kill()
            return job, None
        if time.monotonic() > deadline:
            job.kill()
            pytest.fail(f"trainer not ready in {READY_TIMEOUT_S:.0f} s: "
                        f"{_stderr(tmp_path)[-2000:]}")
        time.sleep(0.05)
    info = json.loads(ready.read_text())
    if not ranks:
        assert info["pid"] == job.proc.pid  # the probe runs the script in its own process
    return job, Trainer(info["pid"], ring_dir, stats, info)


@contextmanager
def probed_script(script: Path, where: Path, *args: str) -> Iterator[Trainer]:
    """`python -m gputop.probe SCRIPT ARGS --ready` (a script that writes its READY file),
    favoured, its rings and stderr in `where`, running until the block ends."""
    rings, ready = where / "rings", where / "READY"
    rings.mkdir(parents=True)
    with open(where / "stderr.txt", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gputop.probe", str(script), *args, "--ready", str(ready)],
            env=trainer_env(rings), cwd=ROOT, start_new_session=True, preexec_fn=favoured(),
            stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"trainer not ready (rc={proc.poll()}): "
                            f"{(where / 'stderr.txt').read_text()[-2000:]}")
            time.sleep(0.05)
        assert json.loads(ready.read_text())["pid"] == proc.pid
        yield Trainer(proc.pid, rings, where / "stats.json", {})
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.wait(timeout=30)


def _stderr(tmp_path: Path) -> str:
    """What the trainer started in `tmp_path` wrote to stderr."""
    return (tmp_path / "stderr.txt").read_text(errors="replace")


def start_failure(stderr: str) -> str:
    """Why a job ended at start, in a line: torchrun's last exit code line (the root
    cause's), else the last line it wrote."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    codes = [line for line in lines if line.startswith("exitcode")]
    return " ".join((codes or lines or ["no output"])[-1].split())


@contextmanager
def watching(trainer: Trainer | None, gpu: GpuSource | None = None,
             membw: MemoryBandwidthSource | None = None) -> Iterator[Sampler]:
    """A real Sampler over the real sources, attached to `trainer`, advice shown at once."""
    sampler = Sampler(
        gpu=gpu or NoGpuSource("no GPU in this test"),
        host=ProcHostSource(),
        processes=ProcProcessSource(),
        membw=membw,
        attach=RingAttachSource(directory=str(trainer.ring_dir)) if trainer else None,
        advisor=Advisor(on_after=1),
        interval_s=TICK_S,
    )
    if trainer is not None:
        sampler.attach(trainer.pid)
    try:
        yield sampler
    finally:
        sampler.close()


@dataclass(frozen=True)
class Need:
    """A host condition a rule needs and other work on a shared host (or the machine itself)
    can take away (an idle core, say), as `holds` finds it in a frame; `what` names it for a
    skip, and `words` says what the host did instead over the frames seen."""

    what: str
    holds: Callable[[Frame], bool]
    words: Callable[[list[Frame]], str] | None = None


def sample_until(sampler: Sampler, done: Callable[[Frame], bool],
                 frames: list[Frame] | None = None, need: Need | None = None,
                 wait_s: float = WAIT_S) -> Frame:
    """Sample every TICK_S until `done(frame)`; fail with what was shown if it never is.

    With a `need`, the test skips instead, saying what the host did, when the need held in
    fewer than NEEDED_FRAMES frames: the rule never had its chance. Where it held that
    often and the rule stayed quiet, the rule is wrong: the test fails.
    """
    seen = frames if frames is not None else []
    deadline = time.monotonic() + wait_s
    held = 0
    while time.monotonic() < deadline:
        frame = sampler.sample()
        seen.append(frame)
        if done(frame):
            return frame
        held += need is not None and need.holds(frame)
        time.sleep(TICK_S)
    last = seen[-1] if seen else None
    if need is not None and held < NEEDED_FRAMES:
        words = (need.words(seen) if need.words is not None
                 else f"{host_words(seen)} (other work on a shared host)")
        pytest.skip(f"{need.what} in {held} of {len(seen)} frames over {wait_s:.0f} s: {words}")
    summary = last.attached[0].summary if last and last.attached else None
    held_words = f"; {need.what} in {held} frames" if need is not None else ""
    pytest.fail(f"condition never met{held_words}; last advice {last.advice if last else ()}, "
                f"summary {summary}, host {last.host if last else None}")


def host_words(frames: list[Frame]) -> str:
    """How busy the host was over `frames`, in a phrase."""
    busy = [f.host.cpu_percent for f in frames if f.host.cpu_percent is not None]
    if not busy:
        return "no host CPU figures"
    return (f"the host's {CORES} cores were {median(busy):.0f}% busy in the median frame "
            f"(least {min(busy):.0f}%)")


def ready(frame: Frame, min_steps: int) -> bool:
    """The attached trainer's window holds `min_steps` and the host's rates are known."""
    return (frame.host.cpu_percent is not None and bool(frame.attached)
            and frame.attached[0].summary.steps >= min_steps)


def shows(advice_id: str, min_steps: int = 10) -> Callable[[Frame], bool]:
    """The frame shows `advice_id` and the trainer's window holds at least `min_steps`."""
    def done(frame: Frame) -> bool:
        steps = frame.attached[0].summary.steps if frame.attached else min_steps
        return steps >= min_steps and any(a.id == advice_id for a in frame.advice)
    return done


def advice(frame: Frame, advice_id: str) -> Advice:
    """The one shown advice with this id."""
    (found,) = [a for a in frame.advice if a.id == advice_id]
    return found


def ids(frames: list[Frame]) -> set[str]:
    """Every advice id shown in any of `frames`."""
    return {a.id for f in frames for a in f.advice}


def state(frame: Frame) -> AttachState:
    """The attached trainer's state."""
    (only,) = frame.attached
    return only


def group(frame: Frame, pid: int) -> TrainerGroup:
    """The process grouping's trainer row for `pid`."""
    (found,) = [t for t in frame.trainers if t.pid == pid]
    return found


def number(pattern: str, text: str) -> float:
    """The number captured by `pattern` in `text`."""
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not in {text!r}"
    return float(match.group(1))


def followed(tmp_path: Path, args: tuple[str, ...],
             gpu: Callable[[int], GpuSource] | None = None, ranks: int = 0,
             ticks: int = FOLLOWED_TICKS, min_steps: int = FOLLOWED_MIN_STEPS) -> list[Frame]:
    """`ticks` frames of the trainer run with `args` (the advice followed), under the probe
    and the real sampler, from when every rank (`ranks` under torchrun, else the one
    process) is attached and its window holds `min_steps` steps."""
    def started(frame: Frame) -> bool:
        return len(frame.attached) == max(1, ranks) and all(
            s.summary.steps >= min_steps for s in frame.attached)

    with probed_trainer(tmp_path / "followed", *args, ranks=ranks) as trainer, \
            watching(trainer, gpu=gpu(trainer.pid) if gpu else None) as sampler:
        frames = [sample_until(sampler, started)]
        while len(frames) < ticks:
            time.sleep(TICK_S)
            frames.append(sampler.sample())
    return frames


def check_input_share(found: Advice, frame: Frame, trainer: Trainer) -> None:
    """The quoted input share is the summary's, and near what the trainer timed itself."""
    quoted = number(r"input is (\d+)% of step time", found.evidence)
    summary = state(frame).summary
    assert summary.input_bound_percent is not None
    assert quoted == round(summary.input_bound_percent)
    assert f"over the last {summary.steps} steps" in found.evidence
    assert abs(quoted - trainer.own_input_percent()) <= 5
    # The step is the window's one step time, as the step pane gives it.
    shape = step_shape(state(frame))
    assert shape is not None and summary.mean_step_ns is not None
    assert figure(shape.step_ms) == figure(summary.mean_step_ns / 1e6)
    assert (f"({STEP_STATISTIC} step {figure(shape.step_ms)} ms, input "
            f"{figure(shape.input_ms)} ms of it") in found.evidence
