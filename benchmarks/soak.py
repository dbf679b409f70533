"""Soak: the live TUI at `--interval 0.1` for ten minutes; its memory and open fds must stay flat.

gputop runs in a tmux session (a pty where tmux is missing) on the simulated GPUs of
`--demo`, or on this machine's real sources with `--real`. Every 10 s the RSS (VmRSS)
and the open fds come from /proc/PID; the process itself (each Sampler.sample) writes its
refresh count, the number of processes it lists (now and at most), and, under
tracemalloc, Python's traced heap read right after a full collection every 5 s (so
garbage awaiting the cyclic collector is not counted) and tracemalloc's own size, which
is taken off the RSS. Printed as two curves, then the growth after the first minute:

- heap: MiB per 1000 refreshes at a constant process count (a least-squares fit of the
  heap on refreshes and processes: each listed process costs ~2 KiB, and on a shared
  machine others start and end hundreds), target < 0.1;
- RSS: MiB per 1000 refreshes from the first minute to the end, less what a higher peak
  of the process list explains (RSS keeps a high-water mark; the heap's cost per process
  times the rise of the peak), target < 0.1;
- fds: the process source keeps /proc/N/stat and schedstat open for each live process (and
  io for trainers and their workers), so those follow the machine; the other fds ("own")
  must not grow at all.

`--untraced` runs gputop without tracemalloc (no heap curve; the RSS as users see it).
The traced run's collections also free cyclic garbage sooner (Textual's strips refer to
themselves through their caches, so evicted ones wait for a full collection); untraced,
that garbage's high-water mark lifts RSS by ~0.1-0.2 MiB per 1000 refreshes in the
second minute, then it is flat (~0.035 from 150 s on, measured on a 2-core VM).
"""

from __future__ import annotations

import argparse
import fcntl
import gc
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
import tracemalloc
import uuid
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from bench_tui import REPO, gputop_command, start, status_kib

SAMPLE_EVERY_S = 10.0
COLLECT_EVERY_S = 5.0  # the served process reads its heap after a full collection this often
SETTLE_S = 60.0  # growth is measured after the first minute (imports, caches, history fill)
TARGET_MIB_PER_1000 = 0.1
BAR_MIB = 0.1
BAR_MAX = 30
MIB = 1 << 20
STATS = struct.Struct("=5q")  # refreshes, heap, tracemalloc's own, processes, peak processes
SIZE = (120, 40)
PROC_FILE = re.compile(r"/proc/\d+/(stat|schedstat|io)")


@dataclass(frozen=True)
class Running:
    """The gputop process under test and how to end it."""

    pid: int
    stop: Callable[[], None]


@dataclass(frozen=True)
class Point:
    """One reading of the curve."""

    t_s: float
    refreshes: int
    rss_mib: float  # less tracemalloc's own memory
    heap_mib: float | None  # traced Python heap after the last full collection; None untraced
    fds: int
    own_fds: int  # fds other than the kept-open /proc/N/... files of the process source
    processes: int  # rows of gputop's process list now
    peak_processes: int  # and at most since it started


@dataclass(frozen=True)
class Growth:
    """What grew after the first minute."""

    rss_per_1000: float  # MiB per 1000 refreshes, first settled point to last
    rss_explained_mib: float  # of the RSS growth, what a higher process-list peak explains
    heap_per_1000: float | None  # MiB per 1000 refreshes at a constant process count
    heap_per_process_kib: float | None  # the fit's cost of one listed process (None: not fit)
    own_fds: int
    peak_rise: int  # how much higher the process list peaked after the first minute


def serve(stats_path: str, gputop_args: list[str], traced: bool) -> int:
    """Run the real `gputop` command line, writing STATS into `stats_path` on every
    Sampler.sample (one pwrite)."""
    if traced:
        tracemalloc.start()
    from gputop.cli import main as gputop_main
    from gputop.model import Frame
    from gputop.sampler import Sampler

    fd = os.open(stats_path, os.O_WRONLY | os.O_CREAT, 0o600)
    original = Sampler.sample
    count = peak = 0
    heap, collected_at = -1, 0.0

    def counted(self: Sampler) -> Frame:
        nonlocal count, peak, heap, collected_at
        frame = original(self)
        count += 1
        processes = len(frame.processes)
        peak = max(peak, processes)
        now = time.monotonic()
        if traced and now - collected_at >= COLLECT_EVERY_S:
            gc.collect()
            heap, collected_at = tracemalloc.get_traced_memory()[0], now
        tracer = tracemalloc.get_tracemalloc_memory() if traced else 0
        os.pwrite(fd, STATS.pack(count, heap, tracer, processes, peak), 0)
        return frame

    setattr(Sampler, "sample", counted)  # noqa: B010 - patched on the class the CLI builds
    return gputop_main(gputop_args)


def in_tmux(command: list[str], env: dict[str, str]) -> Running:
    """`command` in a detached tmux session of SIZE (bench_tui's way of starting a tool)."""
    name = f"soak-{uuid.uuid4().hex[:6]}"
    pid = start(name, command, SIZE, env)
    return Running(pid, lambda: _quiet(["tmux", "kill-session", "-t", name]))


