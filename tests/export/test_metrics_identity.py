"""A real trainer restarted with the same command keeps its `trainer` label in a real
`gputop serve`'s scrape (its new PID in gputop_trainer_info), its verdict is an enum gauge,
and promtool lints the scrape clean."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.probe import ROOT, trainer_env
from tests.helpers.prometheus import Serve, serve, serve_env, wait_until

pytestmark = pytest.mark.slow
pytest.importorskip("torch")

TRAINER = ROOT / "tests" / "export" / "trainers" / "slow_loader.py"
SERVE_ARGS = ("--listen", "127.0.0.1:0", "--demo", "idle", "--no-demo-trainer", "--gpus", "1",
              "--membw", "off", "--interval", "0.5")


def _run_trainer(ring_dir: Path, stop_file: Path) -> subprocess.Popen[bytes]:
    """`python -m gputop.probe slow_loader.py STOP_FILE`: the same command line each time."""
    return subprocess.Popen([sys.executable, "-m", "gputop.probe", str(TRAINER), str(stop_file)],
                            env=trainer_env(ring_dir), cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop(process: subprocess.Popen[bytes], stop_file: Path) -> None:
    stop_file.touch()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def _samples(exporter: Serve) -> list[tuple[str, dict[str, str], float]]:
    text = exporter.scrape()
    return [(s.name, s.labels, s.value) for family in text_string_to_metric_families(text)
            for s in family.samples]


def _probed_label(exporter: Serve, pid: int) -> str | None:
    """The `trainer` label of PID `pid` once its steps and verdict are scraped, else None."""
    samples = _samples(exporter)
    labels = [lab["trainer"] for name, lab, _ in samples if name == "gputop_trainer_info"
              and lab.get("pid") == str(pid) and lab.get("probe") == "true"]
    if not labels:
        return None
    steps = [v for name, lab, v in samples
             if name == "gputop_trainer_steps_total" and lab["trainer"] == labels[0]]
    return labels[0] if steps and steps[0] > 0 else None


def _run_once(exporter: Serve, ring_dir: Path, stop_file: Path) -> tuple[int, str]:
    """One trainer run until the exporter scrapes its steps: its PID and `trainer` label;
    then it is stopped and its series leave the scrape."""
    stop_file.unlink(missing_ok=True)
    process = _run_trainer(ring_dir, stop_file)
    try:
        label = wait_until(lambda: _probed_label(exporter, process.pid), 120,
                           what="the trainer's steps in a scrape")
        verdicts = wait_until(lambda: {lab["verdict"]: v for name, lab, v in _samples(exporter)
                                       if name == "gputop_trainer_verdict"
                                       and lab["trainer"] == label and v == 1}, 60,
                              what="a verdict of the trainer")
        assert len(verdicts) == 1  # one value of the enum is 1, the others 0
    finally:
        _stop(process, stop_file)
    wait_until(lambda: not [lab for _, lab, _ in _samples(exporter)
                            if lab.get("trainer") == label], 60,
               what="the stopped trainer's series to leave the scrape")
    return process.pid, label


def test_a_trainer_restarted_with_the_same_command_keeps_its_trainer_label(
        tmp_path: Path) -> None:
    ring_dir = tmp_path / "rings"
    ring_dir.mkdir()
    stop_file = tmp_path / "stop"
    with serve(SERVE_ARGS, serve_env(ring_dir)) as exporter:
        first_pid, first = _run_once(exporter, ring_dir, stop_file)
        second_pid, second = _run_once(exporter, ring_dir, stop_file)
    assert first_pid != second_pid
    assert first == second
    assert first not in (str(first_pid), str(second_pid))


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool is not installed (.ci/run installs Debian's prometheus "
                    "package)")
def test_promtool_lints_a_scrape_with_a_probed_trainer_clean(tmp_path: Path) -> None:
    ring_dir = tmp_path / "rings"
    ring_dir.mkdir()
    stop_file = tmp_path / "stop"
    process = _run_trainer(ring_dir, stop_file)
    try:
        with serve(SERVE_ARGS, serve_env(ring_dir)) as exporter:
            wait_until(lambda: _probed_label(exporter, process.pid), 120,
                       what="the trainer's steps in a scrape")
            text = exporter.scrape()
    finally:
        _stop(process, stop_file)
    checked = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                             capture_output=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout + checked.stderr == ""  # no lint warnings either
    assert 'verdict="data-bound"' in text
