"""The fleet source against a real Prometheus scraping real `gputop serve --demo` targets:
one row per target, worst first, and a target that goes away shows as down, not as zeros."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gputop.core.model import FleetHost, FleetReport, Frame
from gputop.export.fleet import render
from gputop.frames.fleet_sampler import FleetSampler
from gputop.sources.fleet import FleetSource, parse_duration
from gputop.sources.fleet_detail import STRAGGLERS_ACROSS_HOSTS, host_detail, promql_string
from gputop.sources.host import ProcHostSource
from gputop.tui.views.fleet import fleet_columns, fleet_row_line
from tests.helpers.probe import ROOT
from tests.helpers.prometheus import Serve, free_port, prometheus, serve_env, wait_until

DEMO = ("--listen", "127.0.0.1:0", "--no-demo-trainer", "--membw", "off", "--interval", "0.5")


def test_an_unreachable_prometheus_is_one_line_not_a_traceback() -> None:
    report = FleetSource(f"http://127.0.0.1:{free_port()}").sample()
    assert report.hosts == () and report.error is not None
    assert "cannot query" in report.error and "\n" not in report.error


@pytest.mark.parametrize(("text", "seconds"), [
    ("15s", 15.0), ("1m30s", 90.0), ("500ms", 0.5), ("1h", 3600.0), ("2m", 120.0),
    ("", None), ("15", None), ("s", None), ("15s junk", None), ("0s", None), (None, None),
    ("9" * 400 + "s", None),  # infinite
])
def test_durations_read_as_prometheus_writes_them(text: str | None,
                                                  seconds: float | None) -> None:
    assert parse_duration(text) == seconds


def test_memory_bandwidth_pressure_makes_a_host_want_a_look() -> None:
    assert FleetHost("a:1", "a", up=True, memory_pressure_ratio=0.8).trouble == 1
    assert FleetHost("a:1", "a", up=True, memory_pressure_ratio=0.2).trouble == 0


def _series(metric: str, value: float | str, **labels: str) -> dict[str, object]:
    return {"metric": {"__name__": metric, "instance": "n1:19400", **labels},
            "value": [1.0, str(value)]}


TRAINER_ID = "3f9a1c0b2d4e"  # the `trainer` label: a hash stable across restarts


def _own_series(trainer_id: str, info: dict[str, str], verdict: str) -> list[dict[str, object]]:
    """One host's series: a GPU, and a data-bound trainer labelled `trainer_id` whose enum
    gauges label their value with `verdict`."""
    gpu, trainer = {"gpu": "0", "UUID": "GPU-a"}, {"trainer": trainer_id}
    return [
        _series("gputop_gpu_info", 1, model_name="H100", **gpu),
        _series("gputop_gpu_utilization_ratio", 0.25, **gpu),
        _series("gputop_gpu_memory_used_bytes", 3e10, **gpu),
        _series("gputop_trainer_info", 1, name="python", user="ana", probe="true", **info,
                **trainer),
        _series("gputop_trainer_data_wait_ratio", "NaN", **trainer),
        _series("gputop_trainer_verdict", 1, **{verdict: "data-bound"}, **trainer),
        _series("gputop_trainer_verdict", 0, **{verdict: "unknown"}, **trainer),
        _series("gputop_trainer_state", 0, **{verdict.replace("verdict", "state"): "running"},
                **trainer),
        _series("gputop_trainer_state", 1, **{verdict.replace("verdict", "state"): "stalled"},
                **trainer),
        _series("gputop_trainer_workers", 3, **trainer),
        _series("gputop_trainer_job_info", 1, rank="1", world_size="4", rendezvous="j@m:1",
                **trainer),
        _series("gputop_advice_active", 1, id="loader-workers", severity="warn",
                trainer=trainer_id),
        {"metric": {"__name__": "gputop_trainer_workers"}, "value": "junk"},  # malformed
    ]


def _answers(own: list[dict[str, object]], trainer_id: str, asked: list[str],
             ) -> Callable[[str], list[dict[str, object]]]:
    def query(promql: str) -> list[dict[str, object]]:
        asked.append(promql)
        if promql == STRAGGLERS_ACROSS_HOSTS:
            return [{"metric": {"instance": n, "trainer": trainer_id}, "value": [1, "0.6"]}
                    for n in ("n1:19400", "n2:19400")]
        return own
    return query


def test_one_host_in_detail_is_read_from_its_own_series() -> None:
    own = _own_series(TRAINER_ID, {"pid": "42", "command": "python train.py"}, "verdict")
    own.append(_series("gputop_trainer_mean_step_seconds", 0.125, trainer=TRAINER_ID))
    asked: list[str] = []
    query = _answers(own, TRAINER_ID, asked)

    detail = host_detail(query, 'n1:19400"')
    assert r'instance="n1:19400\""' in asked[0]  # the name is quoted, never spliced in
    (g,) = detail.gpus
    assert (g.index, g.name, g.util_ratio, g.memory_used_bytes, g.memory_total_bytes) == (
        "0", "H100", 0.25, 3e10, None)
    (t,) = detail.trainers
    assert (t.pid, t.name, t.probed, t.verdict, t.state, t.workers, t.rank, t.rendezvous) == (
        "42", "python", True, "data-bound", "stalled", 3, "1", "j@m:1")
    assert (t.step_s, t.step_statistic) == (0.125, "mean")  # the step time the screens show
    assert t.median_step_s is None  # a median is a median: this exporter published none
    assert t.data_wait_ratio is None  # NaN is not a number to show
    assert not t.straggler  # the straggler named on n1 is not this host's ('n1:19400"')
    assert [(a.id, a.severity, a.trainer) for a in detail.advice] == [
        ("loader-workers", "warn", "42")]
    assert host_detail(query, "n1:19400").trainers[0].straggler


def test_an_older_exporters_pid_label_and_state_set_labels_still_read() -> None:
    query = _answers(_own_series("42", {}, "gputop_trainer_verdict"), "42", [])
    (t,) = host_detail(query, "n1:19400").trainers
    assert (t.pid, t.verdict, t.state, t.straggler) == ("42", "data-bound", "stalled", True)


def test_promql_strings_escape_quotes_and_backslashes() -> None:
    assert promql_string(r'a"b\c') == r'"a\"b\\c"'


def test_down_hosts_come_first_and_show_no_figures() -> None:
    busy = FleetHost("a:1", "a", up=True, gpus=8, idle_gpus_holding_memory=0,
                     data_bound_trainers=2)
    calm = FleetHost("b:1", "b", up=True, gpus=8, idle_gpus_holding_memory=0)
    gone = FleetHost("c:1", "c", up=False)
    text = render(FleetReport("http://p:9090", tuple(sorted(
        (calm, gone, busy), key=lambda h: (-h.trouble, h.hostname)))))
    table, notes = text.split("\n\n")
    rows = table.splitlines()[2:]
    assert [r.split()[0] for r in rows] == ["c", "a", "b"]
    assert "DOWN" in rows[0] and "0" not in rows[0].split("DOWN", 1)[1]
    assert notes == "c:1: DOWN; Prometheus names no error (scrapes fail, or the target is gone)\n"


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
            assert report.scrape_interval_s == 1.0  # the targets' scrapeInterval
            detail = source.sample(detail=held.target).detail
            assert detail is not None and detail.instance == held.target
            assert [(g.index, g.util_ratio) for g in detail.gpus] == [("0", 0.0), ("1", 0.0)]
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
    (["--fleet", "http://127.0.0.1:notaport"], "wants an http(s):// URL"),
    (["--fleet", "ftp://127.0.0.1:9090"], "wants an http(s):// URL"),
    (["--fleet", "http://"], "wants an http(s):// URL"),
    (["--prometheus", "prometheus:9090", "--once"], "wants an http(s):// URL"),
    (["--fleet", "http://ana:secret@127.0.0.1:9090", "--once"], "no user:password@"),
    (["--fleet", "http://127.0.0.1:9090/?query=up", "--once"], "no ?query or #fragment"),
    (["--fleet", "http://127.0.0.1:9090", "--once", "--fleet-timeout", "0"],
     "--fleet-timeout: must be between"),
    (["--once", "--fleet-timeout", "5"], "--fleet-timeout goes with --fleet"),
    (["--prometheus", "http://127.0.0.1:9090", "--once", "--demo"], "takes no --demo"),
])
def test_bad_fleet_input_is_one_line_and_exit_2(argv: list[str], says: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from gputop.app.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err


def test_an_unreachable_prometheus_exits_1_with_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    from gputop.app.cli import main

    assert main(["--prometheus", f"http://127.0.0.1:{free_port()}", "--once"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "cannot query" in captured.err


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("prometheus") is None,
                    reason="prometheus is not installed (.ci/run installs Debian's package)")
def test_a_target_that_goes_away_shows_as_down_within_two_scrape_intervals(
        tmp_path: Path) -> None:
    """Prometheus scrapes every second and the fleet refreshes at that interval: of the
    fleet's refreshes asked after the exporter stopped, the second at the latest shows it
    down (the first may precede the failed scrape)."""
    env = serve_env(tmp_path)
    stays = Serve([*DEMO, "--demo", "compute-bound", "--gpus", "1"], env)
    goes = Serve([*DEMO, "--demo", "compute-bound", "--gpus", "1"], env)
    frames: list[Frame] = []
    try:
        with prometheus(tmp_path, [stays.target, goes.target], interval_s=1.0) as server:
            sampler = FleetSampler(FleetSource(server.base), ProcHostSource())
            sampler.start(frames.append)
            try:
                def both_up() -> bool:
                    report = frames[-1].fleet if frames else None
                    return report is not None and len(report.hosts) == 2 and all(
                        h.up and h.gpus for h in report.hosts)

                wait_until(both_up, 60, what="both targets up in the fleet")
                assert frames[-1].interval_s == 1.0  # refreshed at the scrape interval
                assert goes.stop() == 0
                stopped = time.time()

                def shown_down() -> int | None:
                    after = [f for f in frames if f.time > stopped]
                    return next((i + 1 for i, f in enumerate(after) if _down(f, goes.target)),
                                None)

                refreshes = wait_until(shown_down, 60, pause_s=0.05,
                                       what="the stopped target to show as down")
            finally:
                sampler.stop()
        assert refreshes <= 2, f"down only in refresh {refreshes} after the stop"
        down = next(f for f in frames if f.time > stopped and _down(f, goes.target))
        assert down.fleet is not None
        (host,) = [h for h in down.fleet.hosts if h.instance == goes.target]
        row = "".join(t for t, _ in fleet_row_line(host, fleet_columns(120), 120, False))
        assert "DOWN" in row and host.gpus is None  # the fleet view says so, not zeros
    finally:
        for exporter in (stays, goes):
            exporter.stop()


def _down(frame: Frame, instance: str) -> bool:
    report = frame.fleet
    return report is not None and any(h.instance == instance and not h.up
                                      for h in report.hosts)
