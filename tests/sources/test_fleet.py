"""The fleet source against a real Prometheus scraping real `gputop serve --demo` targets:
one row per target, worst first, and a target that goes away shows as down, not as zeros."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gputop.export.fleet import render
from gputop.model import FleetHost, FleetReport
from gputop.sources.fleet import FleetSource
from tests.helpers.probe import ROOT
from tests.helpers.prometheus import Serve, free_port, prometheus, serve_env, wait_until

DEMO = ("--listen", "127.0.0.1:0", "--no-demo-trainer", "--membw", "off", "--interval", "0.5")


def test_an_unreachable_prometheus_is_one_line_not_a_traceback() -> None:
    report = FleetSource(f"http://127.0.0.1:{free_port()}").sample()
    assert report.hosts == () and report.error is not None
    assert "cannot query" in report.error and "\n" not in report.error


def test_down_hosts_come_first_and_show_no_figures() -> None:
    busy = FleetHost("a:1", "a", up=True, gpus=8, idle_gpus_holding_memory=0,
                     data_bound_trainers=2)
    calm = FleetHost("b:1", "b", up=True, gpus=8, idle_gpus_holding_memory=0)
    gone = FleetHost("c:1", "c", up=False)
    text = render(FleetReport("http://p:9090", tuple(sorted(
        (calm, gone, busy), key=lambda h: (-h.trouble, h.hostname)))))
    rows = text.splitlines()[2:]
    assert [r.split()[0] for r in rows] == ["c", "a", "b"]
    assert "DOWN" in rows[0] and "0" not in rows[0].split("DOWN", 1)[1]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("prometheus") is None,
                    reason="prometheus is not installed (.ci/run installs Debian's package)")
def test_the_fleet_lists_each_target_worst_first_and_a_stopped_one_as_down(
        tmp_path: Path) -> None:
    env = serve_env(tmp_path)
    held = Serve([*DEMO, "--demo", "memory-full-util-zero", "--gpus", "2"], env)
    busy = Serve([*DEMO, "--demo", "compute-bound", "--gpus", "1"], env)
    try:
        with prometheus(tmp_path, [held.target, busy.target], interval_s=1.0) as server:
            source = FleetSource(server.base)

            def both_up() -> FleetReport | None:
                report = source.sample()
                ok = len(report.hosts) == 2 and all(h.up and h.gpus for h in report.hosts)
                return report if ok else None

            report = wait_until(both_up, 60, what="both targets in the fleet")
            first, second = report.hosts
            assert (first.instance, first.gpus, first.idle_gpus_holding_memory) == (
                held.target, 2, 2)  # idle GPUs with memory held: worst first
            assert (second.instance, second.gpus, second.idle_gpus_holding_memory) == (
                busy.target, 1, 0)
            assert second.gpu_util_ratio is not None and second.gpu_util_ratio > 0.9
            assert first.simulated and second.simulated

            once = subprocess.run(
                [sys.executable, "-m", "gputop", "--prometheus", server.base, "--once",
                 "--json"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
                check=True)
            hosts = json.loads(once.stdout)["hosts"]
            assert [h["instance"] for h in hosts] == [held.target, busy.target]

            assert busy.stop() == 0
            down = wait_until(lambda: next((h for h in source.sample().hosts
                                            if h.instance == busy.target and not h.up), None),
                              60, what="the stopped target to show as down")
            assert down.gpus is None and down.gpu_util_ratio is None
            text = render(source.sample())
            assert "DOWN" in next(line for line in text.splitlines() if busy.target in line)
    finally:
        for exporter in (held, busy):
            exporter.stop()


@pytest.mark.parametrize(("argv", "says"), [
    (["--prometheus", "http://127.0.0.1:9090"], "goes with --once"),
    (["--prometheus", "prometheus:9090", "--once"], "wants an http(s):// URL"),
    (["--prometheus", "http://127.0.0.1:9090", "--once", "--demo"], "takes no --demo"),
])
def test_bad_fleet_input_is_one_line_and_exit_2(argv: list[str], says: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from gputop.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err


def test_an_unreachable_prometheus_exits_1_with_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    from gputop.cli import main

    assert main(["--prometheus", f"http://127.0.0.1:{free_port()}", "--once"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "cannot query" in captured.err
