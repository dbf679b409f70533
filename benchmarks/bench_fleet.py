"""`make bench`: the fleet view at 500 hosts, and the exporter's CPU beside node_exporter's.

1. 500 simulated hosts (gputop's own exposition, backfilled with promtool) in a real
   Prometheus on loopback: the fleet's queries (the table, and one host in detail) and
   the rendering of its 500 rows, each against the refresh interval (the scrape interval).
2. With ~600 processes on the machine: `gputop serve` (8 simulated GPUs) and Debian's
   prometheus-node-exporter side by side on loopback ports, CPU seconds from
   /proc/PID/stat: gputop's per sampling tick (no scrapes), each one's per scrape (N
   scrapes back to back), and per 15 s scrape interval at gputop's 1 s ticks, as ratios.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_sampler import kill_all, spawn_sleepers
from bench_tui import cpu_ns

from gputop.export.fleet import render as render_text
from gputop.sources.fleet import FleetSource
from gputop.tui.views.fleet import fleet_columns, fleet_header_line, fleet_row_line
from tests.helpers.fleet import Shape, backfill
from tests.helpers.prometheus import Serve, free_port, prometheus, serve_env, wait_until

HOSTS = 500
PROCESSES = 600
SCRAPES = 60
IDLE_S = 20.0
SCRAPE_INTERVAL_S = 15.0
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"


def median_s(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of `fn` in seconds."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def fleet_at_scale() -> None:
    """The fleet view's queries and rendering at HOSTS hosts, against the refresh interval."""
    with tempfile.TemporaryDirectory(prefix="gputop-bench-fleet-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        backfill(work / "data", HOSTS, work)
        print(f"backfilled {HOSTS} hosts in {time.perf_counter() - started:.1f} s", flush=True)
        with prometheus(work, [], interval_s=SCRAPE_INTERVAL_S, data=work / "data") as server:
            source = FleetSource(server.base)
            report = source.sample()
            assert report.error is None and len(report.hosts) == HOSTS, report.error
            interval = report.scrape_interval_s or SCRAPE_INTERVAL_S
            table = median_s(source.sample, 7)
            one = next(s.instance for s in map(Shape, range(HOSTS)) if s.straggler)
            detail = median_s(lambda: source.sample(detail=one), 7)
            columns = fleet_columns(160)

            def paint_all() -> None:
                fleet_header_line(columns, 160)
                for host in report.hosts:
                    fleet_row_line(host, columns, 160, False)

            rows = median_s(paint_all, 21)
            text = median_s(lambda: render_text(report), 21)
    print(f"{'fleet, ' + str(HOSTS) + ' hosts':<34} {'seconds':>9} {'of refresh':>10}")
    for what, seconds in (("queries: the table", table), ("queries: table + one host", detail),
                          ("render: all rows (TUI lines)", rows),
                          ("render: --once text table", text)):
        print(f"{what:<34} {seconds:>9.4f} {seconds / interval:>9.2%}")
    print(f"refresh interval: {interval:g} s (the scrape interval Prometheus reports); the "
          "screen paints only the rows that fit", flush=True)


@contextlib.contextmanager
def node_exporter(port: int) -> Iterator[subprocess.Popen[bytes]]:
    """prometheus-node-exporter on a loopback port."""
    process = subprocess.Popen([NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _answers(f"http://127.0.0.1:{port}/metrics"), 60,
                   what="node_exporter")
        yield process
    finally:
        process.terminate()
        process.wait(30)


def _answers(url: str) -> bool:
    try:
        return len(_scrape(url)) > 0
    except OSError:
        return False


def _scrape(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:
        return bytes(response.read())


def cpu_s(pid: int) -> float:
    """utime + stime of `pid` in seconds."""
    return cpu_ns(pid) / 1e9


def per_scrape(pid: int, url: str, idle_cpu_per_s: float) -> tuple[float, int]:
    """CPU seconds one scrape costs `pid` (its background rate taken out), and the bytes."""
    _scrape(url)  # warm: first-scrape work is not per-scrape work
    before, started = cpu_s(pid), time.monotonic()
    size = 0
    for _ in range(SCRAPES):
        size = len(_scrape(url))
    elapsed = time.monotonic() - started
    spent = cpu_s(pid) - before - idle_cpu_per_s * elapsed
    return max(0.0, spent) / SCRAPES, size


def exporters_side_by_side() -> None:
    """gputop serve and node_exporter: CPU per tick, per scrape, per scrape interval."""
    if not os.path.exists(NODE_EXPORTER):
        print(f"{NODE_EXPORTER} is missing (Debian's prometheus-node-exporter): skipped")
        return
    sleepers: list[int] = []
    have = len([p for p in os.listdir("/proc") if p.isdigit()])
    if have < PROCESSES:
        sleepers = spawn_sleepers(PROCESSES - have)
    ring_dir = Path(tempfile.mkdtemp(prefix="gputop-bench-rings-"))
    gputop = None
    try:
        gputop = Serve(["--listen", "127.0.0.1:0", "--demo", "data-starved",
                        "--no-demo-trainer", "--gpus", "8", "--membw", "off",
                        "--interval", "1.0"], serve_env(ring_dir))
        port = free_port()
        with node_exporter(port) as node:
            node_url = f"http://127.0.0.1:{port}/metrics"
            processes = len([p for p in os.listdir("/proc") if p.isdigit()])
            time.sleep(3.0)  # past start-up
            pid = gputop.process.pid
            before, started = cpu_s(pid), time.monotonic()
            node_before = cpu_s(node.pid)
            time.sleep(IDLE_S)
            idle = time.monotonic() - started
            gputop_rate = (cpu_s(pid) - before) / idle
            node_rate = (cpu_s(node.pid) - node_before) / idle
            tick = gputop_rate * 1.0  # one tick per second
            gputop_scrape, gputop_bytes = per_scrape(pid, gputop.url, gputop_rate)
            node_scrape, node_bytes = per_scrape(node.pid, node_url, node_rate)
    finally:
        if gputop is not None:
            gputop.stop()
        kill_all(sleepers)
        shutil.rmtree(ring_dir, ignore_errors=True)
    per_interval = SCRAPE_INTERVAL_S * tick + gputop_scrape
    print(f"\n{processes} processes; gputop serve: 8 simulated GPUs, 1 s ticks; CPU seconds "
          "from /proc/PID/stat")
    print(f"{'':<32} {'gputop ms':>10} {'node_exp ms':>11} {'ratio':>7}")
    print(f"{'per tick (sampling, no scrape)':<32} {1e3 * tick:>10.2f} {'-':>11} {'-':>7}")
    print(f"{'per scrape (render/collect)':<32} {1e3 * gputop_scrape:>10.2f} "
          f"{1e3 * node_scrape:>11.2f} {_ratio(gputop_scrape, node_scrape):>7}")
    print(f"{'per 15 s scrape, 1 s ticks':<32} {1e3 * per_interval:>10.2f} "
          f"{1e3 * node_scrape:>11.2f} {_ratio(per_interval, node_scrape):>7}")
    print(f"{'per scrape, one tick each':<32} {1e3 * (tick + gputop_scrape):>10.2f} "
          f"{1e3 * node_scrape:>11.2f} {_ratio(tick + gputop_scrape, node_scrape):>7}  "
          "(serve --interval = the scrape interval)")
    print(f"scrape size: gputop {gputop_bytes} B, node_exporter {node_bytes} B; node_exporter "
          f"idles at {1e3 * node_rate:.2f} ms/s; gputop samples on its own clock, "
          "node_exporter collects on each scrape", flush=True)


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}x" if theirs > 0 else "n/a"


def main() -> int:
    """Both parts; each skips itself when its tools are missing."""
    print(f"cpus={os.cpu_count()}  (shared machine: compare the ratios, not the absolute ms)")
    if shutil.which("prometheus") and shutil.which("promtool"):
        fleet_at_scale()
    else:
        print("prometheus/promtool are missing (Debian's prometheus package): fleet skipped")
    exporters_side_by_side()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
