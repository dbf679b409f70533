"""Which targets the fleet lists, and what Prometheus's target list may say of them: the gputop
jobs' targets whether they ever answered or not, none of other jobs; a target's last error
made printable and cut, its health and last scrape taken only when well-formed; and the
targets request held to the same deadline as every other."""

from __future__ import annotations

import json
import time
import urllib.parse
from typing import Any, BinaryIO

import pytest

from gputop.export.fleet import render
from gputop.sources.fleet import (
    SCRAPE_ERROR_CHARS,
    TARGETS,
    FleetSource,
    PrometheusClient,
    gputop_jobs,
    parse_time,
)
from gputop.tui.views.fleet import fleet_columns, fleet_row_line, host_lines
from tests.helpers.loopback_http import api_body, head, http_server, query_of, send

ANSWERED, SILENT, OTHER = "gpu-1:19400", "gpu-2:19400", "db:9100"
HOSTILE = "\x1b[2J\x1b]0;owned\x07 dial tcp: connect: connection refused\u202e" + "x" * 100_000


def _target(instance: str, job: str, **fields: Any) -> dict[str, Any]:
    return {"labels": {"instance": instance, "job": job}, "scrapePool": job,
            "scrapeInterval": "5s", **fields}


TARGET_LIST = [
    _target(ANSWERED, "gputop", health="up", lastError="", lastScrape="2026-12-07T04:51:55Z"),
    _target(SILENT, "gputop", health="pwned\x1b[1m", lastError=HOSTILE,
            lastScrape="2026-12-07T04:51:55.123456789Z"),
    _target(OTHER, "node", health="down", lastError="connection refused",
            lastScrape="not a time"),
    {"labels": ["not", "a", "dict"], "lastError": "junk"},
    "not a target",
]


def _answers(promql: str) -> list[dict[str, Any]]:
    """One gputop job with a target that answered and one that never did, and a node job."""
    def series(instance: str, job: str, value: str, **labels: str) -> dict[str, Any]:
        return {"metric": {"instance": instance, "job": job, **labels}, "value": [1.0, value]}

    if promql == TARGETS:
        return [series(ANSWERED, "gputop", "1", Hostname="gpu-1")]
    if promql == "up":
        return [series(ANSWERED, "gputop", "1"), series(SILENT, "gputop", "0"),
                series(OTHER, "node", "0"), {"metric": "junk", "value": [1.0, "0"]}]
    return []


def _prometheus(targets: object, drip_targets: bool = False) -> Any:
    def respond(path: str, wfile: BinaryIO) -> None:
        split = urllib.parse.urlsplit(path)
        if split.path == "/api/v1/query":
            send(wfile, api_body({"resultType": "vector", "result": _answers(query_of(path))}))
        elif split.path == "/api/v1/targets" and drip_targets:
            body = api_body({"activeTargets": targets})
            wfile.write(head("200 OK", [("Content-Length", str(len(body)))]))
            for byte in body[:40]:  # then nothing: the deadline must end the wait
                wfile.write(bytes([byte]))
                time.sleep(0.1)
            time.sleep(5)
        elif split.path == "/api/v1/targets":
            send(wfile, api_body({"activeTargets": targets, "droppedTargets": []}))
        else:
            send(wfile, api_body({"yaml": "global:\n  scrape_interval: 1m\n"}))

    return respond


def test_every_target_of_the_gputop_jobs_is_listed_and_no_other_job() -> None:
    with http_server(_prometheus(TARGET_LIST)) as prom:
        report = FleetSource(prom.url).sample()
    assert report.error is None
    hosts = {h.instance: h for h in report.hosts}
    assert set(hosts) == {ANSWERED, SILENT}
    assert report.hosts[0].instance == SILENT  # down first
    assert report.scrape_interval_s == 5.0  # from the gputop jobs' targets
    silent = hosts[SILENT]
    assert (silent.up, silent.seen, silent.gpus, silent.hostname) == (False, False, None, SILENT)
    assert hosts[ANSWERED].up and hosts[ANSWERED].seen and hosts[ANSWERED].scrape_error is None


def test_prometheus_last_error_is_made_printable_and_cut() -> None:
    with http_server(_prometheus(TARGET_LIST)) as prom:
        report = FleetSource(prom.url).sample()
    silent = next(h for h in report.hosts if h.instance == SILENT)
    error = silent.scrape_error
    assert error is not None and len(error) == SCRAPE_ERROR_CHARS and error.endswith("…")
    assert error.isprintable() and "\x1b" not in error and error.startswith("\\x1b[2J")
    assert "connection refused\\u202e" in error
    assert silent.scrape_health is None  # not one of Prometheus's healths
    whole_second = parse_time("2026-12-07T04:51:55Z")
    assert whole_second is not None
    assert silent.last_scrape == pytest.approx(whole_second + 0.123456789)
    text = render(report) + json.dumps([h.scrape_error for h in report.hosts])
    assert "\x1b" not in text and "\u202e" not in text
    row = "".join(t for t, _ in fleet_row_line(silent, fleet_columns(160), 160, False))
    assert "\x1b" not in row and "DOWN" in row
    detail = "".join(t for line in host_lines(SILENT, silent, None, 160) for t, _ in line)
    assert "never answered" in detail and "\x1b" not in detail


@pytest.mark.parametrize("targets", [[], "not a list", {"activeTargets": 1}, [None, 3]])
def test_a_malformed_target_list_still_lists_the_targets_from_up(targets: object) -> None:
    with http_server(_prometheus(targets)) as prom:
        report = FleetSource(prom.url).sample()
    assert report.error is None
    assert {h.instance for h in report.hosts} == {ANSWERED, SILENT}
    assert all(h.scrape_error is None and h.last_scrape is None for h in report.hosts)


def test_the_targets_request_is_given_up_at_the_same_deadline() -> None:
    with http_server(_prometheus(TARGET_LIST, drip_targets=True)) as prom:
        report = FleetSource(prom.url, PrometheusClient(prom.url, timeout_s=1.0)).sample()
    assert report.error == f"Prometheus at {prom.url} did not answer within 1 s"
    assert report.answer_refused


def test_the_gputop_jobs_are_those_that_answered_else_those_named_so() -> None:
    assert gputop_jobs({"gpus"}, ["gpus", "gputop", "node"]) == {"gpus"}
    assert gputop_jobs(set(), ["node", "gputop", "GPUTOP-lab", "prometheus"]) == {
        "gputop", "GPUTOP-lab"}
    assert gputop_jobs(set(), ["node"]) == set()


@pytest.mark.parametrize(("text", "seconds"), [
    ("1970-01-01T00:00:10Z", 10.0), ("1970-01-01T00:00:10.5Z", 10.5),
    ("1970-01-01T01:00:10+01:00", 10.0), ("0001-01-01T00:00:00Z", None),
    ("1970-13-01T00:00:10Z", None), ("yesterday", None), (None, None), (10, None),
    ("1970-01-01T00:00:10Z" + " " * 100, None),
])
def test_scrape_times_read_as_prometheus_writes_them(text: object,
                                                     seconds: float | None) -> None:
    assert parse_time(text) == seconds
