"""The fleet: every `gputop serve` target a Prometheus server scrapes, read back through
PromQL over Prometheus's HTTP API (`/api/v1/query`), one row per target.

Targets are the instances that exported `gputop_exporter_info` within the last hour; `up`
says whether the last scrape of each worked. A target that is down keeps its row, marked
down, with no figures: its series are stale, and stale is not zero. A target whose `up`
series went stale (it left Prometheus's service discovery) is down too.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from gputop.model import FleetHost, FleetReport, Frame, GpuReport, HostSample
from gputop.printable import printable
from gputop.sources.fleet_detail import STRAGGLERS_ACROSS_HOSTS, host_detail

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
    # the rank its own exporter named, or one judged against its job's ranks on other hosts
    "stragglers": ("count by (instance) (max by (instance, trainer) "
                   "(gputop_trainer_input_straggler == 1) or max by (instance, trainer) "
                   f"({STRAGGLERS_ACROSS_HOSTS}))"),
    "memory_pressure_ratio": "max by (instance) (gputop_host_memory_bandwidth_pressure_ratio)",
    "advice": "count by (instance) (gputop_advice_active)",
}
COUNTS = {"gpus", "idle_gpus_holding_memory", "trainers", "probed_trainers",
          "data_bound_trainers", "stragglers", "advice"}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0,
           "y": 31536000.0}
_GLOBAL_INTERVAL = re.compile(r"^global:\n(?:[ \t]+.*\n)*?[ \t]+scrape_interval: *(\S+)", re.M)


class FleetError(Exception):
    """Prometheus could not be asked, or answered with an error."""


class PrometheusClient:
    """Instant queries (and status reads) against one Prometheus server's HTTP API."""

    def __init__(self, url: str, timeout_s: float = TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def get(self, path: str, params: dict[str, str] | None = None, what: str = "") -> Any:
        """The `data` of an API answer; anything else is a FleetError in one line."""
        address = f"{self.url}{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
        what = what or path
        try:
            with urllib.request.urlopen(address, timeout=self.timeout_s) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            raise FleetError(f"{self.url} answered HTTP {exc.code} to {what!r}") from None
        except (OSError, ValueError) as exc:
            raise FleetError(f"cannot query {self.url}: {exc}") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            raise FleetError(f"{self.url} refused {what!r}: {str(body)[:200]}")
        return body.get("data")

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The result vector of an instant query."""
        data = self.get("/api/v1/query", {"query": promql}, what=promql)
        result = data.get("result", []) if isinstance(data, dict) else []
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
    """Samples the fleet: one FleetHost per gputop target, worst first; on request, the
    detail of one host; and Prometheus's scrape interval, read once."""

    def __init__(self, url: str, client: PrometheusClient | None = None) -> None:
        self.url = url
        self.client = client or PrometheusClient(url)
        self._interval_s: float | None = None

    def sample(self, detail: str | None = None) -> FleetReport:
        """The fleet now (with host `detail`'s GPUs, trainers and advice when one is named);
        a Prometheus that cannot be asked gives a report with its error."""
        try:
            hosts = tuple(sorted(self._hosts(), key=_worst_first))
            if self._interval_s is None:
                self._interval_s = self._scrape_interval({h.instance for h in hosts})
            shown = (host_detail(self.client.query, detail) if detail is not None
                     and any(h.instance == detail and h.up for h in hosts) else None)
            return FleetReport(self.url, hosts, scrape_interval_s=self._interval_s,
                               detail=shown)
        except FleetError as exc:
            return FleetReport(self.url, error=str(exc), scrape_interval_s=self._interval_s)

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

    def _scrape_interval(self, instances: Iterable[str]) -> float | None:
        """How often Prometheus scrapes the gputop targets (the shortest, if they differ),
        from its targets; else its global scrape_interval; None when it says neither."""
        wanted = set(instances)
        data = self.client.get("/api/v1/targets", {"state": "active"})
        targets = data.get("activeTargets", []) if isinstance(data, dict) else []
        intervals = [parse_duration(t.get("scrapeInterval")) for t in targets
                     if isinstance(t, dict) and t.get("labels", {}).get("instance") in wanted]
        known = [s for s in intervals if s is not None]
        if known:
            return min(known)
        config = self.client.get("/api/v1/status/config")
        found = _GLOBAL_INTERVAL.search(str(config.get("yaml", "")) if isinstance(config, dict)
                                        else "")
        return parse_duration(found.group(1)) if found else None


def parse_duration(text: object) -> float | None:
    """Seconds in a Prometheus duration ("15s", "1m30s", "500ms"); None if it is not one."""
    if not isinstance(text, str) or not text:
        return None
    parts = _DURATION.findall(text)
    if "".join(number + unit for number, unit in parts) != text:
        return None
    seconds = sum(float(number) * _UNIT_S[unit] for number, unit in parts)
    return seconds if seconds > 0 else None


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


def fleet_frame(report: FleetReport, local: HostSample, interval_s: float,
                asked: float | None = None) -> Frame:
    """A Frame that carries the fleet (and this machine's host facts for the header), timed
    when Prometheus was `asked` (default: now)."""
    return Frame(time=time.time() if asked is None else asked, interval_s=interval_s,
                 host=local,
                 gpu=GpuReport(source="none", note="fleet view: GPUs are per host below"),
                 processes=(), trainers=(), fleet=report)
