"""The probe's recorder and API in-process, its GPU event timer with fake events, its boot."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import gputop.probe as probe
from gputop.probe import ring as ring_format
from gputop.probe.gpu_timing import GpuTimer
from gputop.probe.reader import RawRecord, RingReader
from gputop.probe.steps import FORWARD, OPTIMIZER, Recorder
from tests.helpers.probe import ROOT, trainer_env


def _records(rec: Recorder) -> list[RawRecord]:
    rec.publish()
    if rec.ring is None:  # made with the first step to publish
        return []
    reader = RingReader(rec.ring.path)
    try:
        return reader.read_new()
    finally:
        reader.close()


def _fetch(rec: Recorder, loader: int, batch: int = 8) -> None:
    rec.fetch_begin()
    rec.fetch_end(loader, batch)


def _train(rec: Recorder, steps: int, loader: int = 1) -> None:
    """`steps` training steps: a batch from `loader`, then the optimizer."""
    for _ in range(steps):
        _fetch(rec, loader)
        rec.optimizer_done(10)


def _loop_ends(rec: Recorder) -> None:
    """The loader is asked for a batch it no longer has: the last step closes."""
    rec.fetch_begin()
    rec.fetch_stop()


def _poll(reader: RingReader, got: list[RawRecord], count: int, deadline: float) -> None:
    """Read the ring into `got` until it holds `count` records (the probe's own thread
    publishes them) or `deadline` (time.monotonic) passes."""
    while len(got) < count and time.monotonic() < deadline:
        got += reader.read_new()
        time.sleep(0.02)


def test_each_fetch_closes_the_open_step_and_phases_land_in_it(rec: Recorder) -> None:
    rec.iteration_begin(1)
    for _ in range(5):
        _fetch(rec, 1)
        rec.add_phase(FORWARD, 1000)
        rec.add_phase(FORWARD, 500)
        rec.optimizer_done(200)
    _loop_ends(rec)
    got = _records(rec)
    assert [r.step for r in got] == [0, 1, 2, 3, 4]
    assert all(r.forward_ns == 1500 and r.optimizer_ns == 200 and r.h2d_ns == -1 for r in got)
    assert all(r.data_ns >= 0 and r.duration_ns >= r.data_ns for r in got)
    assert [bool(r.flags & ring_format.F_WARMUP) for r in got] == [True] * 3 + [False] * 2
    assert all(r.flags & ring_format.F_OPTIMIZER and r.batch_size == 8 for r in got)


def test_a_paused_trainer_still_shows_its_last_steps(rec: Recorder) -> None:
    """Steps are staged between publishes; a trainer that stops stepping (evaluation, a
    checkpoint, a hang) has them published by the probe's own thread, in order, none lost."""
    rec.iteration_begin(1)
    _train(rec, 300)
    _loop_ends(rec)  # closes step 299; nothing else happens in this "trainer" from here
    assert rec.ring is not None
    reader = RingReader(rec.ring.path)
    got: list[RawRecord] = []
    try:
        _poll(reader, got, 300, time.monotonic() + 10)
        assert reader.dropped == 0
    finally:
        reader.close()
    assert [r.step for r in got] == list(range(300))


def test_a_new_epoch_restarts_warm_up(rec: Recorder) -> None:
    for _ in range(2):
        rec.iteration_begin(1)
        _train(rec, 4)
        _loop_ends(rec)
    got = _records(rec)
    assert [r.epoch for r in got] == [0] * 4 + [1] * 4
    warm = [bool(r.flags & ring_format.F_WARMUP) for r in got]
    assert warm == [True] * 3 + [False] + [True] * 3 + [
        False
    ]


def test_evaluation_batches_are_kept_apart_from_training_steps(rec: Recorder) -> None:
    for _ in range(2):
        rec.iteration_begin(1)
        _train(rec, 3)
        rec.iteration_begin(2)
        for _ in range(4):
            _fetch(rec, 2)
        _loop_ends(rec)
    got = _records(rec)
    train = [r for r in got if not r.flags & ring_format.F_OTHER]
    other = [r for r in got if r.flags & ring_format.F_OTHER]
    assert {r.loader for r in train} == {1} and len(train) == 6
    assert {r.loader for r in other} == {2} and len(other) == 8


