"""`make bench`: the memory-bandwidth canary's start-up, memory, cost, and idle vs hog bandwidth.

Prints how long opening the source and the first sample take (calibration, buffer
included, runs behind them on its own thread), the process RSS after opening and between
canaries, the canary's CPU seconds per run and its average share of one core at the
default period, and the canary's bandwidth with and without `sysbench memory` streaming
on the other core (interleaved phases, medians; the ratio is the figure to compare).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gputop.sources.membw import open_membw_source
from gputop.sources.membw.canary import llc_bytes, plan_canary
from gputop.sources.membw.estimate import DEFAULT_PERIOD_S, CanaryEstimator, next_delay

GiB = float(1 << 30)
MiB = 1 << 20
RUNS = 30
ROUNDS, PER_PHASE = 4, 7
OPENS = 5


def rss_mib() -> float:
    """This process's resident set (VmRSS) in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cost_and_share(estimator: CanaryEstimator) -> None:
    """CPU seconds per canary, and the average % of one core at the period it would use."""
    costs = []
    for _ in range(RUNS):
        estimator.measure()
        costs.append(estimator._last_cost)
        time.sleep(0.01)
    cost = statistics.median(costs)
    worst = max(costs)
    share = cost / next_delay(DEFAULT_PERIOD_S, cost)
    worst_share = worst / next_delay(DEFAULT_PERIOD_S, worst)
    print(f"canary CPU per run: median {cost * 1e3:.2f} ms, max {worst * 1e3:.2f} ms "
          f"({RUNS} runs)")
    print(f"average share of one core at {DEFAULT_PERIOD_S:g} s: {share * 100:.3f} % "
          f"(worst run {worst_share * 100:.3f} %; budget 0.100 %)")


def hog_phases(estimator: CanaryEstimator) -> None:
    """Canary bandwidth with and without a sysbench memory hog on the other CPU."""
    cpus = sorted(os.sched_getaffinity(0))
    if shutil.which("sysbench") is None or len(cpus) < 2:
        print("idle vs hog: skipped (needs sysbench and two CPUs)")
        return
    saved = set(cpus)
    os.sched_setaffinity(0, {cpus[0]})
    idle: list[float] = []
    hog: list[float] = []
    shares: list[float] = []
    try:
        for _ in range(ROUNDS):
            idle += phase(estimator)
            proc = start_hog(cpus[1])
            try:
                wait_until_streaming(proc.pid)
                wall, cpu = time.monotonic_ns(), cpu_ns(proc.pid)
                hog += phase(estimator)
                shares.append((cpu_ns(proc.pid) - cpu) / (time.monotonic_ns() - wall))
            finally:
                proc.kill()
                proc.wait()
    finally:
        os.sched_setaffinity(0, saved)
    i, h = statistics.median(idle), statistics.median(hog)
    print(f"canary bandwidth idle {i / GiB:.2f} GiB/s, with hog {h / GiB:.2f} GiB/s, "
          f"ratio {h / i:.2f} ({ROUNDS} interleaved rounds x {PER_PHASE}; hog held "
          f"{statistics.median(shares):.0%} of its core)")


def start_hog(cpu: int) -> subprocess.Popen[bytes]:
    """sysbench streaming writes, pinned before exec, favoured where permitted."""
    proc = subprocess.Popen(
        ["sysbench", "memory", "--memory-block-size=256M", "--memory-total-size=100000G",
         "--time=60", "--threads=1", "run"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
    )
    with contextlib.suppress(OSError):
        Path(f"/proc/{proc.pid}/autogroup").write_text("-10")
    return proc


def cpu_ns(pid: int) -> int:
    """CPU nanoseconds of every thread of `pid`."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int((task / "schedstat").read_text().split()[0])
    return total


def wait_until_streaming(pid: int) -> None:
    """Until sysbench has used 0.2 s of CPU: past its allocation, into the copy loop."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and cpu_ns(pid) < 200_000_000:
        time.sleep(0.02)


def phase(estimator: CanaryEstimator) -> list[float]:
    """PER_PHASE canary bandwidths."""
    out = []
    for _ in range(PER_PHASE):
        estimator.measure()
        out.append(estimator.bandwidth or 0.0)
        time.sleep(0.02)
    return out


def start_up() -> CanaryEstimator | None:
    """Open time, first-sample time, calibration time, per-tick cost and RSS between canaries."""
    rss_before = rss_mib()
    opens = []
    for _ in range(OPENS):
        started = time.perf_counter()
        source = open_membw_source("auto")
        opens.append(time.perf_counter() - started)
        assert source is not None
        source.close()
    source = open_membw_source("auto")
    assert source is not None
    print(f"ladder: {source.source}; refusals: {'; '.join(source.why) or 'none'}")
    print(f"open_membw_source: median {statistics.median(opens) * 1e3:.2f} ms ({OPENS} opens)")
    started = time.perf_counter()
    first = source.sample()
    elapsed = time.perf_counter() - started
    opened = rss_mib()
    print(f"first sample(): {elapsed * 1e3:.2f} ms "
          f"(confidence {first.confidence}, pressure {first.pressure})")
    estimator = source.estimator
    if estimator is None:
        print(f"no estimate here: {first.note}")
        source.close()
        return None
    estimator.wait_calibrated()
    cal = estimator.calibration
    assert cal is not None
    print(f"calibration (background): {cal.seconds * 1e3:.0f} ms; single thread "
          f"{cal.single_bytes_per_s / GiB:.2f} GiB/s, {cal.threads} threads "
          f"{cal.aggregate_bytes_per_s / GiB:.2f} GiB/s")
    started = time.perf_counter()
    for _ in range(200):
        source.sample()  # canary not due: PSI + vmstat only
    per_tick = (time.perf_counter() - started) / 200
    print(f"sample() between canaries (PSI + vmstat): {per_tick * 1e6:.0f} us")
    print(f"RSS: {rss_before:.1f} MiB before opening, {opened:.1f} MiB after opening and the "
          f"first sample, {rss_mib():.1f} MiB between canaries "
          f"(canary buffer {estimator.canary.footprint // MiB} MiB, resident on purpose)")
    return estimator


def main() -> None:
    """Run every measurement and print one line each."""
    llc = llc_bytes()
    print(f"LLC {llc and llc >> 20} MiB -> {plan_canary(llc).reason}")
    estimator = start_up()
    if estimator is None:
        return
    cost_and_share(estimator)
    hog_phases(estimator)
    estimator.close()


if __name__ == "__main__":
    main()
