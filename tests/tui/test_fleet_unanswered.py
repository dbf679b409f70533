"""A target that never answered is in the fleet: a real Prometheus scrapes one real `gputop
serve` and one loopback port where nothing listens, and the source, `--once`, `--once --json`
and the fleet screen (Pilot) list both, the silent one DOWN with Prometheus's error."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from gputop.app.fleet import fleet_sampler
from gputop.core.model import FleetHost
from gputop.sources.fleet import FleetSource
from gputop.tui.app import GputopApp
from gputop.tui.widgets.fleet import FleetHostScreen, FleetScreen, FleetTable
from tests.helpers.probe import ROOT
from tests.helpers.prometheus import Serve, free_port, prometheus, serve_env, wait_until
from tests.helpers.tui import screen_text, sync

if TYPE_CHECKING:
    from textual.pilot import Pilot

REFUSED = "connection refused"
SERVE = ("--listen", "127.0.0.1:0", "--no-demo-trainer", "--membw", "off", "--interval", "0.5",
         "--demo", "compute-bound", "--gpus", "1")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None,
                       reason="prometheus is not installed (.ci/run installs Debian's package)"),
]


@dataclass(frozen=True)
class Fleet:
    """Prometheus's URL, the exporter's target and the silent one's, the env to run gputop."""

    url: str
    answering: str
    silent: str
    env: dict[str, str]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    workdir = tmp_path_factory.mktemp("unanswered")
    env = serve_env(workdir)
    exporter = Serve(SERVE, env)
    silent = f"127.0.0.1:{free_port()}"
    try:
        with prometheus(workdir, [exporter.target, silent], interval_s=1.0) as server:
            def both_scraped() -> bool:  # as Prometheus itself says, whatever gputop reads
                up = {s["metric"]["instance"]: s["value"][1] for s in server.query("up")}
                return up == {exporter.target: "1", silent: "0"}

            wait_until(both_scraped, 60, what="both targets scraped")
            yield Fleet(server.base, exporter.target, silent, env)
    finally:
        assert exporter.stop() == 0


def _hosts(fleet: Fleet) -> dict[str, FleetHost]:
    report = FleetSource(fleet.url).sample()
    assert report.error is None
    return {h.instance: h for h in report.hosts}


def test_the_source_lists_the_silent_target_down_with_prometheus_error(fleet: Fleet) -> None:
    hosts = _hosts(fleet)
    assert set(hosts) == {fleet.answering, fleet.silent}
    silent, answering = hosts[fleet.silent], hosts[fleet.answering]
    assert not silent.up and not silent.seen and silent.gpus is None
    assert silent.scrape_error is not None and REFUSED in silent.scrape_error
    assert silent.scrape_health == "down" and silent.last_scrape is not None
    assert abs(time.time() - silent.last_scrape) < 3600  # a real time, not Prometheus's zero
    assert answering.up and answering.seen and answering.gpus == 1
    assert answering.scrape_health == "up" and answering.scrape_error is None


def _once(fleet: Fleet, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "gputop", "--fleet", fleet.url, "--once",
                           *args], capture_output=True, text=True, cwd=ROOT, env=fleet.env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_once_lists_the_silent_target_down_and_says_why(fleet: Fleet) -> None:
    text = _once(fleet)
    assert "2 hosts, 1 down" in text.splitlines()[0]
    row = next(line for line in text.splitlines()[2:] if fleet.silent in line)
    assert "DOWN" in row.split()
    note = next(line for line in text.splitlines() if line.startswith(f"{fleet.silent}:"))
    assert "never answered" in note and REFUSED in note
    assert any(fleet.answering in line and " up " in line for line in text.splitlines())


def test_once_json_lists_the_silent_target_down_with_its_error(fleet: Fleet) -> None:
    hosts = {h["instance"]: h for h in json.loads(_once(fleet, "--json"))["hosts"]}
    assert set(hosts) == {fleet.answering, fleet.silent}
    silent = hosts[fleet.silent]
    assert (silent["up"], silent["seen"], silent["gpus"], silent["scrape_health"]) == (
        False, False, None, "down")
    assert REFUSED in silent["scrape_error"] and isinstance(silent["last_scrape"], float)
    assert hosts[fleet.answering]["up"] is True


async def _until(pilot: Pilot[int], ok: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not ok():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)
        await pilot.pause()


@sync
async def test_the_screen_lists_the_silent_target_down_and_its_error_in_detail(
        fleet: Fleet) -> None:
    from gputop.tui import build_app

    feed = fleet_sampler(fleet.url)
    app: GputopApp = build_app(feed)
    try:
        async with app.run_test(size=(160, 30)) as pilot:
            def listed() -> bool:
                return isinstance(app.screen, FleetScreen) and len(
                    app.screen.query_one(FleetTable).hosts) == 2

            await _until(pilot, listed, "both targets on the fleet screen")
            assert "2 hosts, 1 down" in screen_text(app)[0]
            first, second = app.screen.query_one(FleetTable).text.splitlines()[1:]
            assert first.startswith(fleet.silent) and fleet.silent not in second
            assert "DOWN" in first and f"{REFUSED} · never answered" in first
            assert "up" in second.split()
            await pilot.press("enter")
            assert isinstance(app.screen, FleetHostScreen)
            assert app.screen.instance == fleet.silent
            shown = "\n".join(screen_text(app))
            assert "never answered within the last hour" in shown
            assert "Prometheus: Get " in shown and REFUSED in shown and "last scrape" in shown
    finally:
        feed.stop()
