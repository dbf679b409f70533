"""Soak: the live TUI at `--interval 0.1` for ten minutes; its RSS and open fds must stay flat.

gputop runs in a tmux session (a pty where tmux is missing) on the simulated GPUs of
`--demo`, or on this machine's real sources with `--real`. Every 10 s the RSS (VmRSS)
and the open fds come from /proc/PID; refreshes are counted by the process itself (each
Sampler.sample bumps a counter in a file, one pwrite). Printed as a curve, then the growth
after the first minute in MiB per 1000 refreshes (target < 0.1) and in fds. The process
source keeps /proc/N/stat and schedstat open for each live process, so those follow the
machine's process count; the other fds ("own") must not grow at all.
"""

from __future__ import annotations

import argparse
import fcntl
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
import uuid
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from bench_tui import REPO, gputop_command, start, status_kib

SAMPLE_EVERY_S = 10.0
SETTLE_S = 60.0  # growth is measured after the first minute (imports, caches, history fill)
TARGET_MIB_PER_1000 = 0.1
BAR_MIB = 0.1
SIZE = (120, 40)
PROC_FILE = re.compile(r"/proc/\d+/(stat|schedstat)")


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
    rss_mib: float
    fds: int
    own_fds: int  # fds other than the kept-open /proc/N/... files of the process source


def serve(count_path: str, gputop_args: list[str]) -> int:
    """Run the real `gputop` command line, counting every Sampler.sample into `count_path`."""
    from gputop.cli import main as gputop_main
    from gputop.model import Frame
    from gputop.sampler import Sampler

    fd = os.open(count_path, os.O_WRONLY | os.O_CREAT, 0o600)
    original = Sampler.sample
    count = 0

    def counted(self: Sampler) -> Frame:
        nonlocal count
        frame = original(self)
        count += 1
        os.pwrite(fd, b"%20d" % count, 0)
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


def read_point(pid: int, count_path: Path, t_s: float) -> Point:
    """RSS, fd count and refreshes of `pid` now (raises OSError once it has exited)."""
    rss_kib = status_kib(pid, "VmRSS")
    targets = fd_targets(pid)
    own = [t for t in targets if not PROC_FILE.fullmatch(t)]
    text = count_path.read_text().strip()
    return Point(t_s, int(text) if text else 0, rss_kib / 1024, len(targets), len(own))


def fd_targets(pid: int) -> list[str]:
    """What each open fd of `pid` points at (fds closed while listing are skipped)."""
    targets = []
    for name in os.listdir(f"/proc/{pid}/fd"):
        with suppress(FileNotFoundError):
            targets.append(os.readlink(f"/proc/{pid}/fd/{name}"))
    return targets


def print_row(point: Point, base_mib: float | None) -> None:
    """One line of the curve; after the first minute a bar of RSS growth, # = BAR_MIB."""
    bar = ""
    if base_mib is not None:
        grown = round((point.rss_mib - base_mib) / BAR_MIB)
        bar = "|" + ("#" * min(grown, 60) if grown >= 0 else "<" * min(-grown, 10))
    print(f"{point.t_s:6.0f} {point.refreshes:10d} {point.rss_mib:9.2f} {point.fds:5d} "
          f"{point.own_fds:5d}  {bar}", flush=True)


def growth(points: list[Point]) -> tuple[float, int] | None:
    """MiB per 1000 refreshes and own fds gained from the first point after SETTLE_S on."""
    settled = [p for p in points if p.t_s >= SETTLE_S]
    if len(settled) < 2 or settled[-1].refreshes == settled[0].refreshes:
        return None
    first, last = settled[0], settled[-1]
    per_1000 = (last.rss_mib - first.rss_mib) / (last.refreshes - first.refreshes) * 1000
    return per_1000, last.own_fds - first.own_fds


def soak(running: Running, count_path: Path, minutes: float) -> list[Point]:
    """Read the process every SAMPLE_EVERY_S for `minutes`, printing each reading."""
    points: list[Point] = []
    started = time.monotonic()
    print(f"{'t_s':>6} {'refreshes':>10} {'RSS_MiB':>9} {'fds':>5} {'own':>5}  "
          f"RSS growth after the first minute (# = {BAR_MIB} MiB)", flush=True)
    for k in range(int(minutes * 60 / SAMPLE_EVERY_S) + 1):
        time.sleep(max(0.0, started + k * SAMPLE_EVERY_S - time.monotonic()))
        try:
            points.append(read_point(running.pid, count_path, time.monotonic() - started))
        except OSError:
            print(f"gputop (PID {running.pid}) exited after {time.monotonic() - started:.0f} s")
            break
        settled = [p for p in points if p.t_s >= SETTLE_S]
        print_row(points[-1], settled[0].rss_mib if settled else None)
    return points


def report(points: list[Point], interval_s: float) -> int:
    """Print the growth after the first minute; 0 when it is under target and no fd leaked."""
    measured = growth(points)
    if measured is None:
        print("soak: too short to measure growth after the first minute (run > 70 s)")
        return 1
    per_1000, fds = measured
    last = points[-1]
    rate = last.refreshes / last.t_s if last.t_s else 0.0
    print(f"\n{last.refreshes} refreshes in {last.t_s:.0f} s ({rate:.1f}/s at --interval "
          f"{interval_s}); after the first minute: {per_1000:+.3f} MiB per 1000 refreshes "
          f"(target < {TARGET_MIB_PER_1000}), {fds:+d} own fds")
    ok = per_1000 < TARGET_MIB_PER_1000 and fds <= 0
    print("soak: OK" if ok else "soak: FAILED (memory or fds grow)")
    return 0 if ok else 1


def main() -> int:
    """Start gputop, soak it, stop it, report."""
    if sys.argv[1:2] == ["--serve"]:
        return serve(sys.argv[2], sys.argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--interval", default="0.1", help="gputop's --interval (seconds)")
    parser.add_argument("--real", action="store_true", help="real sources instead of --demo")
    parser.add_argument("--pty", action="store_true", help="a pty even where tmux exists")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gputop-soak-") as tmp:
        count_path = Path(tmp) / "refreshes"
        count_path.write_text("")
        gputop_args = ["--interval", args.interval, *([] if args.real else ["--demo"])]
        command = [gputop_command()[0], str(Path(__file__).resolve()), "--serve",
                   str(count_path), *gputop_args]
        env = {"TERM": "xterm-256color", "PYTHONPATH": str(REPO)}
        use_tmux = shutil.which("tmux") is not None and not args.pty
        print(f"soak: gputop {' '.join(gputop_args)} for {args.minutes:g} min in "
              f"{'tmux' if use_tmux else 'a pty'}, {SIZE[0]}x{SIZE[1]}, "
              f"{os.cpu_count()} cores", flush=True)
        running = (in_tmux if use_tmux else in_pty)(command, env)
        try:
            points = soak(running, count_path, args.minutes)
        finally:
            running.stop()
    return report(points, float(args.interval))


if __name__ == "__main__":
    raise SystemExit(main())
