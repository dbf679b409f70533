"""The thread reader (htop's H): a real process's threads by TID and name, its main thread
left to the process's own row, %CPU from two reads, a bounded count, the gone left out."""

from __future__ import annotations

import subprocess
import sys
import time

from gputop.sources.threads import ThreadReader
from tests.helpers.threaded import named_threads, thread_names

NAMES = ("t-spin", "t-idle-a", "t-idle-b")


def test_it_lists_each_thread_by_tid_and_name_but_the_main_one() -> None:
    with named_threads(NAMES, busy="t-spin") as proc:
        read = ThreadReader().read([proc.pid])
        assert set(read) == {proc.pid}
        threads = read[proc.pid]
        assert {t.tid: t.comm for t in threads} == thread_names(proc.pid)
        assert proc.pid not in {t.tid for t in threads}
        assert all(t.cpu_percent is None for t in threads)  # one read: no interval yet


def test_a_busy_thread_reads_more_cpu_than_the_idle_ones_from_the_second_read() -> None:
    with named_threads(NAMES, busy="t-spin") as proc:
        reader = ThreadReader()
        first = {t.comm: t for t in reader.read([proc.pid])[proc.pid]}
        later = first
        for _ in range(200):  # until the busy thread's CPU time has moved on
            time.sleep(0.05)
            later = {t.comm: t for t in reader.read([proc.pid])[proc.pid]}
            if later["t-spin"].cpu_time_s > first["t-spin"].cpu_time_s:
                break
        spin = later["t-spin"].cpu_percent
        assert spin is not None and spin > 0
        idle = [later[name].cpu_percent for name in ("t-idle-a", "t-idle-b")]
        assert all(cpu is not None and cpu < spin for cpu in idle), later


def test_it_reads_at_most_its_bound_of_threads() -> None:
    with named_threads(NAMES) as proc:
        read = ThreadReader(max_threads=2).read([proc.pid])
        assert sum(len(threads) for threads in read.values()) == 2


def test_a_gone_process_and_one_without_other_threads_are_left_out() -> None:
    single = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    try:
        with named_threads(NAMES) as proc:
            read = ThreadReader().read([ended.pid, single.pid, proc.pid])
            assert set(read) == {proc.pid}
    finally:
        single.kill()
        single.wait()
