"""`gputop serve` end to end: a real exporter on a loopback port with simulated GPUs, a real
probed trainer, and a real Prometheus server scraping it, queried over its HTTP API."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from tests.helpers.probe import ROOT, trainer_env
from tests.helpers.prometheus import (
    OPENMETRICS,
    Prometheus,
    Serve,
    metric_lines,
    prometheus,
    serve,
    serve_env,
    wait_until,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None or shutil.which("promtool") is None,
                       reason="prometheus and promtool are not installed (.ci/run installs "
                       "Debian's prometheus package)"),
]
pytest.importorskip("torch")

TRAINER = ROOT / "tests" / "export" / "trainers" / "slow_loader.py"
SERVE_ARGS = ("--listen", "127.0.0.1:0", "--demo", "data-starved", "--no-demo-trainer",
              "--gpus", "2", "--membw", "off", "--interval", "0.5")


class Trainer:
    """`python -m gputop.probe slow_loader.py STOP` with its rings in `ring_dir`."""

    def __init__(self, ring_dir: Path, workdir: Path) -> None:
        self.stop_file = workdir / f"stop-{id(self)}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gputop.probe", str(TRAINER), str(self.stop_file)],
            env=trainer_env(ring_dir), cwd=ROOT, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.pid = str(self.process.pid)

    def stop(self) -> None:
        self.stop_file.touch()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


class Stack:
    """One exporter, one trainer it follows, one Prometheus scraping the exporter."""

    def __init__(self, exporter: Serve, trainer: Trainer, server: Prometheus,
                 ring_dir: Path, workdir: Path) -> None:
        self.exporter, self.trainer, self.prometheus = exporter, trainer, server
        self.ring_dir, self.workdir = ring_dir, workdir


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("serve")
    ring_dir = workdir / "rings"
    ring_dir.mkdir()
    trainer = Trainer(ring_dir, workdir)
    try:
        with serve(SERVE_ARGS, serve_env(ring_dir)) as exporter, \
                prometheus(workdir, [exporter.target], interval_s=1.0) as server:
            yield Stack(exporter, trainer, server, ring_dir, workdir)
    finally:
        trainer.stop()


def _trainer_label(stack: Stack, pid: str) -> str | None:
    """The `trainer` label of PID `pid` (gputop_trainer_info's), None while it is not scraped."""
    info = metric_lines(stack.exporter.scrape(), "gputop_trainer_info", pid=pid)
    return info[0].split('trainer="', 1)[1].split('"', 1)[0] if info else None


def _trainer_steps_scraped(stack: Stack, pid: str) -> bool:
    label = _trainer_label(stack, pid)
    if not label:
        return False
    lines = metric_lines(stack.exporter.scrape(), "gputop_trainer_steps_total", trainer=label)
    return bool(lines) and float(lines[0].rsplit(" ", 1)[1]) > 0


def test_promtool_accepts_a_real_scrape(stack: Stack) -> None:
    wait_until(lambda: _trainer_steps_scraped(stack, stack.trainer.pid), 120,
               what="the trainer's steps in a scrape")
    text = stack.exporter.scrape()
    checked = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                             capture_output=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert 'simulated="true"' in metric_lines(text, "gputop_exporter_info")[0]


def test_the_openmetrics_scrape_parses(stack: Stack) -> None:
    text = stack.exporter.scrape(OPENMETRICS)
    assert text.endswith("# EOF\n")
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"gputop_gpu_utilization_ratio", "gputop_trainer_verdict",
            "gputop_trainer_steps"} <= names


def test_prometheus_has_the_gpus_with_the_uuids_gputop_reports(stack: Stack) -> None:
    series = wait_until(lambda: stack.prometheus.query("gputop_gpu_utilization_ratio"), 60,
                        what="GPU series in Prometheus")
    once = subprocess.run([sys.executable, "-m", "gputop", "--once", "--json", "--demo",
                           "data-starved", "--gpus", "2", "--membw", "off", "--interval", "0.1"],
                          capture_output=True, text=True, cwd=ROOT, env=serve_env(stack.ring_dir),
                          timeout=120, check=True)
    expected = {(str(g["index"]), g["uuid"]) for g in json.loads(once.stdout)["gpus"]}
    assert {(s["metric"]["gpu"], s["metric"]["UUID"]) for s in series} == expected
    assert all(0.0 <= float(s["value"][1]) <= 1.0 for s in series)
    assert {s["metric"]["Hostname"] for s in series} == {json.loads(once.stdout)["hostname"]}


def test_prometheus_has_the_trainers_steps_ratio_and_verdict(stack: Stack) -> None:
    pid = wait_until(lambda: _trainer_label(stack, stack.trainer.pid), 120,
                     what="the trainer in a scrape")  # its `trainer` label
    query = stack.prometheus.query
    steps = wait_until(lambda: query(f'gputop_trainer_steps_total{{trainer="{pid}"}} > 0'), 120,
                       what="the trainer's steps in Prometheus")
    assert float(steps[0]["value"][1]) > 0
    wait_until(lambda: query(f'gputop_trainer_verdict{{trainer="{pid}",'
                             'verdict="data-bound"} == 1'), 120,
               what="a data-bound verdict in Prometheus")
    (ratio,) = query(f'gputop_trainer_data_wait_ratio{{trainer="{pid}"}}')
    assert 0.5 <= float(ratio["value"][1]) <= 1.0
    phases = {s["metric"]["phase"] for s in query(
        f'gputop_trainer_phase_seconds_count{{trainer="{pid}"}} > 0')}
    assert {"data", "forward", "backward", "optimizer"} <= phases
    (config,) = query(f'gputop_trainer_config_info{{trainer="{pid}"}}')
    assert (config["metric"]["num_workers"], config["metric"]["batch_size"]) == ("1", "8")
    assert query(f'gputop_trainer_workers{{trainer="{pid}"}} == 1')


def test_a_trainer_that_starts_later_is_followed_and_its_series_vanish(stack: Stack) -> None:
    later = Trainer(stack.ring_dir, stack.workdir)
    try:
        wait_until(lambda: _trainer_steps_scraped(stack, later.pid), 120,
                   what="the second trainer's steps in a scrape")
        label = _trainer_label(stack, later.pid)
        assert label is not None and label != _trainer_label(stack, stack.trainer.pid)
        wait_until(lambda: stack.prometheus.query(
            f'gputop_trainer_steps_total{{trainer="{label}"}}'), 60,
            what="the second trainer in Prometheus")
    finally:
        later.stop()
    wait_until(lambda: not [line for line in stack.exporter.scrape().splitlines()
                            if f'trainer="{label}"' in line], 60,
               what="the exited trainer's series to leave the scrape")
    wait_until(lambda: not stack.prometheus.query(f'{{trainer="{label}"}}'), 60,
               what="Prometheus to mark the exited trainer's series stale")
    assert _trainer_steps_scraped(stack, stack.trainer.pid)  # the first one is still there