def test_the_loader_that_trains_wins_even_when_evaluation_came_first(rec: Recorder) -> None:
    rec.iteration_begin(2)
    for _ in range(3):
        _fetch(rec, 2)  # a sanity-check evaluation before training
    rec.iteration_begin(1)
    _train(rec, 3)
    _loop_ends(rec)
    got = _records(rec)
    assert [r.loader for r in got if r.flags & ring_format.F_OPTIMIZER] == [1, 1, 1]


def test_without_a_loader_optimizer_steps_are_the_boundaries(rec: Recorder) -> None:
    for _ in range(4):
        rec.add_phase(FORWARD, 100)
        rec.optimizer_done(50)
    got = _records(rec)
    assert len(got) == 4
    assert all(r.data_ns == -1 and r.flags & ring_format.F_IMPLICIT for r in got)


def test_step_end_alone_marks_steps(rec: Recorder) -> None:
    rec.step_end()
    for _ in range(3):
        rec.add_phase(OPTIMIZER, 5)
        rec.step_end(batch_size=32)
    got = _records(rec)
    assert [r.batch_size for r in got] == [32, 32, 32]


def test_manual_phases_take_precedence_over_the_torch_patch(rec: Recorder) -> None:
    rec.manual = True
    _fetch(rec, 1)
    rec.add_phase(OPTIMIZER, 100)
    rec.auto_optimizer_done(999)  # the hook on the same optimizer.step() is ignored
    _loop_ends(rec)
    assert [r.optimizer_ns for r in _records(rec)] == [100]


def test_nested_fetches_count_once(rec: Recorder) -> None:
    rec.fetch_begin()
    rec.fetch_begin()  # watch() around a patched DataLoader iterator
    rec.fetch_end(7)
    rec.fetch_end(1)
    rec.optimizer_done(1)
    _loop_ends(rec)
    assert [r.loader for r in _records(rec)] == [1]


def test_no_ring_means_a_quiet_probe(tmp_path: Path) -> None:
    r = Recorder(lambda: None)
    _train(r, 3)
    assert r.ring is None and not r.enabled


class FakeGpu:
    """A stream whose work completes only when the test says the GPU got there."""

    def __init__(self) -> None:
        self.now_ms = 0.0
        self.done_through = -1
        self.recorded = 0
        self.created = 0

    def event(self) -> FakeEvent:
        self.created += 1
        return FakeEvent(self)


class FakeEvent:
    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu
        self.order = -1
        self.time_ms = 0.0

    def record(self) -> None:
        self.order = self.gpu.recorded
        self.gpu.recorded += 1
        self.time_ms = self.gpu.now_ms

    def query(self) -> bool:
        return self.order <= self.gpu.done_through

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.query() and end.query(), "elapsed_time on an unfinished event syncs"
        return end.time_ms - self.time_ms


def test_gpu_times_are_published_once_their_events_complete(rec: Recorder) -> None:
    gpu = FakeGpu()
    rec.gpu = timer = GpuTimer(gpu.event, queue_size=4)
    for i in range(6):
        rec.fetch_begin()
        gpu.now_ms += 2.0  # the GPU idles 2 ms while the host waits for data
        rec.fetch_end(1)
        gpu.now_ms += 5.0  # then computes 5 ms
        rec.optimizer_done(1)
        if i == 2:
            assert _records(rec) == []  # nothing finished on the GPU yet: nothing published
            gpu.done_through = gpu.recorded
    _loop_ends(rec)
    gpu.done_through = gpu.recorded
    timer.flush(rec)
    got = _records(rec)
    assert [r.step for r in got] == list(range(6))
    assert all(r.gpu_ns == 5_000_000 for r in got)
    assert [r.gpu_gap_ns for r in got] == [-1] + [2_000_000] * 5
    assert gpu.created <= 2 * 4 + 4  # pooled: events are reused, not made per step


