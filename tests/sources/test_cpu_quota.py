"""The cores a process may use: its affinity, capped by its cgroup's quota, v2 and v1."""

from __future__ import annotations

import os
from pathlib import Path

from gputop.sources.cpu_quota import affinity_count, cgroup_quota, cores_allowed


def _proc(root: Path, pid: int, cpus: str, cgroup: str) -> Path:
    """A /proc with one process: its affinity list and its cgroup lines."""
    d = root / "proc" / str(pid)
    d.mkdir(parents=True)
    (d / "status").write_text(f"Name:\tpython\nCpus_allowed:\tff\nCpus_allowed_list:\t{cpus}\n")
    (d / "cgroup").write_text(cgroup)
    return root / "proc"


def _file(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_real_process_has_the_affinity_the_kernel_gives_it() -> None:
    assert affinity_count(os.getpid()) == len(os.sched_getaffinity(0))
    allowed = cores_allowed(os.getpid())
    assert allowed is not None and 0 < allowed <= len(os.sched_getaffinity(0))


def test_a_v2_quota_caps_the_affinity(tmp_path: Path) -> None:
    proc = _proc(tmp_path, 7, "0-7", "0::/jobs/train\n")
    cg = tmp_path / "cg"
    _file(cg / "cpu.max", "max 100000\n")
    _file(cg / "jobs" / "cpu.max", "300000 100000\n")
    _file(cg / "jobs" / "train" / "cpu.max", "max 100000\n")
    assert cgroup_quota(7, str(proc), str(cg)) == 3.0  # a parent's quota binds its children
    assert cores_allowed(7, str(proc), str(cg)) == 3.0


def test_a_v1_quota_caps_the_affinity(tmp_path: Path) -> None:
    proc = _proc(tmp_path, 7, "0-3", "4:memory:/x\n1:cpu,cpuacct:/docker/abc\n0::/\n")
    cg = tmp_path / "cg"
    _file(cg / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_quota_us", "150000\n")
    _file(cg / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_period_us", "100000\n")
    _file(cg / "cpu,cpuacct" / "cpu.cfs_quota_us", "-1\n")
    _file(cg / "cpu,cpuacct" / "cpu.cfs_period_us", "100000\n")
    assert cores_allowed(7, str(proc), str(cg)) == 1.5


def test_no_quota_leaves_the_affinity(tmp_path: Path) -> None:
    proc = _proc(tmp_path, 7, "0-1", "0::/\n")
    assert cores_allowed(7, str(proc), str(tmp_path / "none")) == 2.0


def test_a_gone_process_is_unknown(tmp_path: Path) -> None:
    assert cores_allowed(99, str(tmp_path), str(tmp_path)) is None
