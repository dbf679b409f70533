"""A replay derives each tick's facts as the live sampler did: two jobs of probed ranks on one
host are sampled live, recorded by the recorder, played back, and every tick's straggler,
trainer verdicts and states, roles and advice must match what the live sampler produced."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gputop.advice import Advisor
from gputop.analysis.steps import STRAGGLER_MIN_STEPS, input_straggler
from gputop.core.model import Frame
from gputop.frames.playback import Playback
from gputop.frames.sampler import Sampler
from gputop.recording.replay import Replay
from gputop.recording.writer_thread import Recorder
from gputop.sources.attach import RingAttachSource
from gputop.sources.gpu import open_gpu_source
from gputop.sources.host import ProcHostSource
from gputop.sources.processes import ProcProcessSource
from tests.helpers.probe import ROOT, trainer_env

pytestmark = pytest.mark.slow  # real probed ranks under two launchers

COMPUTE_S = 0.01
SLOW_WAIT_S = 0.02  # the straggling rank of the first job
SLOWER_WAIT_S = 0.1  # every rank of the second job: alike, so no straggler among them
TICK_S = 0.2
WAIT_LIMIT_S = 120.0
EXTRA_TICKS = 3  # ticks sampled after both jobs' ranks are judged

# A rank on the probe's API: each batch comes after argv[2] seconds, each step computes
# COMPUTE_S; it steps until the file argv[1] exists.
RANK = f"""
import os, sys, time
import gputop.probe as p
stop, wait_s = sys.argv[1], float(sys.argv[2])

def batches():
    while True:
        time.sleep(wait_s)
        yield 0

for _ in p.watch(batches()):
    with p.phase("forward"):
        time.sleep({COMPUTE_S})
    with p.phase("optimizer"):
        pass
    if os.path.exists(stop):
        break
"""

# A launcher without a probe: one rank per wait in argv[2:], as torchrun starts them.
LAUNCHER = """
import os, subprocess, sys
stop, waits = sys.argv[1], sys.argv[2:]
ranks = [subprocess.Popen([sys.executable, "-c", os.environ["RANK_SCRIPT"], stop, wait],
                          env={**os.environ, "RANK": str(rank), "WORLD_SIZE": str(len(waits))})
         for rank, wait in enumerate(waits)]
sys.exit(max(r.wait() for r in ranks))
"""


@contextmanager
def _job(ring_dir: Path, stop: Path, *waits: float) -> Iterator[subprocess.Popen[bytes]]:
    """A launcher of one rank per wait; stopped and reaped after."""
    env = trainer_env(ring_dir, RANK_SCRIPT=RANK)
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(stop), *map(str, waits)],
                                env=env, cwd=ROOT, start_new_session=True)
    try:
        yield launcher
    finally:
        stop.touch()
        try:
            launcher.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait(timeout=30)


def _judged(frame: Frame, ranks: int) -> bool:
    """Every rank is attached and has enough steps for the straggler rule to judge it."""
    return len(frame.attached) == ranks and all(
        len(a.steps) >= STRAGGLER_MIN_STEPS for a in frame.attached)


def _sample_live(sampler: Sampler, recorder: Recorder, ranks: int) -> list[Frame]:
    """Frames sampled and recorded until every rank was judged for EXTRA_TICKS ticks."""
    frames: list[Frame] = []
    deadline = time.monotonic() + WAIT_LIMIT_S
    while sum(_judged(f, ranks) for f in frames) < EXTRA_TICKS:
        assert time.monotonic() < deadline, f"ranks never judged: {frames[-1].attached}"
        frame = sampler.sample()
        assert recorder.submit(frame) is None
        frames.append(frame)
        time.sleep(TICK_S)
    return frames


def _facts(frame: Frame) -> dict[str, object]:
    """The tick's derived facts a replay must show as they were shown live (but a cpu-starved
    finding, which a recording does not keep: the steps' own verdict is compared)."""
    straggler = frame.straggler
    return {
        "straggler": None if straggler is None else (straggler.pid, straggler.rank),
        "trainers": [(a.pid, a.state, a.summary.steps_verdict or a.summary.verdict,
                      a.summary.input_bound_percent,
                      a.summary.steps, tuple(s.verdict for s in a.steps))
                     for a in frame.attached],
        "groups": [(g.pid, g.worker_pids, g.pin_memory_thread, g.launcher_pid)
                   for g in frame.trainers],
        "advice": sorted({a.id for a in frame.advice} - {"cpu-starved"}),
    }


def _roles(frame: Frame) -> dict[int, tuple[object, ...]]:
    """Each process's role and trainer."""
    return {row.pid: (row.role, row.trainer_pid) for row in frame.processes}


def test_a_replay_derives_each_tick_as_the_live_sampler_did(tmp_path: Path) -> None:
    rings, path = tmp_path / "rings", tmp_path / "run.sqlite"
    rings.mkdir()
    sampler = Sampler(gpu=open_gpu_source(simulate="idle"), host=ProcHostSource(),
                      processes=ProcProcessSource(),
                      attach=RingAttachSource(directory=str(rings)), advisor=Advisor(on_after=1),
                      interval_s=TICK_S)
    recorder = Recorder(str(path))
    try:
        with (_job(rings, tmp_path / "stop-a", 0.0, SLOW_WAIT_S) as first,
              _job(rings, tmp_path / "stop-b", SLOWER_WAIT_S, SLOWER_WAIT_S) as second):
            sampler.attach(first.pid)
            sampler.attach(second.pid)
            live = _sample_live(sampler, recorder, ranks=4)
    finally:
        recorder.close()
        sampler.close()
    newest = live[-1]
    second_job = {a.pid for a in newest.attached[2:]}
    assert newest.straggler is not None and newest.straggler.rank == 1
    assert newest.straggler.pid not in second_job
    across_jobs = input_straggler(newest.attached)  # what judging every rank at once names
    assert across_jobs is not None and across_jobs.pid in second_job

    playback = Playback(Replay(str(path)))
    try:
        assert len(playback.recording) == len(live)
        for index, shown in enumerate(live):
            replayed = playback.frame_at(index)
            assert replayed.time == shown.time
            assert _facts(replayed) == _facts(shown), f"tick {index}"
            kept, live_roles = _roles(replayed), _roles(shown)  # the recording keeps some rows
            assert kept == {pid: live_roles.get(pid) for pid in kept}, f"tick {index}"
        trainers = {pid for pid, (role, _) in kept.items() if role == "trainer"}
        assert trainers >= {a.pid for a in newest.attached}  # the ranks' rows were compared
    finally:
        playback.stop()