def test_a_gpu_that_falls_behind_never_blocks_the_host(rec: Recorder) -> None:
    gpu = FakeGpu()
    rec.gpu = GpuTimer(gpu.event, queue_size=4)
    _train(rec, 50)
    got = _records(rec)
    closed = 49  # the 50th step is still open
    assert len(got) == closed - 4  # queue full: the oldest go out with GPU times unknown
    assert all(r.gpu_ns == -1 and r.gpu_gap_ns == -1 for r in got)
    assert gpu.created <= 12


def test_a_paused_gpu_trainer_shows_its_last_steps_once_the_gpu_finishes(
    rec: Recorder,
) -> None:
    """Steps wait for their GPU events; when the trainer stops stepping (a checkpoint, a
    hang), the probe's thread polls the events, so the last steps still reach the ring."""
    gpu = FakeGpu()
    rec.gpu = GpuTimer(gpu.event, queue_size=8)
    for i in range(8):
        _fetch(rec, 1)
        gpu.now_ms += 5.0
        rec.optimizer_done(1)
        if i == 3:
            gpu.done_through = gpu.recorded  # the first steps finish; the rest are queued
    _loop_ends(rec)  # step 7 closed; from here the trainer does nothing
    assert rec.ring is not None
    reader = RingReader(rec.ring.path)
    got: list[RawRecord] = []
    try:
        deadline = time.monotonic() + 10
        _poll(reader, got, 3, deadline)
        gpu.done_through = gpu.recorded  # the GPU gets through the queued work
        _poll(reader, got, 8, deadline)
    finally:
        reader.close()
    assert [r.step for r in got] == list(range(8))
    assert all(r.gpu_ns == 5_000_000 for r in got)


def test_bad_phase_names_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown phase"):
        probe.phase("loss")


def _run(code: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=trainer_env(tmp_path, **env), cwd=ROOT, timeout=120)


def test_importing_the_probe_loads_only_a_few_stdlib_modules(tmp_path: Path) -> None:
    out = _run("import sys; a = set(sys.modules); import gputop.probe; "
               "print(' '.join(sorted(set(sys.modules) - a)))", tmp_path)
    loaded = set(out.stdout.split())
    assert loaded <= {"__future__", "_struct", "struct", "mmap", "zlib", "itertools", "gputop",
                      "gputop.probe", "gputop.probe.ring", "gputop.probe.steps"}, loaded


@pytest.mark.slow
def test_unwritable_ring_directory_warns_once_and_the_program_runs_on(tmp_path: Path) -> None:
    code = ("import gputop.probe as p\n"
            "for b in p.watch(range(20)):\n"
            "    with p.phase('forward'): pass\n"
            "p.annotate(num_workers=1); p.step_end()\n"
            "print('finished')")
    out = _run(code, tmp_path, GPUTOP_RING_DIR=str(tmp_path / "missing"))
    assert out.returncode == 0 and out.stdout.strip() == "finished"
    assert out.stderr.count("gputop.probe:") == 1 and "runs on" in out.stderr


