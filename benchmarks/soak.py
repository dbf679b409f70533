"""Soak: the live TUI at `--interval 0.1` for ten minutes; its memory and open fds must stay flat.

gputop runs in a tmux session (a pty where tmux is missing) on the simulated GPUs of
`--demo`, or on this machine's real sources with `--real`. Where `unshare` can (root), it
runs in a PID namespace of its own beside a churn of short-lived processes (CHURN_PER_S new
PIDs a second, each living CHURN_LIFE_S): the process list stays near one size while PIDs
keep coming and going, so nothing kept per PID hides, and the machine's other users (on a
shared box hundreds or thousands of processes come and go, and the list's peak lifts RSS)
do not move the curve. `--host` lists this machine's processes instead.

Every 10 s the RSS (VmRSS) and the open fds come from /proc/PID; the process itself (each
Sampler.sample) writes its refresh count and the number of processes it lists (now and at
most). Printed as a curve, then the growth after the warm-up (the first minute: imports,
the panes' strip caches and Textual's and rich's caches filling to their caps, history):

- RSS: MiB per 1000 refreshes from the first reading after the warm-up to the last, target
  < 0.1, of gputop as users run it (no tracemalloc);
- fds: the process source keeps /proc/N/stat open for each live process (schedstat too
  where a process's CPU clock cannot tell whether it ran, and io and the threads' schedstat
  for trainers and their workers), so those follow the process list; the other fds ("own")
  must not grow at all.

`--traced` runs gputop under tracemalloc and adds Python's traced heap, read right after a
full collection every 5 s, fit on refreshes and the process count (each listed process
costs ~2 KiB), target < 0.1 MiB per 1000 refreshes. Its RSS is shown, not judged:
tracemalloc's own tables take ~13 MiB more from malloc, and their high-water mark and
fragmentation move RSS by more than the target (+0.45 MiB per 1000 refreshes on a shared
machine, in a run whose heap grew +0.008).
"""

from __future__ import annotations

import argparse
import fcntl
import gc
import os
import pty
import re
import shlex
import shutil
import signal
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
SETTLE_S = 60.0  # the warm-up: growth is measured after the first minute
CHURN_PER_S = 10  # short-lived processes started a second in the soak's PID namespace
CHURN_LIFE_S = 2.0
STOP_WAIT_S = 10.0
TARGET_MIB_PER_1000 = 0.1
BAR_MIB = 0.1
BAR_MAX = 30
MIB = 1 << 20
STATS = struct.Struct("=4q")  # refreshes, heap (-1: untraced), processes, peak processes
SIZE = (120, 40)
PROC_FILE = re.compile(r"/proc/\d+/(stat|schedstat|io)")


