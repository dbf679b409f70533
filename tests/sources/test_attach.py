"""The attach source and `--attach PID` checks against real rings of real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.frames.derive import Derivation
from gputop.probe import ring as ring_format
from gputop.sources import dirwatch
from gputop.sources import rings as rings_module
from gputop.sources.attach import (
    RingAttachSource,
    check_attachable,
    config_from_meta,
)
from tests.helpers.probe import ROOT, header_only_ring, trainer_env
from tests.helpers.spy import spy

TRAINER = """
import sys, time
import gputop.probe as p
p.annotate(num_workers=3, pin_memory=True, batch_size=16, device='cpu', rank=1, world_size=2,
           favourite='tea')
for epoch in range(int(sys.argv[1])):
    for b in p.watch(range(100)):
        with p.phase('forward'):
            pass
        with p.phase('optimizer'):
            pass
print('up', flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def trainer(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-c", TRAINER, "4"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=trainer_env(tmp_path),
                            cwd=ROOT)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


@pytest.mark.slow
def test_a_probed_trainer_is_listed_and_read(trainer: subprocess.Popen[str],
                                             tmp_path: Path) -> None:
    source = RingAttachSource(directory=str(tmp_path), window=256)
    assert source.probe_pids() == {trainer.pid}
    source.attach(trainer.pid)
    (state,) = source.sample()
    deadline = time.monotonic() + 10
    while state.steps[-1:] and state.steps[-1].step < 399 and time.monotonic() < deadline:
        time.sleep(0.05)  # the last steps are published by the probe's thread (< 0.2 s)
        (state,) = source.sample()
    assert state.alive and state.error is None and state.dropped_records == 0
    assert len(state.steps) == 256  # the newest window of 400 steps
    assert state.steps[-1].step == 399 and state.steps[-1].epoch == 3
    cfg = state.config
    assert (cfg.num_workers, cfg.pin_memory, cfg.batch_size, cfg.rank, cfg.world_size) == (
        3, True, 16, 1, 2)
    assert ("favourite", "tea") in cfg.extra
    (derived,), _ = Derivation().attached((state,), time.monotonic_ns())
    assert all(s.verdict != "unknown" for s in derived.steps)
    assert check_attachable(trainer.pid, str(tmp_path)) is None
    assert trainer.stdin is not None
    trainer.stdin.write("\n")
    trainer.stdin.flush()
    trainer.wait()
    (state,) = source.sample()
    assert not state.alive and len(state.steps) == 256
    assert not list(tmp_path.glob("*.ring"))  # the trainer unlinked it at exit
    source.close()


@pytest.mark.slow
@pytest.mark.parametrize("inotify", [True, False])
def test_a_tick_lists_the_ring_directory_once(trainer: subprocess.Popen[str], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             inotify: bool) -> None:
    listings: list[str] = []
    monkeypatch.setattr(rings_module, "ring_names",
                        spy(rings_module.ring_names, lambda directory: listings.append(directory)))
    if not inotify:  # the directory's mtime decides (the ring was made under a second ago)
        monkeypatch.setattr(dirwatch, "_watch_fd", lambda path: None)
    source = RingAttachSource(directory=str(tmp_path))
    source.attach(trainer.pid)
    for _ in range(3):  # as the sampler does each tick: the process table's marks, then steps
        assert source.probe_pids() == {trainer.pid}
        (state,) = source.sample()
        assert state.steps
    assert len(listings) == (1 if inotify else 3)  # inotify: no ring came or went since
    source.sample()  # a tick without probe_pids() lists the directory itself, if it must
    assert len(listings) == (1 if inotify else 4)
    source.close()


def test_attach_refuses_a_pid_that_does_not_exist(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert check_attachable(proc.pid, str(tmp_path)) == f"no process with PID {proc.pid}"


def test_attach_refuses_a_process_without_a_ring_and_says_how(tmp_path: Path) -> None:
    reason = check_attachable(os.getpid(), str(tmp_path))
    assert reason is not None and "has no probe ring" in reason
    assert "gputop run -- python train.py" in reason and "python -m gputop.probe" in reason


def test_attach_refuses_a_ring_of_another_user(tmp_path: Path) -> None:
    other = os.getuid() + 4242
    path = ring_format.ring_path(os.getpid(), uid=other, directory=str(tmp_path))
    ticks = ring_format.start_ticks(os.getpid())
    assert ticks is not None
    Path(path).write_bytes(header_only_ring(os.getpid(), ticks, ring_format.pid_namespace()))
    if os.getuid() == 0:
        os.chown(path, other, -1)
    reason = check_attachable(os.getpid(), str(tmp_path))
    if os.getuid() == 0:  # root looks at every user's rings, and refuses this one
        assert reason == (f"ring of PID {os.getpid()} is named for uid {other}, but the "
                          "process's owner is uid 0: ignored")
    else:  # a user never looks at a name claiming another uid
        assert reason is not None and "has no probe ring" in reason
    assert RingAttachSource(directory=str(tmp_path)).probe_pids() == frozenset()
    assert os.path.exists(path)  # never removed: not ours


def test_attach_reports_a_corrupt_ring_in_one_line(tmp_path: Path) -> None:
    path = ring_format.ring_path(os.getpid(), directory=str(tmp_path))
    Path(path).write_bytes(b"garbage")
    reason = check_attachable(os.getpid(), str(tmp_path))
    assert reason == f"ring of PID {os.getpid()} has 7 bytes, not a ring's {ring_format.FILE_SIZE}"
    source = RingAttachSource(directory=str(tmp_path))
    source.attach(os.getpid())
    (state,) = source.sample()
    assert state.steps == () and state.error is not None


def test_a_ring_caught_before_its_header_is_written_is_listed_once_it_is(
    tmp_path: Path,
) -> None:
    """A trainer creates its ring, then writes the header: a tick between the two must not
    strike the trainer off for good."""
    path = ring_format.ring_path(os.getpid(), directory=str(tmp_path))
    Path(path).write_bytes(b"\0" * ring_format.FILE_SIZE)  # created, header not written yet
    source = RingAttachSource(directory=str(tmp_path))
    assert source.probe_pids() == frozenset()
    header = ring_format.HEADER.pack(
        ring_format.MAGIC, ring_format.VERSION, ring_format.HEADER_SIZE, ring_format.RECORD_SIZE,
        ring_format.SLOTS,
        os.getpid(), ring_format.start_ticks(os.getpid()), time.time_ns(), 0, 0, 0)
    with open(path, "r+b") as f:  # the same file (inode), now complete
        f.write(header)
    assert source.probe_pids() == {os.getpid()}


def test_attaching_before_the_ring_exists_waits_for_it(tmp_path: Path) -> None:
    source = RingAttachSource(directory=str(tmp_path))
    source.attach(os.getpid())
    (state,) = source.sample()
    assert state.alive and state.steps == () and "no probe ring yet" in (state.error or "")


def test_config_from_meta_keeps_types_honest() -> None:
    cfg = config_from_meta({"num_workers": "4", "pin_memory": 1, "batch_size": True,
                            "device": "cuda:0", "rank": 2, "note": [1, 2]})
    assert cfg.num_workers is None and cfg.pin_memory is None and cfg.batch_size is None
    assert cfg.device == "cuda:0" and cfg.rank == 2 and cfg.extra == ()
