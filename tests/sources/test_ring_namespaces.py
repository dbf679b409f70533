"""Rings of other PID namespaces (containers run with --ipc=host share /dev/shm): never
removed, never matched to a local process by their PID's number; a host gputop shows a
container's trainer under its host PID (DESIGN.md "The probe and its ring")."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from gputop.probe import ring as ring_format
from gputop.probe.reader import RingReader
from gputop.sources.attach import RingAttachSource, check_attachable
from tests.helpers.probe import (
    ROOT,
    UNSHARE,
    header_only_ring,
    pid_namespace_refusal,
    stepping_trainer,
    trainer_env,
)

NOT_A_NAMESPACE = 12345  # nsfs inode numbers start at 0xEFFFFFFC: no namespace has this one
WAIT_S = 60.0


# What the sampler does each tick with the ring directory, five ticks; prints what it listed.
GPUTOP_TICKS = """
import sys
from gputop.sources.attach import RingAttachSource
source = RingAttachSource(directory=sys.argv[1])
for _ in range(5):
    listed = source.probe_pids()
    source.remove_dead_rings()
print("listed", sorted(listed), flush=True)
"""


def our_namespace() -> tuple[int, int]:
    st = os.stat("/proc/self/ns/pid")
    return st.st_dev, st.st_ino


@pytest.fixture
def unshare() -> None:
    """Skip unless we may make a PID namespace (root, and unshare(1) works here)."""
    refusal = pid_namespace_refusal()
    if refusal is not None:
        pytest.skip(refusal)


@dataclass
class Trainer:
    proc: subprocess.Popen[str]
    pid: int  # as the trainer sees itself
    ring: Path
    inode: int


@contextmanager
def trainer(ring_dir: Path, stop: Path, contained: bool) -> Iterator[Trainer]:
    """The stepping trainer, in a PID namespace of its own when `contained` (/dev/shm shared, as
    under --ipc=host), until it is up; stopped and reaped after."""
    with stepping_trainer(ring_dir, stop, contained=contained, stderr=subprocess.PIPE) as (
            proc, pid, ring):
        yield Trainer(proc, pid, ring, os.stat(ring).st_ino)


def host_pid(contained: Trainer) -> int:
    """The host PID of a contained trainer: the one child of its unshare(1)."""
    pid = contained.proc.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def assert_still_written(t: Trainer) -> None:
    """The trainer's ring is still linked under its name and its head still moves."""
    assert t.ring.exists(), f"{t.ring} was unlinked"
    assert os.stat(t.ring).st_ino == t.inode
    reader = RingReader(str(t.ring))
    try:
        first = reader.read_header().head
        deadline = time.monotonic() + WAIT_S
        while reader.read_header().head < first + 20:
            assert time.monotonic() < deadline, "the trainer stopped writing its ring"
            time.sleep(0.01)
    finally:
        reader.close()


def gputop_ticks(source: RingAttachSource) -> frozenset[int]:
    """Five ticks of what the sampler does with the rings; the last listing."""
    listed: frozenset[int] = frozenset()
    for _ in range(5):
        listed = source.probe_pids()
        source.remove_dead_rings()
    return listed


def test_a_dead_ring_of_another_namespace_is_never_removed(tmp_path: Path) -> None:
    """Its PID means nothing here: that no process has it here proves nothing."""
    dev, _ = our_namespace()
    dead = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    path = tmp_path / f"gputop-{os.getuid()}-{dead}.ring"
    path.write_bytes(header_only_ring(dead, 1234, (dev, NOT_A_NAMESPACE)))
    source = RingAttachSource(directory=str(tmp_path))
    assert gputop_ticks(source) == frozenset()
    assert path.exists()


def test_a_dead_ring_without_a_namespace_is_never_removed(tmp_path: Path) -> None:
    """A probe from before the field: its namespace is unknown, so its death is unproven."""
    dead = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    path = tmp_path / f"gputop-{os.getuid()}-{dead}.ring"
    path.write_bytes(header_only_ring(dead, 1234, None))
    source = RingAttachSource(directory=str(tmp_path))
    assert gputop_ticks(source) == frozenset()
    assert path.exists()