def in_pty(command: list[str], env: dict[str, str]) -> Running:
    """`command` on a pty of SIZE whose output a thread drains (so the app never blocks)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", SIZE[1], SIZE[0], 0, 0))
    proc = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave, cwd=REPO,
                            env={**os.environ, **env}, start_new_session=True)
    os.close(slave)
    threading.Thread(target=_drain, args=(master,), daemon=True).start()

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    return Running(proc.pid, stop)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 1 << 16):
            pass
    except OSError:
        pass  # the pty closed: the app exited
    finally:
        os.close(fd)


def _quiet(command: list[str]) -> None:
    subprocess.run(command, capture_output=True, check=False)


def read_point(pid: int, stats_path: Path, t_s: float) -> Point:
    """RSS, fds and the served process's own figures now (OSError once it has exited)."""
    rss_kib = status_kib(pid, "VmRSS")
    targets = fd_targets(pid)
    own = [t for t in targets if not PROC_FILE.fullmatch(t)]
    data = stats_path.read_bytes()
    count, heap, tracer, processes, peak = (
        STATS.unpack(data) if len(data) == STATS.size else (0, -1, 0, 0, 0))
    return Point(t_s, count, (rss_kib * 1024 - tracer) / MIB,
                 heap / MIB if heap >= 0 else None, len(targets), len(own), processes, peak)


def fd_targets(pid: int) -> list[str]:
    """What each open fd of `pid` points at (fds closed while listing are skipped)."""
    targets = []
    for name in os.listdir(f"/proc/{pid}/fd"):
        with suppress(FileNotFoundError):
            targets.append(os.readlink(f"/proc/{pid}/fd/{name}"))
    return targets


HEADER = (f"{'t_s':>6} {'refreshes':>9} {'procs':>6} {'RSS_MiB':>8} {'heap_MiB':>8} "
          f"{'fds':>5} {'own':>4}  growth since the first minute (# RSS, + heap; "
          f"each {BAR_MIB} MiB)")


def bar(grown_mib: float | None, mark: str) -> str:
    """Growth as marks of BAR_MIB (shrinking as '<'), at most BAR_MAX of them."""
    if grown_mib is None:
        return ""
    steps = round(grown_mib / BAR_MIB)
    return mark * min(steps, BAR_MAX) if steps >= 0 else "<" * min(-steps, 10)


def print_row(point: Point, base: Point | None) -> None:
    """One line of the curves; after the first minute, bars of RSS and heap growth."""
    heap = "-" if point.heap_mib is None else f"{point.heap_mib:.2f}"
    bars = ""
    if base is not None:
        heap_grown = (None if point.heap_mib is None or base.heap_mib is None
                      else point.heap_mib - base.heap_mib)
        bars = f"|{bar(point.rss_mib - base.rss_mib, '#'):<{BAR_MAX}}|{bar(heap_grown, '+')}"
    print(f"{point.t_s:6.0f} {point.refreshes:9d} {point.processes:6d} {point.rss_mib:8.2f} "
          f"{heap:>8} {point.fds:5d} {point.own_fds:4d}  {bars}", flush=True)


def heap_fit(points: list[Point]) -> tuple[float, float | None] | None:
    """The heap's MiB per 1000 refreshes with the process count held constant, and its KiB
    per listed process: least squares of the heap on both; a plain slope on refreshes when
    the process count hardly moved or moved in step with the refreshes."""
    traced = [p for p in points if p.heap_mib is not None]
    if len(traced) < 3:
        return None
    n = len(traced)
    mean_r = sum(p.refreshes for p in traced) / n
    mean_q = sum(p.processes for p in traced) / n
    mean_h = sum(p.heap_mib or 0.0 for p in traced) / n
    r = [p.refreshes - mean_r for p in traced]
    q = [p.processes - mean_q for p in traced]
    h = [(p.heap_mib or 0.0) - mean_h for p in traced]
    srr, sqq, srq = _dot(r, r), _dot(q, q), _dot(r, q)
    if not srr:
        return None
    det = srr * sqq - srq * srq
    if sqq < 4.0 * n or det < 0.05 * srr * sqq:  # sd < 2 processes, or |corr| > 0.97
        return _dot(r, h) / srr * 1000, None
    per_refresh = (_dot(r, h) * sqq - _dot(q, h) * srq) / det
    per_process = (_dot(q, h) * srr - _dot(r, h) * srq) / det
    return per_refresh * 1000, per_process * 1024


