"""A Prometheus answer is input: the fleet client gives each request one deadline, reads no
more than a cap, follows no redirect, and shows a non-finite value as n/a in its own cell
alone (null in strict JSON), whoever serves it: a loopback server written here, or a real
Prometheus that scraped NaN and infinities."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from gputop.app.cli import main
from gputop.core.model import FleetHost
from gputop.export.fleet import COLUMNS
from gputop.frames.fleet_sampler import FleetSampler
from gputop.sources import fleet
from gputop.sources.fleet import (
    QUERIES,
    TARGETS,
    FleetError,
    FleetSource,
    PrometheusClient,
)
from gputop.sources.fleet_detail import STRAGGLERS_ACROSS_HOSTS
from gputop.sources.host import ProcHostSource
from gputop.tui.views.fleet import fleet_columns, fleet_row_line, fleet_title_lines, host_lines
from tests.helpers.loopback_http import (
    Respond,
    api_body,
    head,
    http_server,
    per_instance,
    prometheus_api,
)
from tests.helpers.probe import ROOT
from tests.helpers.prometheus import prometheus, wait_until

A, B = "a:19400", "b:19400"
HOSTNAMES = {A: "alpha", B: "beta"}
FIGURES = {  # FleetHost field -> instance -> the value as Prometheus writes it
    "gpus": {A: "4", B: "2"},
    "gpu_util_ratio": {A: "NaN", B: "0.5"},
    "gpu_memory_used_bytes": {A: "+Inf", B: "1073741824"},
    "gpu_memory_total_bytes": {A: "8589934592", B: "8589934592"},
    "trainers": {A: "NaN", B: "1"},
    "probed_trainers": {A: "1", B: "1"},
    "worst_data_wait_ratio": {A: "-Inf", B: "0.25"},
    "memory_pressure_ratio": {A: "0.2", B: "+Inf"},
}
NOT_FINITE = {A: {"gpu_util_ratio", "gpu_memory_used_bytes", "trainers",
                  "worst_data_wait_ratio"}, B: {"memory_pressure_ratio"}}
DETAIL_OF_A = [  # host A's own series, some not finite
    ("gputop_gpu_utilization_ratio", {"gpu": "0"}, "NaN"),
    ("gputop_gpu_utilization_ratio", {"gpu": "1"}, "0.5"),
    ("gputop_gpu_memory_used_bytes", {"gpu": "0"}, "+Inf"),
    ("gputop_trainer_info", {"trainer": "7", "name": "python"}, "1"),
    ("gputop_trainer_workers", {"trainer": "7"}, "+Inf"),
    ("gputop_trainer_data_wait_ratio", {"trainer": "7"}, "0.3"),
]
DEADLINE_S = 1.0
DRIP_EVERY_S = 0.1  # far under the deadline: a timeout per read would never trip
DRIP_FOR_S = 5.0  # then the drip stops, so that a client without a deadline fails too
ENDLESS_BYTES = 100 << 20
# The peak RSS of this process alone: getrusage's ru_maxrss starts from its parent's at fork
RSS_SCRIPT = """
import sys
from gputop.sources.fleet import FleetError, PrometheusClient
try:
    PrometheusClient(sys.argv[1]).query("up")
except FleetError as exc:
    print(exc, file=sys.stderr)
