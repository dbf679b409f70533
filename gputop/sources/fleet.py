"""The fleet: every `gputop serve` target a Prometheus server scrapes, read back through
PromQL over Prometheus's HTTP API (`/api/v1/query`), one row per target.

Targets are the instances that exported `gputop_exporter_info` within the last hour; `up`
says whether the last scrape of each worked. A target that is down keeps its row, marked
down, with no figures: its series are stale, and stale is not zero.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import replace
from typing import Any

from gputop.model import FleetHost, FleetReport, Frame, GpuReport, HostSample
from gputop.printable import printable

TIMEOUT_S = 10.0
TARGETS = "last_over_time(gputop_exporter_info[1h])"
IDLE_UTIL_RATIO = 0.05
HELD_BYTES = 1 << 30
# FleetHost field -> PromQL giving one value per instance
QUERIES: dict[str, str] = {
    "gpus": "count by (instance) (gputop_gpu_utilization_ratio)",
    "gpu_util_ratio": "avg by (instance) (gputop_gpu_utilization_ratio)",
    "gpu_memory_used_bytes": "sum by (instance) (gputop_gpu_memory_used_bytes)",
    "gpu_memory_total_bytes": "sum by (instance) (gputop_gpu_memory_total_bytes)",
    "idle_gpus_holding_memory": (
        f"count by (instance) (gputop_gpu_utilization_ratio < {IDLE_UTIL_RATIO} "
        f"and gputop_gpu_memory_used_bytes > {HELD_BYTES})"),
    "trainers": "count by (instance) (gputop_trainer_info)",
    "probed_trainers": 'count by (instance) (gputop_trainer_info{probe="true"})',
    "data_bound_trainers": ('count by (instance) (gputop_trainer_verdict'
                            '{gputop_trainer_verdict="data-bound"} == 1)'),
    "worst_data_wait_ratio": "max by (instance) (gputop_trainer_data_wait_ratio)",
    "stragglers": "count by (instance) (gputop_trainer_input_straggler == 1)",
    "memory_pressure_ratio": "max by (instance) (gputop_host_memory_bandwidth_pressure_ratio)",
    "advice": "count by (instance) (gputop_advice_active)",
}
COUNTS = {"gpus", "idle_gpus_holding_memory", "trainers", "probed_trainers",
          "data_bound_trainers", "stragglers", "advice"}


class FleetError(Exception):
    """Prometheus could not be asked, or answered with an error."""


class PrometheusClient:
    """Instant queries against one Prometheus server's HTTP API."""

    def __init__(self, url: str, timeout_s: float = TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The result vector of an instant query."""
        address = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        try:
            with urllib.request.urlopen(address, timeout=self.timeout_s) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            raise FleetError(f"{self.url} answered HTTP {exc.code} to {promql!r}") from None
        except (OSError, ValueError) as exc:
            raise FleetError(f"cannot query {self.url}: {exc}") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            raise FleetError(f"{self.url} refused {promql!r}: {str(body)[:200]}")
        result = body.get("data", {}).get("result", [])
        return result if isinstance(result, list) else []


def _by_instance(result: list[dict[str, Any]]) -> dict[str, float]:
    values: dict[str, float] = {}
    for series in result:
        try:
            values[str(series["metric"]["instance"])] = float(series["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue  # a series without an instance or a value is none of ours
    return values


class FleetSource:
    """Samples the fleet: one FleetHost per gputop target, worst first."""

    def __init__(self, url: str, client: PrometheusClient | None = None) -> None:
        self.url = url
        self.client = client or PrometheusClient(url)

    def sample(self) -> FleetReport:
        """The fleet now; a Prometheus that cannot be asked gives a report with its error."""
        try:
            return FleetReport(self.url, tuple(sorted(self._hosts(), key=_worst_first)))
        except FleetError as exc:
            return FleetReport(self.url, error=str(exc))

    def _hosts(self) -> list[FleetHost]:
        targets = {}
        for series in self.client.query(TARGETS):
            labels = series.get("metric", {})
            instance = labels.get("instance")
            if isinstance(instance, str):
                targets[instance] = labels
        up = _by_instance(self.client.query("up"))
        figures = {name: _by_instance(self.client.query(q)) for name, q in QUERIES.items()}
        hosts = []
        for instance, labels in targets.items():
            host = FleetHost(
                instance=printable(instance),
                hostname=printable(str(labels.get("Hostname", instance))),
                up=up.get(instance) == 1.0,
                simulated=labels.get("simulated") == "true",
            )
            if host.up:
                host = replace(host, **_figures(instance, figures))
            hosts.append(host)
        return hosts


def _figures(instance: str, figures: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The instance's figures; a count no series answered for is 0, a value is None."""
    out: dict[str, Any] = {}
    for name, values in figures.items():
        value = values.get(instance)
        if name in COUNTS:
            out[name] = int(value) if value is not None else 0
        else:
            out[name] = value
    return out


def _worst_first(host: FleetHost) -> tuple[int, float, float, str]:
    return (-host.trouble, -(host.memory_pressure_ratio or 0.0),
            -(host.worst_data_wait_ratio or 0.0), host.hostname)


def fleet_frame(report: FleetReport, local: HostSample, interval_s: float) -> Frame:
    """A Frame that carries the fleet (and this machine's host facts for the header)."""
    return Frame(time=time.time(), interval_s=interval_s, host=local,
                 gpu=GpuReport(source="none", note="fleet view: GPUs are per host below"),
                 processes=(), trainers=(), fleet=report)