def _dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def growth(points: list[Point]) -> Growth | None:
    """What grew from the first point after SETTLE_S on (None: too few points)."""
    settled = [p for p in points if p.t_s >= SETTLE_S]
    if len(settled) < 2 or settled[-1].refreshes == settled[0].refreshes:
        return None
    first, last = settled[0], settled[-1]
    rss_per_1000 = (last.rss_mib - first.rss_mib) / (last.refreshes - first.refreshes) * 1000
    fit = heap_fit(settled)
    per_process_kib = fit[1] if fit is not None else None
    rise = max(0, last.peak_processes - first.peak_processes)
    explained = rise * max(0.0, per_process_kib or 0.0) / 1024
    return Growth(rss_per_1000, explained, fit[0] if fit is not None else None,
                  per_process_kib, last.own_fds - first.own_fds, rise)


def soak(running: Running, stats_path: Path, minutes: float) -> list[Point]:
    """Read the process every SAMPLE_EVERY_S for `minutes`, printing each reading."""
    points: list[Point] = []
    started = time.monotonic()
    print(HEADER, flush=True)
    for k in range(int(minutes * 60 / SAMPLE_EVERY_S) + 1):
        time.sleep(max(0.0, started + k * SAMPLE_EVERY_S - time.monotonic()))
        try:
            points.append(read_point(running.pid, stats_path, time.monotonic() - started))
        except OSError:
            print(f"gputop (PID {running.pid}) exited after {time.monotonic() - started:.0f} s")
            break
        settled = [p for p in points if p.t_s >= SETTLE_S]
        print_row(points[-1], settled[0] if settled else None)
    return points


def report(points: list[Point], interval_s: float) -> int:
    """Print the growth after the first minute; 0 when heap and RSS are under target and
    no fd leaked."""
    measured = growth(points)
    if measured is None:
        print("soak: too short to measure growth after the first minute (run > 70 s)")
        return 1
    last = points[-1]
    settled = [p for p in points if p.t_s >= SETTLE_S]
    rate = last.refreshes / last.t_s if last.t_s else 0.0
    refreshes = last.refreshes - settled[0].refreshes
    rss_net = measured.rss_per_1000 - measured.rss_explained_mib / refreshes * 1000
    print(f"\n{last.refreshes} refreshes in {last.t_s:.0f} s ({rate:.1f}/s at --interval "
          f"{interval_s}); processes listed {min(p.processes for p in settled)}.."
          f"{max(p.processes for p in settled)} after the first minute, peak "
          f"{last.peak_processes} (+{measured.peak_rise} since the first minute)")
    ok = measured.own_fds <= 0 and rss_net < TARGET_MIB_PER_1000
    if measured.heap_per_1000 is None:
        print("heap: not traced (--untraced)")
    else:
        ok = ok and measured.heap_per_1000 < TARGET_MIB_PER_1000
        cost = ("" if measured.heap_per_process_kib is None else
                f", {measured.heap_per_process_kib:.1f} KiB per listed process")
        print(f"heap: {measured.heap_per_1000:+.3f} MiB per 1000 refreshes at a constant "
              f"process count (target < {TARGET_MIB_PER_1000}){cost}")
    print(f"RSS:  {measured.rss_per_1000:+.3f} MiB per 1000 refreshes; less "
          f"{measured.rss_explained_mib:.2f} MiB for the higher process peak: {rss_net:+.3f} "
          f"(target < {TARGET_MIB_PER_1000})")
    print(f"fds:  {measured.own_fds:+d} own")
    print("soak: OK" if ok else "soak: FAILED (memory or fds grow)")
    return 0 if ok else 1


def main() -> int:
    """Start gputop, soak it, stop it, report."""
    if sys.argv[1:2] in (["--serve"], ["--serve-untraced"]):
        return serve(sys.argv[2], sys.argv[3:], traced=sys.argv[1] == "--serve")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--interval", default="0.1", help="gputop's --interval (seconds)")
    parser.add_argument("--real", action="store_true", help="real sources instead of --demo")
    parser.add_argument("--pty", action="store_true", help="a pty even where tmux exists")
    parser.add_argument("--untraced", action="store_true",
                        help="gputop without tracemalloc: RSS only, no heap curve")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gputop-soak-") as tmp:
        stats_path = Path(tmp) / "stats"
        stats_path.write_bytes(b"")
        gputop_args = ["--interval", args.interval, *([] if args.real else ["--demo"])]
        serve_flag = "--serve-untraced" if args.untraced else "--serve"
        command = [gputop_command()[0], str(Path(__file__).resolve()), serve_flag,
                   str(stats_path), *gputop_args]
        env = {"TERM": "xterm-256color", "PYTHONPATH": str(REPO)}
        use_tmux = shutil.which("tmux") is not None and not args.pty
        print(f"soak: gputop {' '.join(gputop_args)} for {args.minutes:g} min in "
              f"{'tmux' if use_tmux else 'a pty'}, {SIZE[0]}x{SIZE[1]}, "
              f"{os.cpu_count()} cores, {'untraced' if args.untraced else 'tracemalloc on'}",
              flush=True)
        running = (in_tmux if use_tmux else in_pty)(command, env)
        try:
            points = soak(running, stats_path, args.minutes)
        finally:
            running.stop()
    return report(points, float(args.interval))


if __name__ == "__main__":
    raise SystemExit(main())