with open("/proc/self/status") as status:
    print(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
"""
EXPOSITION = b"""# TYPE gputop_exporter_info gauge
gputop_exporter_info{Hostname="nanhost",simulated="false"} 1
# TYPE gputop_gpu_utilization_ratio gauge
gputop_gpu_utilization_ratio{Hostname="nanhost",gpu="0"} NaN
# TYPE gputop_gpu_memory_used_bytes gauge
gputop_gpu_memory_used_bytes{Hostname="nanhost",gpu="0"} 1073741824
# TYPE gputop_gpu_memory_total_bytes gauge
gputop_gpu_memory_total_bytes{Hostname="nanhost",gpu="0"} +Inf
# TYPE gputop_host_memory_bandwidth_pressure_ratio gauge
gputop_host_memory_bandwidth_pressure_ratio{Hostname="nanhost"} -Inf
"""


def _answers(promql: str) -> list[dict[str, Any]]:
    """Two hosts, both up, some of their figures NaN or infinite."""
    if promql == TARGETS:
        return [{"metric": {"instance": i, "Hostname": name}, "value": [1.0, "1"]}
                for i, name in HOSTNAMES.items()]
    if promql == "up":
        return per_instance(dict.fromkeys(HOSTNAMES, "1"))
    if promql.startswith("{__name__") and A in promql:
        return [{"metric": {"__name__": name, "instance": A, **labels}, "value": [1.0, value]}
                for name, labels, value in DETAIL_OF_A]
    if promql == STRAGGLERS_ACROSS_HOSTS:
        return []
    field = next((name for name, query in QUERIES.items() if query == promql), "")
    return per_instance(FIGURES.get(field, {}))


def _strict_json(text: str) -> Any:
    """JSON as the standard has it: NaN and Infinity are not JSON."""
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def _cells(line: str) -> dict[str, str]:
    """A --once table row's cells by column."""
    return dict(zip(COLUMNS, re.split(r" {2,}", line.strip()), strict=True))


def test_a_non_finite_value_is_na_in_its_own_cell_in_the_table_and_null_in_json(
        capsys: pytest.CaptureFixture[str]) -> None:
    with http_server(prometheus_api(_answers)) as prom:
        assert main(["--fleet", prom.url, "--once"]) == 0
        table = capsys.readouterr().out
        assert main(["--fleet", prom.url, "--once", "--json"]) == 0
        document = _strict_json(capsys.readouterr().out)
    rows = {line.split()[0]: _cells(line) for line in table.splitlines()[2:]}
    assert {k: rows["alpha"][k] for k in ("GPUS", "UTIL", "GPU MEM", "TRAINERS", "WORST WAIT",
                                          "MEMBW")} == {
        "GPUS": "4", "UTIL": "n/a", "GPU MEM": "n/a / 8.0 GiB", "TRAINERS": "n/a (1 probed)",
        "WORST WAIT": "n/a", "MEMBW": "20%"}
    assert {k: rows["beta"][k] for k in ("GPUS", "UTIL", "GPU MEM", "TRAINERS", "WORST WAIT",
                                         "MEMBW")} == {
        "GPUS": "2", "UTIL": "50%", "GPU MEM": "1.0 GiB / 8.0 GiB", "TRAINERS": "1 (1 probed)",
        "WORST WAIT": "25%", "MEMBW": "n/a"}
    assert document["error"] is None
    for host in document["hosts"]:
        instance = host["instance"]
        for field, values in FIGURES.items():
            expected = None if field in NOT_FINITE[instance] else float(values[instance])
            assert host[field] == expected, (instance, field)


def test_a_non_finite_value_leaves_every_other_host_and_cell_on_screen() -> None:
    with http_server(prometheus_api(_answers)) as prom:
        report = FleetSource(prom.url).sample(detail=A)
    assert report.error is None and {h.instance for h in report.hosts} == {A, B}
    hosts = {h.instance: h for h in report.hosts}
    columns = fleet_columns(160)
    row_a, row_b = ("".join(t for t, _ in fleet_row_line(hosts[i], columns, 160, False))
                    for i in (A, B))
    assert "n/a" in row_a and "4" in row_a and "20%" not in row_a.split("n/a", 1)[0]
    assert "50%" in row_b and "25%" in row_b
    detail = report.detail
    assert detail is not None
    assert [(g.index, g.util_ratio, g.memory_used_bytes) for g in detail.gpus] == [
        ("0", None, None), ("1", 0.5, None)]
    (trainer,) = detail.trainers
    assert (trainer.workers, trainer.data_wait_ratio) == (None, 0.3)
    shown = "\n".join("".join(t for t, _ in line)
                      for line in host_lines(A, hosts[A], detail, 120))
    assert "data wait 30%" in shown and " 50%" in shown and "n/a" in shown


def _drip(headers_too: bool) -> Respond:
    """An answer written one byte at a time (after the headers, or from the first byte),
    for DRIP_FOR_S at most."""
    def respond(path: str, wfile: BinaryIO) -> None:
        body = api_body({"resultType": "vector", "result": []})
        start = head("200 OK", [("Content-Type", "application/json"),
                                ("Content-Length", str(len(body)))])
        if not headers_too:
            wfile.write(start)
        stop = time.monotonic() + DRIP_FOR_S
        for byte in (start + body if headers_too else body):
            if time.monotonic() > stop:
                return
            wfile.write(bytes([byte]))
            time.sleep(DRIP_EVERY_S)

    return respond


@pytest.mark.parametrize("headers_too", [False, True], ids=["body", "headers"])
def test_a_dripping_prometheus_is_given_up_at_one_deadline_for_the_whole_request(
        headers_too: bool) -> None:
    with http_server(_drip(headers_too)) as prom:
        with pytest.raises(FleetError) as caught:
            PrometheusClient(prom.url, timeout_s=DEADLINE_S).query("up")
        assert str(caught.value) == f"Prometheus at {prom.url} did not answer within 1 s"
        assert prom.hung_up.wait(DRIP_FOR_S), "the client read on past its deadline"


def test_once_gives_up_on_a_dripping_prometheus_with_one_line_and_exit_2() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with http_server(_drip(headers_too=False)) as prom:
        done = subprocess.run(
            [sys.executable, "-m", "gputop", "--fleet", prom.url, "--once",
             "--fleet-timeout", f"{DEADLINE_S:g}"],
            capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"gputop: Prometheus at {prom.url} did not answer within 1 s\n"


def test_a_prometheus_that_turns_to_a_drip_leaves_the_last_hosts_marked_stale() -> None:
    dripping = threading.Event()
    answering, drip = prometheus_api(_answers), _drip(headers_too=False)

    def respond(path: str, wfile: BinaryIO) -> None:
        (drip if dripping.is_set() else answering)(path, wfile)

    with http_server(respond) as prom:
        client = PrometheusClient(prom.url, timeout_s=DEADLINE_S)
        sampler = FleetSampler(FleetSource(prom.url, client), ProcHostSource())
        good = sampler.sample()
        dripping.set()
        late = sampler.sample().fleet
    assert good.fleet is not None and late is not None
    assert late.error == f"Prometheus at {prom.url} did not answer within 1 s"
    assert (late.hosts, late.stale_from) == (good.fleet.hosts, good.time)
    title = fleet_title_lines(late, 200, 15.0, now=good.time + 42)
    assert "stale: the hosts below are 42 s old" in "".join(t for t, _ in title[0])
    assert late.error in "".join(t for t, _ in title[1])


def _endless(declared: bool) -> Respond:
    """An answer of ENDLESS_BYTES, its length declared or not, streamed a chunk at a time."""
    def respond(path: str, wfile: BinaryIO) -> None:
        length = [("Content-Length", str(ENDLESS_BYTES))] if declared else []
        wfile.write(head("200 OK", [("Content-Type", "application/json"), *length]))
        chunk = b" " * (1 << 20)
        for _ in range(ENDLESS_BYTES // len(chunk)):
            wfile.write(chunk)

    return respond


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "streamed"])
def test_an_answer_over_the_cap_is_refused_in_one_line(declared: bool) -> None:
    with http_server(_endless(declared)) as prom:
        with pytest.raises(FleetError) as caught:
            PrometheusClient(prom.url).query("up")
        assert str(caught.value) == (f"Prometheus at {prom.url} answered more than "
                                     f"{fleet.ANSWER_CAP_BYTES >> 20} MiB to 'up': refused")
        assert prom.hung_up.wait(60), "the client read the whole answer"


def _peak_rss_kib(url: str) -> int:
    """The peak RSS of a fresh Python that asks `url` one query."""
    done = subprocess.run([sys.executable, "-c", RSS_SCRIPT, url], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          timeout=120, check=True)
    return int(done.stdout.split()[-1])


def test_the_client_holds_no_more_than_the_cap_of_an_endless_answer() -> None:
    with http_server(prometheus_api(_answers)) as small:
        baseline = _peak_rss_kib(small.url)
    with http_server(_endless(declared=False)) as endless:
        grown = _peak_rss_kib(endless.url) - baseline
    assert grown < 2 * fleet.ANSWER_CAP_BYTES // 1024, "the client held more than the cap allows"


def test_a_redirect_is_refused_in_one_line_and_never_followed() -> None:
    with http_server(prometheus_api(_answers)) as elsewhere:
        def redirect(path: str, wfile: BinaryIO) -> None:
            wfile.write(head("302 Found", [("Location", elsewhere.url + path),
                                           ("Content-Length", "0")]))

        with http_server(redirect) as prom, pytest.raises(FleetError) as caught:
            PrometheusClient(prom.url).query("up")
    message = str(caught.value)
    assert message.startswith(f"Prometheus at {prom.url} redirected 'up' to ")
    assert "HTTP 302" in message and elsewhere.url in message and "\n" not in message
    assert elsewhere.asked == []


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("prometheus") is None,
                    reason="prometheus is not installed (.ci/run installs Debian's package)")
