"""perf_event_open plumbing, for real, with software events on this machine."""

from __future__ import annotations

import errno
import json
import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from gputop.sources.membw.perf_event import (
    PERF_COUNT_SW_CPU_CLOCK,
    PERF_COUNT_SW_TASK_CLOCK,
    PERF_TYPE_SOFTWARE,
    CounterValue,
    PerfCounter,
    cpu_wide_refusal,
    paranoid_level,
    scaled_delta,
)
from gputop.sources.membw.uncore import PlannedEvent, UncoreMeter, UncorePlan, open_uncore

FIX = Path(__file__).parent / "fixtures" / "membw"


def _open_or_skip(config: int, pid: int = -1, cpu: int = -1,
                  exclude_kernel: bool = False) -> PerfCounter:
    try:
        return PerfCounter.open(PERF_TYPE_SOFTWARE, config, pid=pid, cpu=cpu,
                                exclude_kernel=exclude_kernel)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.ENOSYS):
            pytest.skip(f"perf_event_open refused here: {exc} "
                        f"(perf_event_paranoid={paranoid_level()})")
        raise


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_task_clock_on_own_process_counts_up_and_closes() -> None:
    counter = _open_or_skip(config=PERF_COUNT_SW_TASK_CLOCK, pid=0, cpu=-1, exclude_kernel=True)
    fd = counter.fd
    assert counter.read().value == 0  # opened disabled
    counter.enable()
    _burn(0.02)
    first = counter.read()
    _burn(0.02)
    second = counter.read()
    assert 0 < first.value < second.value
    assert second.enabled_ns >= second.running_ns > 0
    counter.disable()
    stopped = counter.read().value
    _burn(0.01)
    assert counter.read().value == stopped
    counter.close()
    counter.close()
    with pytest.raises(OSError):
        os.fstat(fd)


def test_bad_pmu_type_is_a_clean_oserror() -> None:
    with pytest.raises(OSError) as info:
        PerfCounter.open(0x7FFF_FFF0, 0, cpu=0)
    assert info.value.errno in (errno.ENOENT, errno.EINVAL, errno.EACCES, errno.EPERM)


def test_uncore_meter_math_runs_for_real_on_a_cpu_wide_software_event() -> None:
    """The uncore meter's open/read/delta path, with cpu-clock standing in for a CAS count."""
    if cpu_wide_refusal() is not None:
        pytest.skip(f"CPU-wide events not permitted here: {cpu_wide_refusal()}")
    clock = (PERF_COUNT_SW_CPU_CLOCK, 0, 0)
    reads = PlannedEvent("software", PERF_TYPE_SOFTWARE, (0,), "cpu-clock", clock, 1.0, "read")
    writes = PlannedEvent("software", PERF_TYPE_SOFTWARE, (0,), "cpu-clock", clock, 2.0, "write")
    plan = UncorePlan("perf-test", (reads, writes), "test")
    meter = UncoreMeter.open(plan)
    try:
        time.sleep(0.2)
        traffic = meter.read()
    finally:
        meter.close()
    assert traffic is not None and traffic.read_bytes_per_s and traffic.write_bytes_per_s
    # cpu-clock on one CPU ticks ~1e9 ns per second; the write side is worth 2 "bytes" a count.
    assert 0.5e9 < traffic.read_bytes_per_s < 1.5e9
    assert traffic.write_bytes_per_s == pytest.approx(2 * traffic.read_bytes_per_s, rel=0.1)
    assert traffic.total_bytes_per_s == pytest.approx(
        traffic.read_bytes_per_s + traffic.write_bytes_per_s)


def test_scaled_delta_undoes_multiplexing_and_rejects_unscheduled() -> None:
    a, b = CounterValue(100, 1000, 1000), CounterValue(300, 3000, 2000)
    assert scaled_delta(a, b) == pytest.approx(200 * 2000 / 1000)
    assert scaled_delta(a, CounterValue(100, 2000, 1000)) is None
    assert scaled_delta(a, CounterValue(50, 2000, 2000)) is None