@dataclass(frozen=True)
class Running:
    """The gputop process under test and how to end the session it runs in."""

    pid: int
    close: Callable[[], None]

    def stop(self) -> None:
        """SIGTERM gputop (it stops its demo trainer and exits), then close the session."""
        with suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S
        while alive(self.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.close()


@dataclass(frozen=True)
class Point:
    """One reading of the curve."""

    t_s: float
    refreshes: int
    rss_mib: float
    heap_mib: float | None  # traced Python heap after the last full collection; None untraced
    fds: int
    own_fds: int  # fds other than the kept-open /proc/N/... files of the process source
    processes: int  # rows of gputop's process list now
    peak_processes: int  # and at most since it started


@dataclass(frozen=True)
class Growth:
    """What grew after the warm-up."""

    rss_per_1000: float  # MiB per 1000 refreshes, first settled point to last
    heap_per_1000: float | None  # MiB per 1000 refreshes at a constant process count
    heap_per_process_kib: float | None  # the fit's cost of one listed process (None: not fit)
    own_fds: int
    peak_rise: int  # how much higher the process list peaked after the warm-up


def serve(stats_path: str, gputop_args: list[str], traced: bool) -> int:
    """Run the real `gputop` command line, writing STATS into `stats_path` on every
    Sampler.sample (one pwrite)."""
    if traced:
        tracemalloc.start()
    from gputop.app.cli import main as gputop_main
    from gputop.core.model import Frame
    from gputop.frames.sampler import Sampler

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
        os.pwrite(fd, STATS.pack(count, heap, processes, peak), 0)
        return frame

    setattr(Sampler, "sample", counted)  # noqa: B010 - patched on the class the CLI builds
    return gputop_main(gputop_args)


def churn() -> int:
    """Start CHURN_PER_S processes a second, each living CHURN_LIFE_S, until killed (run in
    the soak's PID namespace, which ends with gputop, its first process)."""
    children: list[subprocess.Popen[bytes]] = []
    while True:
        children.append(subprocess.Popen(["sleep", str(CHURN_LIFE_S)]))
        children = [child for child in children if child.poll() is None]
        time.sleep(1.0 / CHURN_PER_S)


def can_isolate() -> bool:
    """Whether `unshare` can give a command a PID namespace and its own /proc here."""
    if shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"],
                              capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def isolated(command: list[str]) -> list[str]:
    """`command` as the first process of a new PID namespace with its own /proc, the churn
    beside it."""
    churner = shlex.join([sys.executable, str(Path(__file__).resolve()), "--churn"])
    script = f"{churner} & exec {shlex.join(command)}"
    return ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", script]


def served_pid(launched: int, in_namespace: bool) -> int:
    """gputop's PID: the launched process, or in a namespace unshare's child (which becomes
    gputop by exec)."""
    if not in_namespace:
        return launched
    children = Path(f"/proc/{launched}/task/{launched}/children")
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline:
        with suppress(OSError):
            pids = children.read_text().split()
            if pids:
                return int(pids[0])
        time.sleep(0.05)
    raise RuntimeError(f"unshare (PID {launched}) started no process")


def alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def in_tmux(command: list[str], env: dict[str, str], in_namespace: bool) -> Running:
    """`command` in a detached tmux session of SIZE (bench_tui's way of starting a tool)."""
    name = f"soak-{uuid.uuid4().hex[:6]}"
    launched = start(name, command, SIZE, env)
    return Running(served_pid(launched, in_namespace),
                   lambda: _quiet(["tmux", "kill-session", "-t", name]))


def in_pty(command: list[str], env: dict[str, str], in_namespace: bool) -> Running:
    """`command` on a pty of SIZE whose output a thread drains (so the app never blocks)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", SIZE[1], SIZE[0], 0, 0))
    proc = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave, cwd=REPO,
                            env={**os.environ, **env}, start_new_session=True)
    os.close(slave)
    threading.Thread(target=_drain, args=(master,), daemon=True).start()

    def close() -> None:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=STOP_WAIT_S)

    return Running(served_pid(proc.pid, in_namespace), close)


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
    count, heap, processes, peak = (
        STATS.unpack(data) if len(data) == STATS.size else (0, -1, 0, 0))
    return Point(t_s, count, rss_kib / 1024, heap / MIB if heap >= 0 else None, len(targets),
                 len(own), processes, peak)


def fd_targets(pid: int) -> list[str]:
    """What each open fd of `pid` points at (fds closed while listing are skipped)."""
    targets = []
    for name in os.listdir(f"/proc/{pid}/fd"):
        with suppress(FileNotFoundError):
            targets.append(os.readlink(f"/proc/{pid}/fd/{name}"))
    return targets


HEADER = (f"{'t_s':>6} {'refreshes':>9} {'procs':>6} {'RSS_MiB':>8} {'heap_MiB':>8} "
          f"{'fds':>5} {'own':>4}  growth since the warm-up (# RSS, + heap; "
          f"each {BAR_MIB} MiB)")


def bar(grown_mib: float | None, mark: str) -> str:
    """Growth as marks of BAR_MIB (shrinking as '<'), at most BAR_MAX of them."""
    if grown_mib is None:
        return ""
    steps = round(grown_mib / BAR_MIB)
    return mark * min(steps, BAR_MAX) if steps >= 0 else "<" * min(-steps, 10)


def print_row(point: Point, base: Point | None) -> None:
    """One line of the curves; after the warm-up, bars of RSS and heap growth."""
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
    """What grew from the first point after the warm-up on (None: too few points)."""
    settled = [p for p in points if p.t_s >= SETTLE_S]
    if len(settled) < 2 or settled[-1].refreshes == settled[0].refreshes:
        return None
    first, last = settled[0], settled[-1]
    rss_per_1000 = (last.rss_mib - first.rss_mib) / (last.refreshes - first.refreshes) * 1000
    fit = heap_fit(settled)
    return Growth(rss_per_1000, fit[0] if fit is not None else None,
                  fit[1] if fit is not None else None, last.own_fds - first.own_fds,
                  max(0, last.peak_processes - first.peak_processes))


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


def report(points: list[Point], interval_s: float, traced: bool) -> int:
    """Print the growth after the warm-up; 0 when memory is under target and no fd leaked."""
    measured = growth(points)
    if measured is None:
        print(f"soak: too short to measure growth after the {SETTLE_S:.0f} s warm-up "
              f"(run > {SETTLE_S + SAMPLE_EVERY_S:.0f} s)")
        return 1
    last = points[-1]
    settled = [p for p in points if p.t_s >= SETTLE_S]
    rate = last.refreshes / last.t_s if last.t_s else 0.0
    print(f"\n{last.refreshes} refreshes in {last.t_s:.0f} s ({rate:.1f}/s at --interval "
          f"{interval_s}); growth measured after a warm-up of {SETTLE_S:.0f} s "
          f"({settled[0].refreshes} refreshes: caches fill to their caps), over "
          f"{last.refreshes - settled[0].refreshes} refreshes; processes listed "
          f"{min(p.processes for p in settled)}..{max(p.processes for p in settled)}, "
          f"peak {last.peak_processes} (+{measured.peak_rise} after the warm-up)")
    ok = measured.own_fds <= 0
    rss = f"RSS:  {measured.rss_per_1000:+.3f} MiB per 1000 refreshes"
    if traced:
        print(f"{rss}, not judged under tracemalloc (its own tables move it)")
    else:
        ok = ok and measured.rss_per_1000 < TARGET_MIB_PER_1000
        print(f"{rss} (target < {TARGET_MIB_PER_1000})")
    if traced and measured.heap_per_1000 is None:
        ok = False
        print("heap: fewer than 3 readings after the warm-up")
    elif measured.heap_per_1000 is not None:
        ok = ok and measured.heap_per_1000 < TARGET_MIB_PER_1000
        cost = ("" if measured.heap_per_process_kib is None else
                f", {measured.heap_per_process_kib:.1f} KiB per listed process")
        print(f"heap: {measured.heap_per_1000:+.3f} MiB per 1000 refreshes at a constant "
              f"process count (target < {TARGET_MIB_PER_1000}){cost}")
    print(f"fds:  {measured.own_fds:+d} own")
    print("soak: OK" if ok else "soak: FAILED (memory or fds grow)")
    return 0 if ok else 1


def main() -> int:
    """Start gputop, soak it, stop it, report."""
    if sys.argv[1:2] in (["--serve"], ["--serve-traced"]):
        return serve(sys.argv[2], sys.argv[3:], traced=sys.argv[1] == "--serve-traced")
    if sys.argv[1:2] == ["--churn"]:
        return churn()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--interval", default="0.1", help="gputop's --interval (seconds)")
    parser.add_argument("--real", action="store_true", help="real sources instead of --demo")
    parser.add_argument("--pty", action="store_true", help="a pty even where tmux exists")
    parser.add_argument("--host", action="store_true",
                        help="list this machine's processes (no PID namespace of its own)")
    parser.add_argument("--traced", action="store_true",
                        help="gputop under tracemalloc: a heap curve; RSS shown, not judged")
    args = parser.parse_args()
    in_namespace = not args.host and can_isolate()
    with tempfile.TemporaryDirectory(prefix="gputop-soak-") as tmp:
        stats_path = Path(tmp) / "stats"
        stats_path.write_bytes(b"")
        gputop_args = ["--interval", args.interval, *([] if args.real else ["--demo"])]
        command = [gputop_command()[0], str(Path(__file__).resolve()),
                   "--serve-traced" if args.traced else "--serve", str(stats_path),
                   *gputop_args]
        env = {"TERM": "xterm-256color", "PYTHONPATH": str(REPO)}
        use_tmux = shutil.which("tmux") is not None and not args.pty
        listed = (f"its own PID namespace with {CHURN_PER_S} new processes a second"
                  if in_namespace else "this machine's processes"
                  + ("" if args.host else " (no PID namespace: unshare needs root)"))
        print(f"soak: gputop {' '.join(gputop_args)} for {args.minutes:g} min in "
              f"{'tmux' if use_tmux else 'a pty'}, {SIZE[0]}x{SIZE[1]}, "
              f"{os.cpu_count()} cores, {'tracemalloc on' if args.traced else 'untraced'}, "
              f"listing {listed}", flush=True)
        launch = isolated(command) if in_namespace else command
        running = (in_tmux if use_tmux else in_pty)(launch, env, in_namespace)
        try:
            points = soak(running, stats_path, args.minutes)
        finally:
            running.stop()
    return report(points, float(args.interval), args.traced)


if __name__ == "__main__":
    raise SystemExit(main())
