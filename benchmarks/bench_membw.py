"""`make bench`: memory bandwidth's honesty, the app's resident memory, and the canary's costs.

Prints what the ladder chose here and why; the peak RSS of `gputop --once --json` and the
VmRSS/VmHWM of the live TUI at ~600 processes, with the default `--membw auto` and with
`--membw off`; and, where the canary runs, its start-up, CPU share and idle vs hog
bandwidth (interleaved phases, medians). `--designs` also compares canary designs on this
machine: each one's bandwidth idle and under a `sysbench memory` hog on the other core
(a ratio near 1 means the design does not see the hog), its CPU per run and peak RSS.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import mmap
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_tui import REPO, gputop_command, spawn_sleepers, start

from gputop.sources.membw import open_membw_source
from gputop.sources.membw.canary import llc_bytes, plan_canary
from gputop.sources.membw.estimate import DEFAULT_PERIOD_S, CanaryEstimator, next_delay

GiB = float(1 << 30)
MiB = 1 << 20
RUNS = 30
ROUNDS, PER_PHASE = 4, 7
OPENS = 5
HOG = ["sysbench", "memory", "--threads=1", "--memory-block-size=64M",
       "--memory-total-size=1000T", "--time=60", "run"]


def status_mib(pid: int | str = "self") -> dict[str, float]:
    """VmRSS and VmHWM of `pid` in MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out


# ru_maxrss counts what a child held before exec too (a fork of this benchmark), so a
# bare `python -S` forks the app and reports its peak instead.
PEAK_OF_CHILD = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
sys.stderr.write(f"\\nmaxrss_kib={usage.ru_maxrss}\\n")
"""


def once_peak_mib(flags: list[str]) -> tuple[float, str]:
    """Peak RSS of one `gputop --once --json` (its own rusage), and its membw verdict."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    python, *rest = gputop_command()
    done = subprocess.run([sys.executable, "-S", "-c", PEAK_OF_CHILD, python, *rest, "--once",
                           "--json", *flags], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120, check=True)
    peak_kib = int(done.stderr.rstrip().rpartition("maxrss_kib=")[2])
    membw = json.loads(done.stdout)["memory_bandwidth"]
    verdict = "off" if membw is None else f"{membw['source']}, pressure {membw['pressure']}"
    return peak_kib / 1024, verdict


def tui_rss_mib(flags: list[str], seconds: float) -> dict[str, float]:
    """VmRSS and VmHWM of the live TUI after `seconds` in a 120x40 tmux session."""
    name = f"bench-membw-{uuid.uuid4().hex[:6]}"
    env = {"TERM": "xterm-256color", "PYTHONPATH": str(REPO)}
    try:
        pid = start(name, [*gputop_command(), *flags], (120, 40), env)
        time.sleep(seconds)
        return status_mib(pid)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)


def resident_memory(repeat: int, processes: int, seconds: float) -> None:
    """The app's RSS, default flags vs --membw off: --once and the live TUI."""
    for flags in ([], ["--membw", "off"]):
        label = " ".join(flags) or "default (--membw auto)"
        peaks = [once_peak_mib(flags) for _ in range(repeat)]
        print(f"--once --json, {label}: peak RSS "
              f"{min(p for p, _ in peaks):.1f}-{max(p for p, _ in peaks):.1f} MiB "
              f"({repeat} runs; membw {peaks[-1][1]})")
    if shutil.which("tmux") is None:
        print("live TUI: skipped (needs tmux)")
        return
    sleepers = spawn_sleepers(processes)
    try:
        for flags in ([], ["--membw", "off"]):
            label = " ".join(flags) or "default (--membw auto)"
            runs = [tui_rss_mib(flags, seconds) for _ in range(repeat)]
            print(f"live TUI at {len(os.listdir('/proc'))} /proc entries, {label}, after "
                  f"{seconds:.0f} s: VmRSS {_span(r['VmRSS'] for r in runs)}, "
                  f"VmHWM {_span(r['VmHWM'] for r in runs)} MiB ({repeat} runs)")
    finally:
        for proc in sleepers:
            proc.kill()
        for proc in sleepers:
            proc.wait()


def _span(values) -> str:
    values = list(values)
    return f"{min(values):.1f}-{max(values):.1f}"


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


