"""One reader of a process's allowed CPUs (/proc/PID/status Cpus_allowed_list), whose
parser both the cpu-starved finding and the cores a trainer may use rest on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gputop.sources.affinity import cpus_allowed, parse_cpu_list
from gputop.sources.cpu_quota import affinity_count, cores_allowed


@pytest.mark.parametrize(("text", "cpus"), [
    ("0-3,8,10-11", {0, 1, 2, 3, 8, 10, 11}),
    ("0", {0}),
    ("0-1\n", {0, 1}),
    ("\t2-3", {2, 3}),
    ("0-3,2", {0, 1, 2, 3}),  # overlapping parts name each CPU once
    ("", None),
    ("   ", None),
    ("x", None),
    ("0-3,,8", None),
    ("3-1", None),  # a reversed range names no CPU
    ("0-7,1--3", None),
    ("+1", None),
    ("-1", None),
    ("0-3-5", None),
    ("0x1", None),
    ("0-99999999999", None),  # no kernel has that many CPUs
])
def test_cpu_lists_parse_as_the_kernel_writes_them(text: str, cpus: set[int] | None) -> None:
    assert parse_cpu_list(text) == (None if cpus is None else frozenset(cpus))


def _proc(root: Path, pid: int, status: str) -> str:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "status").write_text(status)
    return str(root)


@pytest.mark.parametrize(("listed", "cpus"), [
    ("0-3,2", {0, 1, 2, 3}), ("1,5-6", {1, 5, 6}), ("garbage", None), ("", None)])
def test_both_callers_read_one_list_alike(tmp_path: Path, listed: str,
                                          cpus: set[int] | None) -> None:
    proc = _proc(tmp_path, 7, f"Name:\tpython\nCpus_allowed:\tff\nCpus_allowed_list:\t{listed}\n")
    assert cpus_allowed(7, proc) == (None if cpus is None else frozenset(cpus))
    assert affinity_count(7, proc) == (None if cpus is None else len(cpus))
    assert cores_allowed(7, proc, str(tmp_path / "no-cgroups")) == (
        None if cpus is None else float(len(cpus)))


def test_a_status_without_the_list_or_a_gone_process_is_unknown(tmp_path: Path) -> None:
    proc = _proc(tmp_path, 7, "Name:\tpython\n")
    assert cpus_allowed(7, proc) is None and affinity_count(7, proc) is None
    assert cpus_allowed(99, proc) is None


def test_a_real_process_has_the_cpus_the_kernel_gives_it() -> None:
    assert cpus_allowed(os.getpid()) == frozenset(os.sched_getaffinity(0))
    assert affinity_count(os.getpid()) == len(os.sched_getaffinity(0))
