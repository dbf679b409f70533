"""Attach semantics on real probed processes: a finished run makes way, `detach` lets go."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.core.model import Frame
from gputop.frames.sampler import Sampler
from gputop.sources.attach import RingAttachSource
from gputop.sources.gpu import open_gpu_source
from gputop.sources.host import ProcHostSource
from gputop.sources.processes import ProcProcessSource
from tests.helpers.probe import ROOT, sample_until, trainer_env

pytestmark = pytest.mark.slow

TRAINER = """
import sys
import gputop.probe as p
for b in p.watch(range(int(sys.argv[1]))):
    with p.phase('forward'):
        pass
    with p.phase('optimizer'):
        pass
print('up', flush=True)
sys.stdin.readline()
"""


def _start(ring_dir: Path, steps: int = 50) -> subprocess.Popen[str]:
    """A probed trainer that closes `steps` steps, says 'up', and exits on a line of input."""
    proc = subprocess.Popen([sys.executable, "-c", TRAINER, str(steps)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=trainer_env(ring_dir),
                            cwd=ROOT)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    return proc


def _end(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("\n")
    proc.stdin.close()
    proc.wait(timeout=30)


@pytest.fixture
def sampler(tmp_path: Path) -> Iterator[Sampler]:
    sampler = Sampler(gpu=open_gpu_source(simulate="idle"), host=ProcHostSource(),
                      processes=ProcProcessSource(),
                      attach=RingAttachSource(directory=str(tmp_path)))
    yield sampler
    sampler.close()



def _pids(frame: Frame) -> list[int]:
    return [a.pid for a in frame.attached]


def test_attaching_after_the_first_run_exited_shows_only_the_new_one(
        sampler: Sampler, tmp_path: Path) -> None:
    first = _start(tmp_path)
    second = _start(tmp_path)
    try:
        sampler.attach(first.pid)
        sample_until(sampler, lambda f: bool(f.attached and f.attached[0].steps))
        _end(first)
        frame = sample_until(sampler, lambda f: f.attached[0].state == "exited")
        assert _pids(frame) == [first.pid]  # the finished run stays until we move on
        sampler.attach(second.pid)
        frame = sample_until(sampler, lambda f: bool(f.attached and f.attached[-1].steps))
        assert _pids(frame) == [second.pid]
        assert frame.attached[0].state == "running" and frame.straggler is None
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_running_job_is_kept_beside_a_new_one_and_detach_lets_go(
        sampler: Sampler, tmp_path: Path) -> None:
    first = _start(tmp_path)
    second = _start(tmp_path)
    try:
        sampler.attach(first.pid)
        sampler.attach(second.pid)
        frame = sample_until(
            sampler, lambda f: len(f.attached) == 2 and all(a.steps for a in f.attached))
        assert sorted(_pids(frame)) == sorted([first.pid, second.pid])
        sampler.detach(first.pid)
        assert _pids(sampler.sample()) == [second.pid]
        sampler.detach(second.pid)
        sampler.detach(second.pid)  # twice, or a PID never attached: nothing to do
        sampler.detach(1)
        assert sampler.sample().attached == ()
        sampler.attach(first.pid)  # attachable again after a detach
        assert _pids(sample_until(sampler, lambda f: bool(f.attached and f.attached[0].steps))) == [
            first.pid]
    finally:
        for proc in (first, second):
            _end(proc)
