"""The core-PMU rung: event choice, all-CPU sampling, own-process counting, honest refusals.

This VM has no core PMU, so the syscall layer is a stand-in (tests/helpers/perf.py), except
for the tests that sample or count a software event for real through the same code.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import struct
import time
from pathlib import Path

import pytest

from gputop.export.snapshot import dumps
from gputop.export.text import render
from gputop.sources.membw import open_membw_source
from gputop.sources.membw.corepmu import (
    AMD_CACHE_MISSES,
    INTEL_CACHE_MISSES,
    LLC_LOAD_MISSES,
    CoreEvent,
    ProcessCoreMeter,
    SystemCoreMeter,
    core_events,
    open_core_pmu,
    open_process_meter,
    open_system_meter,
)
from gputop.sources.membw.perf_event import (
    PERF_COUNT_SW_CPU_CLOCK,
    PERF_COUNT_SW_TASK_CLOCK,
    PERF_RECORD_LOST,
    PERF_RECORD_SAMPLE,
    PERF_TYPE_SOFTWARE,
    PerfCounter,
    SampleRing,
    Samples,
    cpu_wide_refusal,
    parse_samples,
)
from gputop.tui.history import History
from gputop.tui.views.host import membw_line
from tests.helpers.builders import frame
from tests.helpers.membw import proc_tree, sys_with_core_pmu
from tests.helpers.perf import FakePerf, StepClock
from tests.helpers.scheduling import favoured
from tests.helpers.users import as_other_user

pytestmark = pytest.mark.alone

CAP_PERFMON = 1 << 38
LINE = 64


def _sample(pid: int, period: int) -> bytes:
    return struct.pack("=IHHIIQ", PERF_RECORD_SAMPLE, 0, 24, pid, pid, period)


def test_parse_samples_sums_periods_by_pid_counts_lost_and_skips_the_rest() -> None:
    lost = struct.pack("=IHHQQ", PERF_RECORD_LOST, 0, 24, 7, 5)
    throttle = struct.pack("=IHHQQQ", 5, 0, 32, 1, 2, 3)
    data = _sample(10, 100) + throttle + _sample(11, 5) + lost + _sample(10, 50)
    assert parse_samples(data) == Samples({10: 150, 11: 5}, 5)
    torn = data + struct.pack("=IHH", PERF_RECORD_SAMPLE, 0, 24) + b"\0" * 4
    assert parse_samples(torn) == Samples({10: 150, 11: 5}, 5)
    assert parse_samples(struct.pack("=IHH", 9, 0, 0) + _sample(1, 1)) == Samples({}, 0)


@pytest.mark.parametrize(("vendor", "events"), [
    ("GenuineIntel", (INTEL_CACHE_MISSES, LLC_LOAD_MISSES)),
    ("AuthenticAMD", (LLC_LOAD_MISSES, AMD_CACHE_MISSES)),
    (None, (LLC_LOAD_MISSES,)),  # ARM's generic cache-misses is L1 refills: not DRAM
])
def test_events_per_vendor_say_what_they_count(vendor: str | None,
                                               events: tuple[CoreEvent, ...]) -> None:
    assert core_events((vendor, 6, 1) if vendor else None) == events
    assert "L3 hits too" in AMD_CACHE_MISSES.meaning
    assert all("x 64 B" in e.meaning for e in events)


def test_no_core_pmu_falls_through_with_the_reason(tmp_path: Path) -> None:
    fake = FakePerf()
    meter, why = open_core_pmu(sys_with_core_pmu(tmp_path / "sys", pmu=None),
                               proc_tree(tmp_path / "proc"), fake.open, fake.ring)
    assert meter is None and why.startswith("perf core: no core PMU")
    assert fake.counters == []


def test_all_cpus_as_root_totals_misses_and_names_the_top_process(tmp_path: Path) -> None:
    proc = proc_tree(tmp_path / "proc", paranoid=2, cap_eff=CAP_PERFMON, processes={
        4242: ("pt_data_worker", (4242,), 10), 777: ("evil\x1b[2J", (777,), 1)})
    fake = FakePerf(per_read={0: 1_000_000, 1: 3_000_000},
                    samples={0: [Samples({}, 0), Samples({4242: 600, 0: 100}, 0)],
                             1: [Samples({}, 0), Samples({4242: 200, 777: 100}, 2)]})
    meter, why = open_core_pmu(sys_with_core_pmu(tmp_path / "sys", "0-1"), proc,
                               fake.open, fake.ring, StepClock())
    assert isinstance(meter, SystemCoreMeter), why
    assert meter.source == "perf-core" and meter.confidence == "approximate"
    assert "cache-misses on all 2 CPUs" in why and "x 64 B" in why
    assert [(c.cpu, c.sampling, c.enabled) for c in fake.counters] == [(0, True, True),
                                                                      (1, True, True)]
    traffic = meter.read()
    assert traffic is not None and traffic.read_bytes_per_s is None
    total = 4_000_000 * LINE  # lines a second on both CPUs, 64 bytes each
    assert traffic.total_bytes_per_s == pytest.approx(total)
    assert [(c.pid, c.name) for c in traffic.top] == [(4242, "pt_data_worker"),
                                                      (777, "evil\\x1b[2J")]
    assert traffic.top[0].bytes_per_s == pytest.approx(total * 800 / 1000)
    assert traffic.note == "2 sample(s) lost"
    meter.close()
    assert not fake.open_now() and all(r.closed for r in fake.rings)


def test_unsupported_event_tries_the_next_and_all_unsupported_leaks_nothing(
        tmp_path: Path) -> None:
    proc = proc_tree(tmp_path / "proc", cap_eff=CAP_PERFMON)
    sys_root = sys_with_core_pmu(tmp_path / "sys", "0-3")
    fake = FakePerf(unsupported={INTEL_CACHE_MISSES.config})
    meter, why = open_core_pmu(sys_root, proc, fake.open, fake.ring)
    assert meter is not None and meter.event == LLC_LOAD_MISSES, why
    meter.close()
    fake = FakePerf(unsupported={INTEL_CACHE_MISSES.config, LLC_LOAD_MISSES.config})
    meter, why = open_core_pmu(sys_root, proc, fake.open, fake.ring)
    assert meter is None
    assert why == ("perf core: no usable event (cache-misses: not supported by this PMU; "
                   "LLC-load-misses: not supported by this PMU)")
    assert not fake.open_now()


def test_a_pmu_that_cannot_sample_still_counts_and_says_no_process_is_named(
        tmp_path: Path) -> None:
    fake = FakePerf(per_read={0: 1000}, no_sampling=True)
    meter, why = open_core_pmu(sys_with_core_pmu(tmp_path / "sys", "0"),
                               proc_tree(tmp_path / "proc", cap_eff=CAP_PERFMON), fake.open,
                               fake.ring, StepClock())
    assert isinstance(meter, SystemCoreMeter) and not meter.sampling, why
    assert why.endswith("(this PMU cannot sample: no process named)")
    traffic = meter.read()
    assert traffic is not None and traffic.total_bytes_per_s == pytest.approx(1000 * LINE)
    assert traffic.top == () and fake.rings == []
    meter.close()
    assert not fake.open_now()


def test_paranoid_user_counts_own_processes_by_thread(tmp_path: Path) -> None:
    proc = proc_tree(tmp_path / "proc", paranoid=2, processes={
        100: ("python", (100, 101), 500), 200: ("pt_data_worker", (200,), 900)})
    fake = FakePerf(per_read={100: 1000, 101: 1000, 200: 5000})
    meter, why = open_core_pmu(sys_with_core_pmu(tmp_path / "sys"), proc, fake.open,
                               fake.ring, StepClock())
    assert isinstance(meter, ProcessCoreMeter), why
    assert meter.source == "perf-core-own"
    assert "perf_event_paranoid=2" in why and "other users'" in why
    assert sorted(c.pid for c in fake.open_now()) == [100, 101, 200]
    assert not any(c.sampling for c in fake.counters)
    traffic = meter.read()
    assert traffic is not None
    assert traffic.total_bytes_per_s == pytest.approx(7000 * LINE)
    assert [(c.pid, c.name) for c in traffic.top] == [(200, "pt_data_worker"), (100, "python")]
    assert traffic.top[1].bytes_per_s == pytest.approx(2000 * LINE)
    meter.close()
    assert not fake.open_now()


def test_own_process_mode_keeps_to_its_budget_busiest_first_and_skips_vanished_threads(
        tmp_path: Path) -> None:
    proc = proc_tree(tmp_path / "proc", processes={
        1: ("idle", (1, 2, 3), 5), 9: ("busy", (9, 10), 700), 20: ("gone", (20,), 300)})
    fake = FakePerf(gone_tids={20})
    meter = ProcessCoreMeter(INTEL_CACHE_MISSES, fake.open, proc, uid=os.getuid(), budget=3)
    assert sorted(c.pid for c in fake.open_now()) == [1, 9, 10]  # busy, then what fits
    assert meter.threads == 3 and meter.refused == 0
    meter.close()


def test_paranoid_3_refuses_even_own_processes(tmp_path: Path) -> None:
    fake = FakePerf()
    meter, why = open_core_pmu(sys_with_core_pmu(tmp_path / "sys"),
                               proc_tree(tmp_path / "proc", paranoid=3), fake.open, fake.ring)
    assert meter is None and "perf_event_paranoid=3" in why and why.startswith("perf core:")
    assert fake.counters == []


def test_denied_all_cpus_falls_back_to_own_processes_then_says_both(tmp_path: Path) -> None:
    """Allowed on paper (CAP_PERFMON) but the kernel says EACCES: own processes, then why."""
    proc = proc_tree(tmp_path / "proc", cap_eff=CAP_PERFMON, processes={5: ("p", (5,), 1)})
    sys_root = sys_with_core_pmu(tmp_path / "sys")
    fake = FakePerf(denied={INTEL_CACHE_MISSES.config})
    meter, why = open_core_pmu(sys_root, proc, fake.open, fake.ring)
    assert meter is None and not fake.open_now()
    assert why == ("perf core: all CPUs not permitted (cache-misses: Permission denied); "
                   "own processes not permitted (cache-misses: Permission denied)")


def test_ladder_puts_the_core_rung_after_uncore_and_before_the_canary_and_names_the_top(
        tmp_path: Path) -> None:
    proc = proc_tree(tmp_path / "proc", cap_eff=CAP_PERFMON,
                     processes={4242: ("pt_data_worker", (4242,), 10)})
    fake = FakePerf(per_read={0: 10_000_000},
                    samples={0: [Samples({}, 0), Samples({4242: 90, 0: 10}, 0)]})
    source = open_membw_source("auto", sys_root=sys_with_core_pmu(tmp_path / "sys", "0"),
                               proc_root=proc, resctrl_root=tmp_path / "none",
                               udev_root=tmp_path / "none", perf=fake)
    assert source is not None
    try:
        assert source.source == "perf-core"
        sample = source.sample()
    finally:
        source.close()
    assert sample.confidence == "approximate" and "x 64 B" in (sample.note or "")
    assert sample.total_bytes_per_s and sample.pressure is None  # no layout: no peak
    assert [(c.pid, c.name) for c in sample.top_consumers] == [(4242, "pt_data_worker")]
    f = frame(membw=sample)
    assert json.loads(dumps(f))["memory_bandwidth"]["top_consumers"][0]["name"] == (
        "pt_data_worker")
    assert "  top: pt_data_worker (4242) " in render(f)
    line = "".join(text for text, _ in membw_line(sample, History(), 200))
    assert "[perf-core, approximate]  top pt_data_worker 4242 " in line


def test_ladder_on_this_machine_says_why_the_core_rung_is_out() -> None:
    source = open_membw_source("auto")
    assert source is not None
    try:
        if source.source.startswith(("perf-core", "resctrl", "perf-uncore", "perf-amd")):
            pytest.skip(f"this machine has hardware counters: {source.source}")
        assert any(w.startswith("perf core: ") for w in source.why), source.why
        sample = source.sample()
        assert "perf core: " in (sample.note or "")
    finally:
        source.close()


def _busy_child(seconds: float) -> int:
    pid = os.fork()
    if pid == 0:
        # Favoured in a session of its own: on a loaded box it must out-run other busy
        # processes to be the one the sampling names.
        os.setsid()
        favoured()()
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass
        os._exit(0)
    return pid


@pytest.mark.slow
def test_all_cpu_sampling_names_a_busy_process_for_real() -> None:
    """The real syscall, mmap ring and parser, with cpu-clock standing in for cache misses."""
    if cpu_wide_refusal() is not None:
        pytest.skip(f"CPU-wide events not permitted here: {cpu_wide_refusal()}")
    cpus = tuple(range(os.cpu_count() or 1))
    clock = CoreEvent("cpu-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, "test")
    meter, why = open_system_meter((clock,), cpus, "/proc", PerfCounter.open, SampleRing)
    assert meter is not None, why
    child = _busy_child(0.6)
    try:
        time.sleep(0.5)
        traffic = meter.read()
    finally:
        meter.close()
        os.waitpid(child, 0)
    assert traffic is not None and traffic.total_bytes_per_s
    assert child in [c.pid for c in traffic.top], traffic.top


def _own_processes_for_real() -> None:
    # setuid() from root left this process undumpable, which forbids counting its children;
    # a user's own processes are dumpable, so restore that (PR_SET_DUMPABLE = 4).
    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)
    task_clock = CoreEvent("task-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, "test")
    child = _busy_child(2.0)
    meter, why = open_process_meter((task_clock,), "/proc", PerfCounter.open)
    assert meter is not None, why
    time.sleep(0.4)
    traffic = meter.read()
    meter.close()
    os.kill(child, 9)
    os.waitpid(child, 0)
    assert traffic is not None and traffic.top and traffic.top[0].pid == child, traffic


@pytest.mark.slow
def test_own_process_counting_as_an_unprivileged_user_names_its_busy_process() -> None:
    """As uid 54321 under perf_event_paranoid 2: the real per-thread counters, task-clock."""
    if os.geteuid() != 0:
        pytest.skip("needs root to become a second user")
    try:
        PerfCounter.open(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, pid=0).close()
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.ENOSYS):
            pytest.skip(f"perf_event_open refused here: {exc}")
        raise
    as_other_user(_own_processes_for_real)
