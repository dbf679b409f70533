"""Attaching to a job: real torchrun ranks under the probe, found from the launcher or a rank."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputop.analysis.steps import input_straggler
from gputop.app.children import start_under_probe
from gputop.core.model import AttachState
from gputop.frames.derive import Derivation
from gputop.sources.attach import RingAttachSource, check_attachable
from gputop.tui.views.steps import step_lines
from tests.helpers.probe import ROOT, TRAINERS, torchrun, trainer_env

pytestmark = pytest.mark.slow  # real torchrun ranks under the probe
TORCHRUN = torchrun(2)


def _follow(source: RingAttachSource, proc: subprocess.Popen[bytes],
            timeout_s: float = 180.0) -> tuple[AttachState, ...]:
    """Sample until `proc` exits (20 ms apart, so no short-lived ring is missed)."""
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        source.sample()
        time.sleep(0.02)
    assert proc.wait(timeout=30) == 0
    states = source.sample()
    source.close()
    return Derivation().attached(states, time.monotonic_ns())[0]


def _rank_pids(launcher: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(launcher)], capture_output=True, text=True)
    return sorted(int(p) for p in out.stdout.split())


@pytest.mark.alone  # which rank waits for input longer: load moves it
def test_attaching_to_the_launcher_shows_every_rank_and_flags_the_slow_one(
    tmp_path: Path,
) -> None:
    launcher = start_under_probe([*TORCHRUN, str(TRAINERS / "ddp.py"), "60", "1"],
                                 env=trainer_env(tmp_path), forward_sigint=False)
    source = RingAttachSource(directory=str(tmp_path))
    source.attach(launcher.pid)
    ranks: list[int] = []
    while launcher.poll() is None and len(ranks) < 2:  # the ranks' PIDs, for the checks
        ranks = _rank_pids(launcher.pid)
        source.sample()
        time.sleep(0.02)
    states = _follow(source, launcher)
    assert [s.pid for s in states] == ranks  # the ring-less launcher is not shown
    assert [s.config.rank for s in states] == [0, 1]
    assert all(s.config.world_size == 2 and len(s.steps) >= 50 for s in states)
    fast, slow = (s.summary for s in states)
    assert slow.input_bound_percent is not None and fast.input_bound_percent is not None
    assert slow.input_bound_percent > 50 > fast.input_bound_percent
    straggler = input_straggler(states)
    assert straggler is not None and (straggler.pid, straggler.rank) == (ranks[1], 1)
    title = "".join(text for text, _ in step_lines(states, 120, 12, straggler.pid)[0])
    assert title.index(f"attached {ranks[1]}") < title.index("slowest")  # flagged: rank 1


def test_attaching_to_one_rank_brings_its_sibling_ranks(tmp_path: Path) -> None:
    launcher = start_under_probe([*TORCHRUN, str(TRAINERS / "ddp.py"), "400", "0"],
                                 env=trainer_env(tmp_path), forward_sigint=False)
    source = RingAttachSource(directory=str(tmp_path))
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and len(source.probe_pids()) < 2:
        assert launcher.poll() is None
        time.sleep(0.05)
    rank_pids = sorted(source.probe_pids())
    assert check_attachable(launcher.pid, str(tmp_path)) is None  # a launcher of probed ranks
    source.attach(rank_pids[1])
    states = _follow(source, launcher)
    assert sorted(s.pid for s in states) == rank_pids
    assert [s.config.rank for s in states] == [1, 0]  # the one asked for first, then its job
    assert all(s.steps for s in states)


def test_unrelated_trainers_of_one_parent_stay_apart(tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    env = trainer_env(tmp_path)
    script = str(TRAINERS / "until_stopped.py")
    one, two = (subprocess.Popen([sys.executable, "-m", "gputop.probe", script, str(stop)],
                                 env=env, cwd=ROOT) for _ in range(2))
    try:
        source = RingAttachSource(directory=str(tmp_path))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(source.probe_pids()) < 2:
            time.sleep(0.05)
        assert source.probe_pids() == {one.pid, two.pid}, (
            f"rings {sorted(p.name for p in tmp_path.glob('*.ring'))}, refused "
            f"{source.rings.refusals}, trainers alive {[p.poll() is None for p in (one, two)]}")
        source.attach(one.pid)
        for _ in range(5):
            states = source.sample()
            time.sleep(0.05)
        assert [s.pid for s in states] == [one.pid] and states[0].steps
    finally:
        stop.touch()
        for proc in (one, two):
            assert proc.wait(timeout=60) == 0


@pytest.mark.alone  # which rank is slowest: load moves it
def test_gputop_run_over_torchrun_summarizes_every_rank(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gputop", "run", "--membw", "off", "--", *TORCHRUN,
         str(TRAINERS / "ddp.py"), "60", "0"],
        env=trainer_env(tmp_path), cwd=ROOT, capture_output=True, text=True, timeout=240,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    heads = [line for line in out.stderr.splitlines() if line.startswith("ATTACHED")]
    assert [h.split(":")[0].split(" rank ")[1].split()[0] for h in heads] == ["0/2", "1/2"]
    assert all(int(h.split(" over the last ")[1].split()[0]) >= 50 for h in heads)  # per rank
    assert "slowest: waits for input" in heads[0] and "slowest" not in heads[1]
    assert "rank 0 is slowest" in out.stderr  # the advice names it too
