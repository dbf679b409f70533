"""Real torch trainers with real DataLoader workers: gputop finds each trainer's exact workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputop.core.model import Frame, GpuProcess, GpuReport, GpuSample, ProcessSample, TrainerGroup
from gputop.frames.sampler import Sampler
from gputop.sources.host import ProcHostSource
from gputop.sources.processes import ProcProcessSource
from tests.helpers.processes import alive
from tests.helpers.shm import of_the_dead_since, remove_torch_segments
from tests.helpers.trainer_harness import REPO, running_trainer

pytestmark = pytest.mark.slow
GPU_BYTES = 3 << 30


def _pid_max() -> int:
    return int(Path("/proc/sys/kernel/pid_max").read_text())


class StubGpu:
    """One fake device that lists the given pids as its compute processes."""

    def __init__(self, pids: tuple[int, ...] = ()) -> None:
        self.pids = pids

    def sample(self) -> GpuReport:
        procs = tuple(GpuProcess(pid=p, memory_used_bytes=GPU_BYTES) for p in self.pids)
        gpu = GpuSample(
            index=0, name="stub", uuid="GPU-stub", util_percent=None, memory_util_percent=None,
            memory_used_bytes=None, memory_total_bytes=None, temperature_c=None, power_w=None,
            power_limit_w=None, sm_clock_mhz=None, memory_clock_mhz=None,
            pcie_rx_bytes_per_s=None, pcie_tx_bytes_per_s=None, processes=procs,
        )
        return GpuReport(source="simulated", gpus=(gpu,), note="test stub")

    def close(self) -> None:
        pass


def _frame(gpu_pids: tuple[int, ...] = ()) -> Frame:
    sampler = Sampler(gpu=StubGpu(gpu_pids), host=ProcHostSource(), processes=ProcProcessSource())
    try:
        return sampler.first_frame()
    finally:
        sampler.close()


def _by_pid(frame: Frame) -> dict[int, ProcessSample]:
    return {p.pid: p for p in frame.processes}


def _group(frame: Frame, pid: int) -> TrainerGroup:
    groups = [t for t in frame.trainers if t.pid == pid]
    assert len(groups) == 1, f"trainer {pid} not found once in {frame.trainers}"
    return groups[0]


def _assert_grouped(frame: Frame, ready: dict) -> TrainerGroup:
    trainer, workers = ready["pid"], tuple(ready["worker_pids"])
    group = _group(frame, trainer)
    rows = _by_pid(frame)
    assert group.worker_pids == workers
    assert rows[trainer].role == "trainer"
    for pid in workers:
        assert rows[pid].role == "worker"
        assert rows[pid].trainer_pid == trainer
        assert rows[pid].name == "pt_data_worker"
    others = [p for p in frame.processes if p.trainer_pid == trainer]
    assert sorted(p.pid for p in others) == list(workers)
    members = [rows[trainer], *(rows[w] for w in workers)]
    assert group.num_threads_total == sum(p.num_threads or 0 for p in members)
    assert group.workers_cpu_percent == pytest.approx(
        sum(rows[w].cpu_percent or 0.0 for w in workers))
    return group


@pytest.mark.alone  # /dev/shm's semaphores: another test's trainer adds its own
@pytest.mark.parametrize(
    ("method", "workers", "pin"),
    [("fork", 2, True), ("spawn", 3, False), ("forkserver", 4, True)],
)
def test_trainer_found_with_exact_workers(tmp_path: Path, method: str, workers: int, pin: bool):
    args = ["--start-method", method, "--workers", str(workers)] + (["--pin-memory"] if pin else [])
    semaphores = _semaphores()
    with running_trainer(tmp_path, args) as ready:
        frame = _frame()
        group = _assert_grouped(frame, ready)
        rows = _by_pid(frame)
        helpers = [p for p in frame.processes
                   if p.ppid == ready["pid"] and p.pid not in ready["worker_pids"]]
        # spawn and forkserver start a resource tracker (and forkserver its server): never
        # workers, never trainers.
        assert all(p.role == "other" for p in helpers)
        if method != "fork":
            assert any("resource_tracker" in " ".join(p.cmdline) for p in helpers)
        if method == "forkserver":
            server = rows[rows[ready["worker_pids"][0]].ppid or 0]
            assert "forkserver" in " ".join(server.cmdline) and server.ppid == ready["pid"]
    # CPU-only torch ignores pin_memory=True (it warns, starts no pin thread): report the truth.
    assert ready["pin_memory_thread"] is False
    assert group.pin_memory_thread is False
    assert [p for p in (ready["pid"], *ready["worker_pids"], *(h.pid for h in helpers))
            if alive(p)] == []
    # the killed run's named semaphores (spawn, forkserver) unlinked by its resource tracker
    assert _semaphores() - semaphores == set()


@pytest.mark.alone  # a run's end elsewhere removes the dead maker's file it keeps
def test_a_killed_workers_torch_segment_is_removed(tmp_path: Path):
    # A worker SIGKILLed between making a torch shared-memory file and unlinking it leaves
    # the file in /dev/shm (a race: made here by hand, named as torch names it, with the
    # worker's PID); the trainer's other files there are not the run's to remove.
    with running_trainer(tmp_path, ["--workers", "2"]) as ready:
        left = Path(f"/dev/shm/torch_{ready['worker_pids'][0]}_1804289383_0")
        other = Path(f"/dev/shm/torch_{_pid_max() + 7}_1804289383_0")  # no process's
        for path in (left, other):
            path.write_bytes(b"\0" * 1024)
    try:
        assert not left.exists()
        assert other.exists()
    finally:
        left.unlink(missing_ok=True)
        other.unlink(missing_ok=True)


def _semaphores() -> set[str]:
    """multiprocessing's named semaphores in /dev/shm."""
    return {name for name in os.listdir("/dev/shm") if name.startswith("sem.mp-")}


