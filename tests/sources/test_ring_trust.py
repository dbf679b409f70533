"""Rings another user plants: they never block gputop, never pass for the victim's, cost one
look each, and never silence the victim's probe (DESIGN.md "Trust boundaries")."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gputop.probe import ring as ring_format
from gputop.sources.attach import RingAttachSource, check_attachable
from tests.helpers.probe import ROOT, trainer_env
from tests.helpers.probe import payload as record_payload
from tests.helpers.spy import spy
from tests.helpers.users import OTHER_UID, as_other_user, become


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A sticky, world-writable directory like /dev/shm, reachable by the second uid (every
    test that plants files as that uid uses it, so they all skip when we cannot)."""
    if os.getuid() != 0:
        pytest.skip("becoming a second uid needs root")
    path = Path(tempfile.mkdtemp(prefix="gputop-trust-", dir="/tmp"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live process of ours (root) with no ring: the victim."""
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    proc.kill()
    proc.wait(timeout=30)


def plant(path: Path, data: bytes) -> None:
    """Create `path` holding `data` as the second uid (readable by all, as a squatter's is)."""

    def write() -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    as_other_user(write)


def forged_ring(pid: int, steps: int, meta: bytes = b'{"rank":1,"world_size":2}') -> bytes:
    """A well-formed ring claiming to be `pid`'s: its start ticks copied from /proc."""
    ticks = ring_format.start_ticks(pid)
    assert ticks is not None
    raw = bytearray(ring_format.FILE_SIZE)
    ring_format.HEADER.pack_into(raw, 0, ring_format.MAGIC, ring_format.VERSION,
                                 ring_format.HEADER_SIZE,
                            ring_format.RECORD_SIZE, ring_format.SLOTS, pid, ticks, time.time_ns(),
                            steps, 2, len(meta))
    raw[ring_format.META_OFFSET : ring_format.META_OFFSET + len(meta)] = meta
    for n in range(steps):
        payload = ring_format.PAYLOAD.pack(*record_payload(
            step=n, start_ns=n * 9_000_000, duration_ns=9_000_000, data_ns=8_000_000,
            batch_size=32, epoch=0, flags=ring_format.F_OPTIMIZER, loader=1))
        offset = ring_format.HEADER_SIZE + n * ring_format.RECORD_SIZE
        raw[offset : offset + ring_format.RECORD_SIZE] = (
            ring_format.SEQ.pack(2 * n + 2) + payload
            + ring_format.SEQ.pack(ring_format.record_check(n, payload))
        )
    return bytes(raw)


@contextmanager
def other_users_trainer(directory: Path, steps: int) -> Iterator[int]:
    """A live process of the second uid with a real ring of its own; yields its PID."""
    ready_r, ready_w = os.pipe()
    stop_r, stop_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_r)
            os.close(stop_w)
            become()
            writer = ring_format.RingWriter(ring_format.ring_path(os.getpid(),
                                                                  directory=str(directory)))
            writer.append([(n, n, 5, 1, -1, -1, -1, -1, -1, -1, 8, 0, ring_format.F_OPTIMIZER, 1,
                            0, -1, 0, 0, 0, 0, 0, 0)
                           for n in range(steps)])
            os.write(ready_w, b"1")
            os.read(stop_r, 1)
            writer.close()
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(stop_r)
    try:
        assert os.read(ready_r, 1) == b"1"
        yield pid
    finally:
        os.close(stop_w)
        os.close(ready_r)
        os.waitpid(pid, 0)


LOOK = """
import os, sys
from gputop.sources.attach import RingAttachSource, check_attachable
victim = int(sys.argv[1])
source = RingAttachSource()
print("listed", sorted(source.probe_pids()), flush=True)
source.attach(victim)
(state,) = source.sample()
print("steps", len(state.steps), flush=True)
print("error", state.error, flush=True)
print("check", check_attachable(victim), flush=True)
"""


@pytest.mark.slow
def test_a_fifo_named_like_a_ring_never_blocks(shared_dir: Path) -> None:
    """Finding 1: a FIFO planted under our name froze every gputop in open()."""
    victim = os.getpid()
    fifo = shared_dir / f"gputop-0-{victim}.ring"

    def make_fifo() -> None:
        os.mkfifo(fifo)
        os.chmod(fifo, 0o666)

    as_other_user(make_fifo)
    env = trainer_env(shared_dir)
    out = subprocess.run([sys.executable, "-c", LOOK, str(victim)], capture_output=True,
                         text=True, env=env, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:2] == ["listed []", "steps 0"]
    assert "not a regular file" in lines[2] and "not a regular file" in lines[3]
    cli = subprocess.run(
        [sys.executable, "-m", "gputop", "--once", "--json", "--membw", "off", "--interval", "0.2"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["schema"].startswith("gputop.snapshot")


PLANTED = {
    "victims-name": (0, f"is owned by uid {OTHER_UID}, not by the process's owner (uid 0)"),
    "planters-name": (OTHER_UID, f"is named for uid {OTHER_UID}, but the process's owner is "
                                 "uid 0"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", PLANTED)
def test_a_ring_planted_by_another_user_is_never_shown_as_the_victims(
    shared_dir: Path, sleeper: subprocess.Popen[bytes], case: str
) -> None:
    """Finding 2: a valid-looking ring of uid B for A's process, named for A or for B."""
    name_uid, why = PLANTED[case]
    victim = sleeper.pid
    plant(shared_dir / f"gputop-{name_uid}-{victim}.ring", forged_ring(victim, 50))
    source = RingAttachSource(directory=str(shared_dir))
    assert victim not in source.probe_pids()
    source.attach(victim)
    for _ in range(2):
        (state,) = source.sample()
        assert state.steps == ()
        assert state.error == f"ring of PID {victim} {why}: ignored"
    assert check_attachable(victim, str(shared_dir)) == state.error
    source.close()


CHILD_SLEEPER = """
import subprocess, sys
child = subprocess.Popen(["sleep", "600"])
print(child.pid, flush=True)
sys.stdin.readline()
child.kill()
"""


@pytest.mark.slow
def test_a_forged_ring_for_a_child_of_an_attached_target_does_not_join_as_a_rank(
    shared_dir: Path,
) -> None:
    launcher = subprocess.Popen([sys.executable, "-c", CHILD_SLEEPER], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    try:
        assert launcher.stdout is not None
        child = int(launcher.stdout.readline())
        plant(shared_dir / f"gputop-0-{child}.ring", forged_ring(child, 50))
        source = RingAttachSource(directory=str(shared_dir))
        source.attach(launcher.pid)
        for _ in range(3):
            states = source.sample()
            assert [s.pid for s in states] == [launcher.pid]
            assert states[0].steps == ()
        assert check_attachable(launcher.pid, str(shared_dir)) is not None
        source.close()
    finally:
        launcher.kill()
        launcher.wait(timeout=30)


RANK = """
import sys
import gputop.probe as p
p.annotate(rank=0, world_size=2)
print("up", flush=True)
sys.stdin.readline()
"""


@pytest.mark.slow
def test_a_forged_sibling_rank_does_not_join_the_attached_ranks_job(
    shared_dir: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    """The sleeper is the rank's sibling (same parent): a forged world size would pull it in."""
    rank = subprocess.Popen([sys.executable, "-c", RANK], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=trainer_env(shared_dir),
                            cwd=ROOT)
    try:
        assert rank.stdout is not None and rank.stdout.readline().strip() == "up"
        plant(shared_dir / f"gputop-0-{sleeper.pid}.ring", forged_ring(sleeper.pid, 50))
        source = RingAttachSource(directory=str(shared_dir))
        source.attach(rank.pid)
        for _ in range(3):
            states = source.sample()
            assert [s.pid for s in states] == [rank.pid]
            assert states[0].config.world_size == 2
        source.close()
    finally:
        rank.kill()
        rank.wait(timeout=30)


def test_root_reads_another_users_ring_that_passes_the_checks(shared_dir: Path) -> None:
    with other_users_trainer(shared_dir, steps=20) as pid:
        source = RingAttachSource(directory=str(shared_dir))
        assert pid in source.probe_pids()
        assert check_attachable(pid, str(shared_dir)) is None
        source.attach(pid)
        (state,) = source.sample()
        assert state.error is None and [s.step for s in state.steps] == list(range(20))
        source.close()


def _live_pids_of_root() -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == 0:
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


def test_planted_files_are_looked_at_once_not_every_tick(
    shared_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 7: ~2000 planted names; after the first listing none of them is opened,
    stat'ed or sent to /proc again."""
    me = os.getpid()
    writer = ring_format.RingWriter(ring_format.ring_path(me, directory=str(shared_dir)))
    writer.append([(0, 0, 5, 1, -1, -1, -1, -1, -1, -1, 8, 0, ring_format.F_OPTIMIZER, 1,
                    0, -1, 0, 0, 0, 0, 0, 0)])
    never_live = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    live = [pid for pid in _live_pids_of_root() if pid != me][:500]

    def plant_many() -> None:
        names = [f"gputop-0-{never_live + i}.ring" for i in range(700)]
        names += [f"gputop-{OTHER_UID}-{never_live + i}.ring" for i in range(300)]
        names += [f"gputop-0-{pid}.ring" for pid in live]  # live root processes, our name
        names += [f"gputop-0-{me}-{i:08x}.ring" for i in range(300)]
        names += [f"gputop-{OTHER_UID}-{me}-{i:08x}.ring" for i in range(200)]
        for name in names:
            os.close(os.open(shared_dir / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))

    as_other_user(plant_many)
    assert len(os.listdir(shared_dir)) > 1500
    touched: list[str] = []
    for name in ("open", "lstat", "stat"):
        monkeypatch.setattr(os, name, _counting(getattr(os, name), str(shared_dir), touched))
    looked_up: list[int] = []
    monkeypatch.setattr(ring_format, "start_ticks",
                        spy(ring_format.start_ticks, lambda pid: looked_up.append(pid)))
    source = RingAttachSource(directory=str(shared_dir))
    assert source.probe_pids() == {me}
    assert len(touched) > 1500  # each planted file looked at once
    for _ in range(3):
        touched.clear()
        looked_up.clear()
        assert source.probe_pids() == {me}
        assert touched == []
        # is our own trainer still alive: the one look a tick needs, a poll of its pidfd
        # (a read of its start ticks where there are no pidfds)
        assert looked_up == ([] if hasattr(os, "pidfd_open") else [me])
    writer.close()


def _counting(real: Callable[..., object], directory: str,
              touched: list[str]) -> Callable[..., object]:
    def counted(path: object, *args: object, **kwargs: object) -> object:
        if str(path).startswith(directory + "/"):
            touched.append(str(path))
        return real(path, *args, **kwargs)

    return counted


PATIENT = """
import sys
import gputop.probe as p
print("waiting", flush=True)
sys.stdin.readline()
for b in p.watch(range(40)):
    with p.phase("optimizer"):
        pass
p.recorder().publish(wait=True)
print("done", flush=True)
sys.stdin.readline()
"""


@pytest.mark.slow
def test_a_squatted_ring_name_does_not_silence_the_probe(shared_dir: Path) -> None:
    """Finding 8: the trainer's ring name is planted before it creates its ring."""
    proc = subprocess.Popen([sys.executable, "-c", PATIENT], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=trainer_env(shared_dir), cwd=ROOT)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        assert proc.stdout.readline().strip() == "waiting"
        squatted = shared_dir / f"gputop-0-{proc.pid}.ring"
        plant(squatted, forged_ring(proc.pid, 500))
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "done"
        source = RingAttachSource(directory=str(shared_dir))
        assert source.probe_pids() == {proc.pid}
        assert check_attachable(proc.pid, str(shared_dir)) is None
        source.attach(proc.pid)
        (state,) = source.sample()
        assert state.error is None
        assert [s.step for s in state.steps] == list(range(40))  # its own, not the 500 forged
        source.close()
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(timeout=60) == 0
        warning = proc.stderr.read()
        assert warning.count("gputop.probe:") == 1
        assert f"uid {OTHER_UID}" in warning and str(squatted) in warning
        assert [p.name for p in shared_dir.iterdir()] == [squatted.name]  # its own is unlinked
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


@pytest.mark.parametrize("name", ["gputop-\u00b2-1.ring", "gputop-0-\u0661.ring",
                                  "gputop-0-1-\u00b2.ring", "gputop-0-1-XYZ.ring"])
def test_odd_digits_in_a_planted_name_are_not_a_ring_name(name: str) -> None:
    assert ring_format.parse_name(name) is None


def test_a_second_name_parses_as_its_uid_and_pid() -> None:
    second = ring_format.second_name(ring_format.ring_path(12, uid=0, directory="/d"))
    assert second.startswith("/d/gputop-0-12-") and second.endswith(".ring")
    assert ring_format.parse_name(os.path.basename(second)) == (0, 12)
