"""The fleet at scale: 500 simulated hosts (gputop's own exposition, backfilled with promtool)
in a real Prometheus. The source lists every host worst first and names the stragglers of
jobs that span hosts; the screen (Pilot, then a real terminal) lists all 500, worst first,
and drills into one host and back."""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gputop.app.fleet import fleet_sampler
from gputop.core.model import FleetReport
from gputop.sources.fleet import FleetSource
from gputop.tui.app import GputopApp
from gputop.tui.widgets.fleet import FleetHostScreen, FleetScreen, FleetTable
from tests.helpers import tmux
from tests.helpers.fleet import Shape, backfill
from tests.helpers.prometheus import Prometheus, prometheus
from tests.helpers.tui import screen_text, sync

if TYPE_CHECKING:
    from textual.pilot import Pilot

HOSTS = 500
SHAPES = [Shape(i) for i in range(HOSTS)]
DOWN = [s.instance for s in SHAPES if s.down]
REPO = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None or shutil.which("promtool") is None,
                       reason="prometheus and promtool are not installed (.ci/run installs "
                       "Debian's prometheus package)"),
]


@dataclass(frozen=True)
class Fleet:
    """The backfilled Prometheus and the first report read from it."""

    server: Prometheus
    report: FleetReport


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    workdir = tmp_path_factory.mktemp("fleet")
    backfill(workdir / "data", HOSTS, workdir)
    with prometheus(workdir, [], interval_s=15.0, data=workdir / "data") as server:
        yield Fleet(server, FleetSource(server.base).sample())


def test_the_source_lists_every_host_worst_first(fleet: Fleet) -> None:
    report = fleet.report
    assert report.error is None and len(report.hosts) == HOSTS
    assert report.scrape_interval_s == 15.0  # no targets: the global scrape_interval
    assert sorted(h.instance for h in report.hosts[:len(DOWN)]) == sorted(DOWN)
    assert all(h.gpus is None and h.trainers is None for h in report.hosts[:len(DOWN)])
    troubles = [h.trouble for h in report.hosts]
    assert troubles == sorted(troubles, reverse=True)
    by_instance = {h.instance: h for h in report.hosts}
    up = [s for s in SHAPES if not s.down]
    assert {s.instance for s in up if by_instance[s.instance].stragglers} == {
        s.instance for s in up if s.straggler or s.data_bound}  # judged across hosts
    assert {s.instance for s in up if by_instance[s.instance].data_bound_trainers} == {
        s.instance for s in up if s.data_bound}
    assert {s.instance for s in up if by_instance[s.instance].idle_gpus_holding_memory} == {
        s.instance for s in up if s.idle_gpu_held}


def test_the_source_drills_into_one_host(fleet: Fleet) -> None:
    straggler = next(s for s in SHAPES if s.straggler and not s.down)
    detail = FleetSource(fleet.server.base).sample(detail=straggler.instance).detail
    assert detail is not None and detail.instance == straggler.instance
    assert [g.index for g in detail.gpus] == ["0", "1"]
    (trainer,) = detail.trainers
    assert trainer.straggler and trainer.rendezvous == straggler.rendezvous
    assert (trainer.rank, trainer.world_size, trainer.workers) == ("3", "8", 4)


async def _until(pilot: Pilot[int], ok: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not ok():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)
        await pilot.pause()


@sync
async def test_the_screen_lists_all_hosts_worst_first_and_drills_into_one(
        fleet: Fleet) -> None:
    from gputop.tui import build_app

    feed = fleet_sampler(fleet.server.base)
    app: GputopApp = build_app(feed)
    try:
        async with app.run_test(size=(160, 40)) as pilot:
            def listed() -> bool:
                return isinstance(app.screen, FleetScreen) and len(
                    app.screen.query_one(FleetTable).hosts) == HOSTS

            await _until(pilot, listed, "500 hosts on the fleet screen")
            table = app.screen.query_one(FleetTable)
            rows = table.text.splitlines()[1:]
            assert all("DOWN" in row for row in rows[:len(DOWN)])
            worst = next(h for h in table.hosts if h.up)
            assert rows[len(DOWN)].startswith(worst.hostname)
            for _ in DOWN:
                await pilot.press("down")
            await pilot.press("enter")
            assert isinstance(app.screen, FleetHostScreen)
            assert app.screen.instance == worst.instance

            def detailed() -> bool:
                return "Trainers (1)" in "\n".join(screen_text(app))

            await _until(pilot, detailed, "the host's detail")
            shown = "\n".join(screen_text(app))
            assert "INPUT STRAGGLER" in shown and "GPUs (2)" in shown
            await pilot.press("escape")
            assert isinstance(app.screen, FleetScreen)
    finally:
        feed.stop()


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_gputop_fleet_in_a_real_terminal(fleet: Fleet) -> None:
    with tmux.session(REPO, 140, 30) as name:
        tmux.spawn(name, f"env TERM=xterm-256color PYTHONPATH={REPO} {sys.executable} -m gputop "
                         f"--fleet {fleet.server.base}")
        first = tmux.wait_for(name, lambda s: f"{HOSTS} hosts, {len(DOWN)} down" in s)
        assert "refresh 15 s (scrape interval)" in first
        assert sum("DOWN" in line for line in first.splitlines()) == len(DOWN)
        tmux.tmux("send-keys", "-t", name, "Enter")
        host = tmux.wait_for(name, lambda s: "no figures" in s)  # the worst: a down host
        assert "stale is not zero" in host
        tmux.tmux("send-keys", "-t", name, "Escape")
        tmux.wait_for(name, lambda s: "WHY" in s)
        tmux.tmux("send-keys", "-t", name, "q")
        assert tmux.exit_code(name) == 0

