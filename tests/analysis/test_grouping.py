"""Worker grouping on recorded process tables (fork, spawn, forkserver, torchrun, torch < 2.5)."""

from __future__ import annotations

import random

import pytest

from gputop.analysis.grouping import (
    Grouping,
    classify,
    legacy_candidates,
    torch_version_below,
    trainer_groups,
)
from gputop.core.model import ProcessSample

PY = "/home/ana/project/.venv/bin/python"
TRAIN = (PY, "train.py", "--epochs", "3")
TRACKER = (PY, "-B", "-c", "from multiprocessing.resource_tracker import main;main(5)")
FORKSERVER = (PY, "-B", "-c", "from multiprocessing.forkserver import main; main(8, 9, "
              "['__main__'], **{'sys_path': ['/home/ana/project/tests/trainers']})")
SPAWNED = (PY, "-B", "-c", "from multiprocessing.spawn import spawn_main; "
           "spawn_main(tracker_fd=5, pipe_handle=7)", "--multiprocessing-fork")


def row(pid: int, ppid: int, name: str = "python", cmdline: tuple[str, ...] = TRAIN,
        gpu: bool = False, cpu: float | None = 10.0, threads: int = 4) -> ProcessSample:
    return ProcessSample(
        pid=pid, ppid=ppid, name=name, cmdline=cmdline, username="u", state="S",
        num_threads=threads, cpu_percent=cpu, rss_bytes=1, cpu_time_s=1.0, start_ticks=pid,
        gpu_memory_bytes=1 << 30 if gpu else None, gpu_indices=(0,) if gpu else (),
    )


SHELL = row(50, 1, "bash", ("bash",))
FORK = [SHELL, row(100, 50, threads=9), row(101, 100, "pt_data_worker"),
        row(102, 100, "pt_data_worker", cpu=None)]
SPAWN = [SHELL, row(200, 50), row(201, 200, cmdline=TRACKER),
         row(202, 200, "pt_data_worker", SPAWNED), row(203, 200, "pt_data_worker", SPAWNED)]
FORKSRV = [SHELL, row(300, 50), row(301, 300, cmdline=TRACKER), row(302, 300, cmdline=FORKSERVER),
           *(row(p, 302, "pt_data_worker", FORKSERVER) for p in (303, 304, 305))]
TORCHRUN = [SHELL, row(400, 50, "pt_elastic", (PY, "/venv/bin/torchrun", "--nproc-per-node", "2",
                                               "train.py")),
            row(401, 400, gpu=True), row(402, 400, gpu=True),
            row(403, 401, "pt_data_worker"), row(404, 402, "pt_data_worker")]


def groups_of(rows: list[ProcessSample], **kw) -> tuple[Grouping, dict[int, tuple[int, ...]]]:
    g = classify(rows, **kw)
    return g, dict(g.workers_of)


@pytest.mark.parametrize(
    ("rows", "trainer", "workers", "helpers"),
    [(FORK, 100, (101, 102), ()), (SPAWN, 200, (202, 203), (201,)),
     (FORKSRV, 300, (303, 304, 305), (301, 302))],
    ids=["fork", "spawn", "forkserver"],
)
def test_start_methods(rows, trainer, workers, helpers):
    g, workers_of = groups_of(rows)
    assert workers_of == {trainer: workers}
    assert g.role(trainer) == "trainer"
    assert all(g.role(w) == "worker" and g.trainer_of[w] == trainer for w in workers)
    assert all(g.role(h) == "other" for h in (*helpers, 50))
    assert set(g.roles) == {trainer, *workers}


def test_torchrun_ranks_are_trainers_under_the_launcher():
    g, workers_of = groups_of(TORCHRUN)
    assert g.role(400) == "launcher"
    assert workers_of == {401: (403,), 402: (404,)}
    assert dict(g.launcher_of) == {401: 400, 402: 400}


def test_trainer_groups_sum_workers_and_threads():
    by = {r.pid: r for r in FORK}
    (group,) = trainer_groups(classify(FORK), by, frozenset({100}))
    assert group.worker_pids == (101, 102)
    assert group.workers_cpu_percent == 10.0  # an unmeasured worker adds nothing
    assert group.num_threads_total == 9 + 4 + 4
    assert group.pin_memory_thread is True
    assert group.launcher_pid is None
    (group,) = trainer_groups(classify(FORK), by, frozenset())
    assert group.pin_memory_thread is False