def test_a_real_prometheus_that_scraped_nan_and_infinities_shows_them_as_na(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def exposition(path: str, wfile: BinaryIO) -> None:
        wfile.write(head("200 OK", [("Content-Type", "text/plain; version=0.0.4"),
                                    ("Content-Length", str(len(EXPOSITION)))]) + EXPOSITION)

    with http_server(exposition) as target:
        target_name = f"127.0.0.1:{target.port}"
        with prometheus(tmp_path, [target_name], interval_s=1.0) as server:
            source = FleetSource(server.base)

            def scraped() -> FleetHost | None:
                return next((h for h in source.sample().hosts if h.up and h.gpus), None)

            host = wait_until(scraped, 60, what="the NaN target in the fleet")
            assert main(["--fleet", server.base, "--once", "--json"]) == 0
            (shown,) = _strict_json(capsys.readouterr().out)["hosts"]
            assert main(["--fleet", server.base, "--once"]) == 0
            row = _cells(capsys.readouterr().out.splitlines()[2])
            detail = source.sample(detail=target_name).detail
    assert (host.hostname, host.gpus) == ("nanhost", 1)
    assert {k: shown[k] for k in ("gpus", "gpu_util_ratio", "gpu_memory_used_bytes",
                                  "gpu_memory_total_bytes", "memory_pressure_ratio")} == {
        "gpus": 1, "gpu_util_ratio": None, "gpu_memory_used_bytes": float(1 << 30),
        "gpu_memory_total_bytes": None, "memory_pressure_ratio": None}
    assert (row["UTIL"], row["GPU MEM"], row["MEMBW"]) == ("n/a", "1.0 GiB / n/a", "n/a")
    assert detail is not None
    assert [(g.util_ratio, g.memory_used_bytes, g.memory_total_bytes)
            for g in detail.gpus] == [(None, float(1 << 30), None)]