def start_hog(cpu: int) -> subprocess.Popen[bytes]:
    """sysbench streaming writes, pinned before exec, favoured where permitted."""
    proc = subprocess.Popen(
        HOG, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
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


class HogResult(NamedTuple):
    """Median bandwidths idle and under the hog, their ratio, and the hog's CPU share."""

    idle: float
    hog: float
    ratio: float
    share: float


def idle_vs_hog(measure: Callable[[], float], rounds: int = ROUNDS) -> HogResult:
    """Bandwidths from `measure` in interleaved idle and hog phases (hog on the other CPU)."""
    cpus = sorted(os.sched_getaffinity(0))
    saved = set(cpus)
    os.sched_setaffinity(0, {cpus[0]})
    idle: list[float] = []
    hog: list[float] = []
    shares: list[float] = []
    try:
        for _ in range(rounds):
            idle += [measure() for _ in range(PER_PHASE)]
            proc = start_hog(cpus[1])
            try:
                wait_until_streaming(proc.pid)
                wall, cpu = time.monotonic_ns(), cpu_ns(proc.pid)
                hog += [measure() for _ in range(PER_PHASE)]
                shares.append((cpu_ns(proc.pid) - cpu) / (time.monotonic_ns() - wall))
            finally:
                proc.kill()
                proc.wait()
    finally:
        os.sched_setaffinity(0, saved)
    i, h = statistics.median(idle), statistics.median(hog)
    return HogResult(i, h, h / i, statistics.median(shares))


def hog_phases(estimator: CanaryEstimator) -> None:
    """Canary bandwidth with and without a sysbench memory hog on the other CPU."""
    if shutil.which("sysbench") is None or len(os.sched_getaffinity(0)) < 2:
        print("idle vs hog: skipped (needs sysbench and two CPUs)")
        return

    def measure() -> float:
        estimator.measure()
        time.sleep(0.02)
        return estimator.bandwidth or 0.0

    r = idle_vs_hog(measure)
    print(f"canary bandwidth idle {r.idle / GiB:.2f} GiB/s, with hog {r.hog / GiB:.2f} "
          f"GiB/s, ratio {r.ratio:.2f} ({ROUNDS} interleaved rounds x {PER_PHASE}; hog "
          f"held {r.share:.0%} of its core)")


def start_up() -> CanaryEstimator | None:
    """Open time, first-sample time, calibration time, per-tick cost and RSS between canaries."""
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
    print(f"first sample(): {elapsed * 1e3:.2f} ms "
          f"(confidence {first.confidence}, pressure {first.pressure})")
    estimator = source.estimator
    if estimator is None:
        print(f"no canary here: pressure {first.pressure}, note: {first.note}")
        source.close()
        return None
    estimator.wait_calibrated()
    cal = estimator.calibration
    assert cal is not None
    print(f"calibration (background): {cal.seconds * 1e3:.0f} ms; single thread "
          f"{cal.single_bytes_per_s / GiB:.2f} GiB/s, {cal.threads} threads "
          f"{cal.aggregate_bytes_per_s / GiB:.2f} GiB/s")
    print(f"RSS between canaries: {status_mib()['VmRSS']:.1f} MiB "
          f"(canary buffer {estimator.canary.footprint / MiB:.0f} MiB, resident)")
    return estimator


# Canary designs compared by --designs; each runs in a fresh process for its own VmHWM.
libc = ctypes.CDLL(None, use_errno=True)
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
MADV_DONTNEED, MADV_HUGEPAGE = 4, 14


def _anon(size: int) -> tuple[mmap.mmap, ctypes.c_char, int]:
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    view = ctypes.c_char.from_buffer(m)
    return m, view, ctypes.addressof(view)


def resident_copy(footprint: int, chunk: int) -> Callable[[], tuple[int, int]]:
    """Today's canary: a resident buffer, one chunk copied per run, rotating."""
    m, view, base = _anon(footprint)
    ctypes.memset(base, 0x5A, footprint)
    half, position, keep = footprint // 2, [0], (m, view)

    def run() -> tuple[int, int]:
        assert keep  # the mapping lives as long as this closure
        offset = position[0] * chunk
        position[0] = (position[0] + 1) % (half // chunk)
        start = time.thread_time_ns()
        ctypes.memmove(base + half + offset, base + offset, chunk)
        return chunk, time.thread_time_ns() - start

    return run


def fresh_copy(chunk: int) -> Callable[[], tuple[int, int]]:
    """A buffer mapped, filled and copied per run, then unmapped: no RSS between runs."""
    def run() -> tuple[int, int]:
        m, view, base = _anon(2 * chunk)
        ctypes.memset(base, 0x5A, 2 * chunk)
        start = time.thread_time_ns()
        ctypes.memmove(base + chunk, base, chunk)
        spent = time.thread_time_ns() - start
        del view
        m.close()
        return chunk, spent

    return run


def page_touch(size: int, step: int, huge: bool) -> Callable[[], tuple[int, int]]:
    """One byte written per page of a fresh mapping (the kernel zeroes each page), unmapped."""
    def run() -> tuple[int, int]:
        m, view, base = _anon(size + 2 * MiB)
        start_at = (base + 2 * MiB - 1) & ~(2 * MiB - 1)
        if huge:
            libc.madvise(start_at, size, MADV_HUGEPAGE)
        buf = (ctypes.c_char * size).from_address(start_at)
        start = time.thread_time_ns()
        for offset in range(0, size, step):
            buf[offset] = b"x"
        spent = time.thread_time_ns() - start
        del buf, view
        m.close()
        return size, spent

    return run


def huge_page_reuse(pages: int) -> Callable[[], tuple[int, int]]:
    """One 2 MiB huge page faulted in and dropped (MADV_DONTNEED) `pages` times: RSS <= 2 MiB."""
    m, view, base = _anon(4 * MiB)
    start_at = (base + 2 * MiB - 1) & ~(2 * MiB - 1)
    libc.madvise(start_at, 2 * MiB, MADV_HUGEPAGE)
    byte = (ctypes.c_char * 1).from_address(start_at)
    keep = (m, view)

    def run() -> tuple[int, int]:
        spent = 0
        for _ in range(pages):
            start = time.thread_time_ns()
            byte[0] = b"x"
            spent += time.thread_time_ns() - start
            libc.madvise(start_at, 2 * MiB, MADV_DONTNEED)
        assert keep
        return pages * 2 * MiB, spent

    return run


DESIGNS: dict[str, tuple[Callable[[], Callable[[], tuple[int, int]]], dict[str, str]]] = {
    "resident copy, 128 MiB (before)": (lambda: resident_copy(128 * MiB, 8 * MiB), {}),
    "resident copy, 16 MiB (budget)": (lambda: resident_copy(16 * MiB, 4 * MiB), {}),
    "non-temporal-store copy, 16 MiB": (
        lambda: resident_copy(16 * MiB, 4 * MiB),
        {"GLIBC_TUNABLES": "glibc.cpu.x86_non_temporal_threshold=0x100000"}),
    "fresh mapping per copy, 8 MiB": (lambda: fresh_copy(8 * MiB), {}),
    "4 KiB page touches, 32 MiB": (lambda: page_touch(32 * MiB, 4096, False), {}),
    "huge-page touches, 32 MiB": (lambda: page_touch(32 * MiB, 2 * MiB, True), {}),
    "one huge page x8, MADV_DONTNEED": (lambda: huge_page_reuse(8), {}),
}


def run_design(name: str) -> None:
    """Child side of --designs: one design, idle vs hog, as one JSON line."""
    run = DESIGNS[name][0]()
    for _ in range(2):
        run()
    costs: list[float] = []

    def measure() -> float:
        moved, spent = run()
        costs.append(spent / 1e9)
        time.sleep(0.02)
        return moved / (max(spent, 1) / 1e9)

    r = idle_vs_hog(measure, rounds=3)
    print(json.dumps({**r._asdict(), "cpu_s": statistics.median(costs), **status_mib()}))


def compare_designs() -> None:
    """Every design in a fresh process; one line each."""
    if shutil.which("sysbench") is None or len(os.sched_getaffinity(0)) < 2:
        print("designs: skipped (needs sysbench and two CPUs)")
        return
    print("canary designs, idle vs sysbench hog on the other core (3 interleaved rounds x 7):")
    for name, (_, env) in DESIGNS.items():
        done = subprocess.run([sys.executable, __file__, "--design", name], capture_output=True,
                              text=True, env=dict(os.environ, **env), timeout=300, check=False)
        if done.returncode:
            print(f"  {name}: failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"  {name:34s} idle {r['idle'] / GiB:5.2f} GiB/s, hog {r['hog'] / GiB:5.2f} "
              f"GiB/s, ratio {r['ratio']:.2f}; {r['cpu_s'] * 1e3:.2f} ms CPU a run; "
              f"peak RSS {r['VmHWM']:.0f} MiB (hog held {r['share']:.0%} of its core)")


def main() -> None:
    """Run every measurement and print one line each."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--processes", type=int, default=600)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--designs", action="store_true", help="also compare canary designs")
    parser.add_argument("--design", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.design:
        run_design(args.design)
        return
    llc = llc_bytes()
    print(f"LLC {llc and llc / MiB:.0f} MiB -> {plan_canary(llc).reason}")
    resident_memory(args.repeat, args.processes, args.seconds)
    estimator = start_up()
    if estimator is not None:
        cost_and_share(estimator)
        hog_phases(estimator)
        estimator.close()
    if args.designs:
        compare_designs()


if __name__ == "__main__":
    main()