def test_orphan_worker_has_no_trainer_and_init_is_not_one():
    rows = [row(1, 0, "init", ("/sbin/init",)), row(500, 1, "pt_data_worker")]
    g = classify(rows)
    assert g.role(500) == "worker" and 500 not in g.trainer_of
    assert g.role(1) == "other"
    assert trainer_groups(g, {r.pid: r for r in rows}, frozenset()) == ()


def test_worker_of_a_worker_belongs_to_the_first_non_worker():
    rows = [*FORK, row(106, 101, "pt_data_worker")]
    assert classify(rows).workers_of == {100: (101, 102, 106)}


def test_worker_whose_parent_vanished_mid_scan():
    g = classify([row(700, 699, "pt_data_worker")])
    assert g.role(700) == "worker" and g.workers_of == {}


def test_trainer_without_workers_by_gpu_or_probe():
    rows = [SHELL, row(800, 50, gpu=True), row(801, 50), row(802, 50, "Xorg", ("/usr/bin/Xorg",),
                                                              gpu=True),
            row(803, 50, cmdline=TRACKER, gpu=True), row(804, 50, "ollama", ("ollama",))]
    g = classify(rows, probe_pids=frozenset({801, 804}))
    assert {p: g.role(p) for p in (800, 801, 802, 803, 804)} == {
        800: "trainer", 801: "trainer", 802: "other", 803: "other", 804: "trainer"}


def test_python_by_argv0_when_comm_differs():
    g = classify([row(900, 1, "pt_main_thread", gpu=True),
                  row(901, 1, "myapp", ("/opt/bin/python3.12", "app.py"), gpu=True)])
    assert g.role(900) == g.role(901) == "trainer"


def test_order_does_not_matter():
    rows = [*FORK, *SPAWN[1:], *FORKSRV[1:], *TORCHRUN[1:]]
    expected = classify(rows)
    for seed in range(5):
        shuffled = rows[:]
        random.Random(seed).shuffle(shuffled)
        assert classify(shuffled) == expected


# torch < 2.5: nothing is named; candidates come from ancestry and cmdline only.

LEGACY_FORK = [SHELL, row(600, 50), row(601, 600), row(602, 600)]
LEGACY_SPAWN = [SHELL, row(610, 50), row(611, 610, cmdline=TRACKER), row(612, 610, cmdline=SPAWNED)]
LEGACY_FORKSRV = [SHELL, row(620, 50), row(621, 620, cmdline=FORKSERVER),
                  row(622, 621, cmdline=FORKSERVER)]


@pytest.mark.parametrize(
    ("rows", "expected"),
    [(LEGACY_FORK, {601: 600, 602: 600}), (LEGACY_SPAWN, {612: 610}),
     (LEGACY_FORKSRV, {622: 620})],
    ids=["fork", "spawn", "forkserver"],
)
def test_legacy_candidates(rows, expected):
    found = legacy_candidates(rows)
    assert found == expected
    g = classify(rows, legacy=found)
    trainer = next(iter(expected.values()))
    assert g.role(trainer) == "trainer"
    assert g.workers_of == {trainer: tuple(sorted(expected))}


def test_legacy_is_conservative():
    rows = [
        SHELL,
        row(630, 50), row(631, 630, gpu=True),  # mp.spawn DDP rank: holds a GPU, not a worker
        row(640, 50, "make", ("make",)), row(641, 640, "make", ("make",)),  # not python
        row(650, 50), row(651, 650, cmdline=(PY, "other.py")),  # subprocess, not a fork
        row(660, 50), row(661, 660), row(662, 661),  # 661 has children: a parent, not a worker
        row(670, 50), row(671, 670, "pt_data_worker"), row(672, 670),  # named: torch >= 2.5
    ]
    assert legacy_candidates(rows) == {662: 661}


def test_legacy_never_overrides_named_workers():
    rows = [*FORK, row(103, 100)]
    g = classify(rows, legacy={103: 100, 101: 50})
    assert g.workers_of == {100: (101, 102, 103)}
    assert g.trainer_of[101] == 100


@pytest.mark.parametrize(
    ("version", "below"),
    [("2.4.1+cu121", True), ("1.13.0", True), ("2.5.0", False), ("2.13.0+cpu", False),
     ("2.5.0a0+git123", False), ("garbage", False)],
)
def test_torch_version_below(version, below):
    assert torch_version_below(version, 2, 5) is below