def test_pin_memory_thread_detected(tmp_path: Path):
    # CPU torch never starts the real pt_data_pin thread, so this trainer names a real
    # thread the way torch's _pin_memory_loop does (torch.multiprocessing._set_thread_name).
    with running_trainer(tmp_path, ["--workers", "2", "--name-pin-thread"]) as ready:
        group = _assert_grouped(_frame(), ready)
    assert group.pin_memory_thread is True


def test_gpu_memory_joined_and_foreign_pid_kept(tmp_path: Path):
    foreign = _pid_max() + 11  # no /proc entry can have it: an NVML pid from another namespace
    with running_trainer(tmp_path, ["--workers", "2"]) as ready:
        frame = _frame((ready["pid"], foreign))
        _assert_grouped(frame, ready)
    rows = _by_pid(frame)
    assert rows[ready["pid"]].gpu_memory_bytes == GPU_BYTES
    assert rows[ready["pid"]].gpu_indices == (0,)
    assert rows[foreign].in_proc is False
    assert rows[foreign].gpu_memory_bytes == GPU_BYTES
    assert rows[foreign].name == "?"


def test_source_survives_trainer_death(tmp_path: Path):
    sampler = Sampler(gpu=StubGpu(), host=ProcHostSource(), processes=ProcProcessSource())
    with running_trainer(tmp_path, ["--workers", "2"]) as ready:
        sampler.prime()
        trainers = sampler.sample().trainers
        assert [t.worker_pids for t in trainers if t.pid == ready["pid"]] == [
            tuple(ready["worker_pids"])]
    frame = sampler.sample()
    gone = {ready["pid"], *ready["worker_pids"]}
    assert not [p for p in frame.processes if p.pid in gone and p.state != "Z"]
    assert ready["pid"] not in {t.pid for t in frame.trainers}
    assert frame.errors == ()
    sampler.close()


def test_once_json_reports_trainer_and_workers(tmp_path: Path):
    with running_trainer(tmp_path, ["--start-method", "spawn", "--workers", "2"]) as ready:
        out = subprocess.run(
            [sys.executable, "-m", "gputop", "--once", "--json", "--interval", "0.3"],
            capture_output=True, text=True, cwd=REPO, timeout=120,
        )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    trainers = [t for t in doc["trainers"] if t["pid"] == ready["pid"]]
    assert [t["worker_pids"] for t in trainers] == [ready["worker_pids"]]
    rows = {p["pid"]: p for p in doc["processes"]}
    assert rows[ready["pid"]]["role"] == "trainer"
    assert {rows[w]["role"] for w in ready["worker_pids"]} == {"worker"}
    assert {rows[w]["trainer_pid"] for w in ready["worker_pids"]} == {ready["pid"]}


def test_torchrun_launcher_and_ranks(tmp_path: Path):
    torchrun = [str(Path(sys.executable).parent / "torchrun"), "--nproc-per-node", "2",
                "--master-port", "0"]
    with running_trainer(tmp_path, ["--workers", "2"], launcher=torchrun, ranks=2) as ready:
        frame = _frame()
    rows = _by_pid(frame)
    launcher = ready["launcher_pid"]
    assert rows[launcher].role == "launcher" and rows[launcher].name == "pt_elastic"
    for rank in ready["ranks"]:
        group = _assert_grouped(frame, rank)
        assert rank["ppid"] == launcher
        assert group.launcher_pid == launcher
    # torchrun puts ranks in sessions of their own: teardown must still leave nothing behind.
    started = [launcher, *(p for r in ready["ranks"] for p in (r["pid"], *r["worker_pids"]))]
    assert [p for p in started if alive(p)] == []



def test_a_runs_leftover_torch_segments_are_those_of_dead_makers(tmp_path: Path):
    """What the run's end removes: files named for a process that no longer runs and
    changed since the run began; never a live process's, never one from before."""
    dead = _pid_max() + 13
    since = time.time() - 60
    files = {name: tmp_path / name for name in (
        f"torch_{dead}_1_0", f"torch_{os.getpid()}_1_0", f"torch_{dead}_2_0", "sem.mp-x")}
    for path in files.values():
        path.write_bytes(b"x")
    old = files[f"torch_{dead}_2_0"]
    os.utime(old, (since - 60, since - 60))
    remove_torch_segments(of_the_dead_since(since), shm=str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"torch_{os.getpid()}_1_0", old.name, "sem.mp-x"])