def test_paranoid_and_caps_from_fixture_proc() -> None:
    assert paranoid_level(FIX / "proc-paranoid2") == 2
    assert "perf_event_paranoid=2" in (cpu_wide_refusal(FIX / "proc-paranoid2") or "")
    assert cpu_wide_refusal(FIX / "proc-perfmon") is None  # CAP_PERFMON in CapEff
    assert cpu_wide_refusal(FIX / "proc-zen2") is None  # paranoid 0
    assert paranoid_level(FIX / "missing") is None


def test_uncore_refuses_cleanly_when_not_permitted_or_absent() -> None:
    meter, why = open_uncore(FIX / "sys-intel-imc", FIX / "proc-paranoid2")
    assert meter is None and why.startswith("perf-uncore-imc: not permitted")
    meter, why = open_uncore(FIX / "sys-cache", FIX / "proc-zen2")
    assert meter is None and why == "perf uncore: no memory-controller PMU"


def test_uncore_refuses_cleanly_when_the_kernel_rejects_the_pmu() -> None:
    """Permitted, but the fixture's PMU type is not in this kernel: refused, no fd leaked."""
    real_types = {p.read_text().strip()
                  for p in Path("/sys/bus/event_source/devices").glob("*/type")}
    if "24" in real_types or "25" in real_types:
        pytest.skip("this kernel has PMU types 24/25; the fixture would hit a real PMU")
    before = len(os.listdir("/proc/self/fd"))
    meter, why = open_uncore(FIX / "sys-intel-imc", FIX / "proc-perfmon")
    assert meter is None and why.startswith("perf-uncore-imc: cannot open")
    assert len(os.listdir("/proc/self/fd")) == before


def test_this_machine_has_no_uncore_pmu() -> None:
    """These VMs expose no memory-controller PMU: the real probe refuses, without raising."""
    meter, why = open_uncore()
    if meter is not None:
        meter.close()
        pytest.skip(f"this machine has uncore counters: {why}")
    assert why


UNPRIVILEGED = r"""
import errno, json, sys, time
sys.path.insert(0, sys.argv[1])
from gputop.sources.membw import perf_event as pe
from gputop.sources.membw.uncore import UncoreMeter, UncorePlan, PlannedEvent
out = {"paranoid": pe.paranoid_level(), "refusal": pe.cpu_wide_refusal()}
try:
    with pe.PerfCounter.open(pe.PERF_TYPE_SOFTWARE, pe.PERF_COUNT_SW_TASK_CLOCK, pid=0,
                             exclude_kernel=True) as c:
        c.enable()
        end = time.thread_time() + 0.02
        while time.thread_time() < end:
            pass
        out["task_clock"] = c.read().value
except OSError as exc:
    out["task_clock_errno"] = exc.errno
ev = PlannedEvent("software", pe.PERF_TYPE_SOFTWARE, (0,), "cpu-clock",
                  (pe.PERF_COUNT_SW_CPU_CLOCK, 0, 0), 1.0, "read")
try:
    UncoreMeter.open(UncorePlan("t", (ev,), "t")).close()
    out["cpu_wide"] = "opened"
except OSError as exc:
    out["cpu_wide"] = exc.errno in pe.DENIED_ERRNOS and "denied" or exc.errno
print(json.dumps(out))
"""


def test_unprivileged_user_gets_task_clock_and_a_clean_cpu_wide_refusal() -> None:
    """As `nobody` (stdlib-only code, system python): what a normal user gets from perf."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    if os.geteuid() != 0 or python is None:
        pytest.skip("needs root to drop to nobody, and a system python3")
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no nobody user")
    repo = str(Path(__file__).resolve().parents[2])
    run = subprocess.run([python, "-c", UNPRIVILEGED, repo], user="nobody", cwd="/",
                         capture_output=True, text=True, timeout=60)
    if run.returncode != 0 and "Permission denied" in run.stderr:
        pytest.skip(f"nobody cannot read the checkout: {run.stderr.strip()[-200:]}")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    level = out["paranoid"]
    if "task_clock_errno" in out:
        assert out["task_clock_errno"] in (errno.EACCES, errno.EPERM)
        pytest.skip(f"perf_event_paranoid={level} forbids even self-profiling for users")
    assert out["task_clock"] > 0
    if level is not None and level >= 1:
        assert out["refusal"] and f"perf_event_paranoid={level}" in out["refusal"]
        assert out["cpu_wide"] == "denied"