def test_a_ring_of_another_namespace_is_not_matched_to_our_process_of_that_number(
    tmp_path: Path,
) -> None:
    """Same PID number, same start ticks, same owner: still another namespace's process."""
    me = os.getpid()
    ticks = ring_format.start_ticks(me)
    assert ticks is not None
    dev, _ = our_namespace()
    path = tmp_path / f"gputop-{os.getuid()}-{me}.ring"
    path.write_bytes(header_only_ring(me, ticks, (dev, NOT_A_NAMESPACE)))
    source = RingAttachSource(directory=str(tmp_path))
    assert gputop_ticks(source) == frozenset()
    assert path.exists()
    assert check_attachable(me, str(tmp_path)) == (
        f"PID {me} has no probe ring; start it with `gputop run -- python train.py` or "
        "`python -m gputop.probe train.py`")


@pytest.mark.slow
@pytest.mark.usefixtures("unshare")
def test_a_host_gputop_leaves_a_containers_trainer_ring_alone(tmp_path: Path) -> None:
    """The contained trainer is PID 1 in its namespace: here PID 1 is init, started long
    before it (a "stale" ring by the number), yet the ring is alive."""
    with trainer(tmp_path, tmp_path / "stop", contained=True) as contained:
        assert contained.pid == 1
        source = RingAttachSource(directory=str(tmp_path))
        gputop_ticks(source)
        assert_still_written(contained)
        gputop_ticks(source)
        assert_still_written(contained)
        source.close()


@pytest.mark.slow
@pytest.mark.usefixtures("unshare")
def test_a_contained_gputop_leaves_the_hosts_trainer_ring_alone(tmp_path: Path) -> None:
    """Inside the namespace the host trainer's PID is no process at all."""
    with trainer(tmp_path, tmp_path / "stop", contained=False) as host:
        look = subprocess.run([*UNSHARE, sys.executable, "-c", GPUTOP_TICKS, str(tmp_path)],
                              capture_output=True, text=True, env=trainer_env(tmp_path),
                              cwd=ROOT, timeout=WAIT_S)
        assert look.returncode == 0, look.stderr
        assert look.stdout.split("\n")[0] == "listed []"  # it cannot see the trainer
        assert_still_written(host)


@pytest.mark.slow
@pytest.mark.usefixtures("unshare")
def test_trainers_with_one_pid_in_two_namespaces_keep_both_rings(tmp_path: Path) -> None:
    """Two containers' trainers, both PID 1 and of one uid: the second takes a second name
    without removing the first's ring or warning (no other user holds the name)."""
    with trainer(tmp_path, tmp_path / "stop", contained=True) as first, \
            trainer(tmp_path, tmp_path / "stop", contained=True) as second:
        assert first.pid == second.pid == 1
        assert first.ring != second.ring
        assert_still_written(first)
        assert_still_written(second)
    assert second.proc.stderr is not None
    assert "gputop.probe:" not in second.proc.stderr.read()


@pytest.mark.slow
@pytest.mark.usefixtures("unshare")
def test_a_host_gputop_shows_a_containers_trainer_under_its_host_pid(tmp_path: Path) -> None:
    with trainer(tmp_path, tmp_path / "stop", contained=True) as contained:
        pid = host_pid(contained)
        source = RingAttachSource(directory=str(tmp_path))
        assert source.probe_pids() == {pid}
        assert check_attachable(pid, str(tmp_path)) is None
        source.attach(pid)
        deadline = time.monotonic() + WAIT_S
        while not (state := source.sample()[0]).steps:
            assert state.error is None
            assert time.monotonic() < deadline, "no step came through"
            time.sleep(0.02)
        assert state.pid == pid and state.alive
        source.close()