@pytest.mark.slow
def test_a_full_disk_warns_once_and_the_program_runs_on(tmp_path: Path) -> None:
    code = ("import resource, signal\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
            "import gputop.probe as p\n"
            "for b in p.watch(range(20)):\n"
            "    with p.phase('optimizer'): pass\n"
            "print('finished')")
    out = _run(code, tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "finished", out.stderr
    assert out.stderr.count("gputop.probe:") == 1
    assert not list(tmp_path.glob("gputop-*.ring"))


@pytest.mark.slow
def test_forked_children_never_write_or_unlink_the_parents_ring(tmp_path: Path) -> None:
    code = ("import os, gputop.probe as p\n"
            "from gputop.probe import ring\n"
            "for b in p.watch(range(3)):\n"
            "    with p.phase('optimizer'): pass\n"
            "rec = p.recorder()\n"
            "rec._lock.acquire()  # the publisher thread is mid-write as the fork happens\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    for b in p.watch(range(500)):\n"
            "        with p.phase('optimizer'): pass\n"
            "    raise SystemExit(0 if len(rec._staged) < 64 else 3)  # bounded\n"
            "rec._lock.release()\n"
            "assert os.waitpid(pid, 0)[1] == 0\n"
            "p.recorder().publish()\n"
            "path = ring.ring_path(os.getpid())\n"
            "from gputop.probe.reader import RingReader\n"
            "print(os.path.exists(path), len(RingReader(path).read_new()),"
            " os.path.exists(ring.ring_path(pid)))\n")
    out = _run(code, tmp_path)
    assert out.stdout.split() == ["True", "3", "False"], out.stderr


BOOT = str(ROOT / "gputop" / "probe" / "_boot")


@pytest.mark.slow
def test_sitecustomize_installs_the_probe_and_chains_to_the_one_it_shadows(
    tmp_path: Path,
) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIRS_RAN'] = 'yes'\n")
    code = ("import os, sys\n"
            "print(os.environ.get('THEIRS_RAN'), 'gputop.probe' in sys.modules,"
            " any(type(f).__name__ == '_TorchFinder' for f in sys.meta_path))")
    env = trainer_env(tmp_path, GPUTOP_PROBE="1")
    env["PYTHONPATH"] = os.pathsep.join([BOOT, str(theirs), str(ROOT)])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=60)
    assert out.stdout.split() == ["yes", "True", "True"], out.stderr
    env["GPUTOP_PROBE"] = "0"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=60)
    assert out.stdout.split() == ["yes", "False", "False"], out.stderr


@pytest.mark.slow
def test_sitecustomize_finds_the_probe_in_an_interpreter_without_gputop(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "GPUTOP_PROBE": "1", "PYTHONPATH": BOOT,
           "GPUTOP_RING_DIR": str(tmp_path)}
    code = "import sys; print(sys.modules['gputop.probe'].__file__)"
    # -I: isolated, so nothing but the boot directory can make gputop importable. A
    # distribution's Python (Debian's) imported its own sitecustomize at startup: ours is
    # imported in its place, as PYTHONPATH would have put it first.
    out = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {BOOT!r});"
                          " sys.modules.pop('sitecustomize', None); import sitecustomize; "
                          + code], capture_output=True, text=True, env=env, timeout=60,
                         cwd=tmp_path)
    assert out.stdout.strip().endswith("gputop/probe/__init__.py"), out.stderr


@pytest.mark.slow
def test_a_process_that_never_steps_leaves_no_ring(tmp_path: Path) -> None:
    """A launcher (torchrun) runs under the probe too; at exit it must not create a ring."""
    out = _run("import gputop.probe as p\nrec = p.install()\nrec.close()  # what exit does\n"
               "print(rec.ring is None)\n", tmp_path)
    assert out.returncode == 0 and out.stderr == ""
    assert out.stdout.split() == ["True"]  # never created (a ring made at exit is unlinked
    # at once: a reader sampling then would show a launcher as a trainer without steps)


@pytest.mark.parametrize(("env", "rendezvous"), [
    ({"MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29500"}, "10.0.0.7:29500"),
    ({"MASTER_ADDR": "node1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "job42"},
     "job42@node1:29500"),
    ({"MASTER_ADDR": "node1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "none"},
     "node1:29500"),
    ({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, None),  # one host's own job
    ({"MASTER_ADDR": "localhost", "MASTER_PORT": "29500"}, None),
    ({"MASTER_ADDR": "node1"}, None),
])
def test_the_rendezvous_names_a_job_across_hosts_and_only_then(
        monkeypatch: pytest.MonkeyPatch, env: dict[str, str], rendezvous: str | None) -> None:
    for key in ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert probe.env_facts().get("rendezvous") == rendezvous
