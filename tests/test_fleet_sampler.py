"""The fleet's sampler: it refreshes at Prometheus's scrape interval (or the user's), asks for
a host in detail at once when the UI focuses one, and a failing refresh is a line on screen."""

from __future__ import annotations

import threading

from gputop.core.model import FleetHost, FleetHostDetail, FleetReport, Frame, HostSample
from gputop.frames.fleet_sampler import DEFAULT_INTERVAL_S, FleetSampler
from tests.helpers.builders import host

URL = "http://prom:9090"


class Host:
    """This machine's host facts, fixed."""

    def sample(self) -> HostSample:
        return host()


class Answers:
    """Stands where FleetSource stands: answers each refresh with `report` (or raises
    `fails`), and records which host was asked for in detail."""

    def __init__(self, report: FleetReport, fails: Exception | None = None) -> None:
        self.url = URL
        self.report = report
        self.fails = fails
        self.asked: list[str | None] = []

    def sample(self, detail: str | None = None) -> FleetReport:
        self.asked.append(detail)
        if self.fails is not None:
            raise self.fails
        return self.report if detail is None else FleetReport(
            URL, self.report.hosts, scrape_interval_s=self.report.scrape_interval_s,
            detail=FleetHostDetail(detail))


def _sampler(answers: Answers, interval_s: float | None = None) -> FleetSampler:
    return FleetSampler(answers, Host(), interval_s)


def test_the_refresh_period_is_prometheus_scrape_interval_unless_the_user_chose_one() -> None:
    sampler = _sampler(Answers(FleetReport(URL, scrape_interval_s=30.0)))
    assert sampler.interval_s == DEFAULT_INTERVAL_S  # nothing read yet
    frame = sampler.sample()
    assert sampler.interval_s == frame.interval_s == 30.0
    assert frame.fleet is not None and frame.fleet.url == URL
    chosen = _sampler(Answers(FleetReport(URL, scrape_interval_s=30.0)), interval_s=2.0)
    assert chosen.sample().interval_s == 2.0
    unknown = _sampler(Answers(FleetReport(URL, error="cannot query")))
    assert unknown.sample().interval_s == DEFAULT_INTERVAL_S


def test_focusing_a_host_asks_for_it_at_once_not_a_scrape_interval_later() -> None:
    answers = Answers(FleetReport(URL, scrape_interval_s=3600.0))
    sampler = _sampler(answers)
    frames: list[Frame] = []
    arrived = threading.Event()

    def on_frame(frame: Frame) -> None:
        frames.append(frame)
        arrived.set()

    sampler.start(on_frame)
    try:
        assert arrived.wait(30)
        arrived.clear()
        sampler.focus("node-7:19400")
        assert arrived.wait(30)  # an hour-long interval: only the focus can have woken it
        assert frames[-1].fleet is not None and frames[-1].fleet.detail is not None
        assert frames[-1].fleet.detail.instance == "node-7:19400"
        assert answers.asked == [None, "node-7:19400"]
    finally:
        sampler.stop()


def test_a_refresh_that_fails_is_a_line_on_screen_over_the_last_hosts() -> None:
    answers = Answers(FleetReport(URL, scrape_interval_s=1.0))
    sampler = _sampler(answers)
    sampler._tick()
    answers.fails = KeyError("instance")
    frame = sampler._tick()
    assert frame is not None and frame.fleet is not None
    assert frame.fleet.error == "refresh failed: KeyError: 'instance'"


def test_a_refresh_prometheus_does_not_answer_keeps_the_last_hosts_marked_stale() -> None:
    hosts = (FleetHost("a:19400", "a", up=True, gpus=2),)
    answers = Answers(FleetReport(URL, hosts, scrape_interval_s=1.0))
    sampler = _sampler(answers)
    good = sampler.sample()
    error = f"Prometheus at {URL} did not answer within 10 s"
    answers.report = FleetReport(URL, error=error, scrape_interval_s=1.0)
    late = sampler.sample()
    assert late.fleet is not None
    assert (late.fleet.hosts, late.fleet.error, late.fleet.stale_from) == (hosts, error,
                                                                           good.time)
    answers.report = FleetReport(URL, hosts, scrape_interval_s=1.0)
    again = sampler.sample().fleet
    assert again is not None and (again.error, again.stale_from) == (None, None)
