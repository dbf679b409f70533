"""The fleet: every `gputop serve` target a Prometheus server scrapes, read back through
PromQL over Prometheus's HTTP API (`/api/v1/query`), one row per target.

The gputop jobs are the jobs (scrape pools) in which at least one target exported
`gputop_exporter_info` within the last hour; while no target of any job has, the jobs
whose name holds "gputop". The fleet is every target of those jobs that Prometheus knows
(its `up` series and its active targets, `/api/v1/targets`), and every instance that
exported `gputop_exporter_info` within the last hour. `up` says whether the last scrape of
each worked. A target that is down keeps its row, marked down, with no figures: its series
are stale, and stale is not zero. A target whose `up` series went stale (it left
Prometheus's service discovery) is down too; one that never answered is down with
Prometheus's last error for it.

An answer is input like any other: each request has one deadline for all of it (connect,
headers, body), an answer larger than ANSWER_CAP_BYTES is refused unread, a redirect is
refused, never followed, and a value that is NaN or infinite is no figure (None, n/a).
"""

from __future__ import annotations

import http.client
import io
import json
import math
import re
import socket
import ssl
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any, cast

from gputop.core.model import FleetHost, FleetReport, Frame, GpuReport, HostSample
from gputop.core.printable import printable
from gputop.sources.fleet_detail import STRAGGLERS_ACROSS_HOSTS, host_detail

TIMEOUT_S = 10.0  # one deadline for a whole request: connect, headers and body
ANSWER_CAP_BYTES = 32 << 20  # a larger answer is refused unread
_CHUNK_BYTES = 1 << 16
TARGETS = "last_over_time(gputop_exporter_info[1h])"
JOB_WORD = "gputop"  # names the gputop jobs while no target has answered
SCRAPE_ERROR_CHARS = 300  # Prometheus's last error for a target, cut to this
HEALTHS = ("up", "down", "unknown")
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
    # verdict="…" since the enum gauges; gputop_trainer_verdict="…" from older exporters
    "data_bound_trainers": ('count by (instance) (gputop_trainer_verdict{verdict="data-bound"} '
                            '== 1 or gputop_trainer_verdict'
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
_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)")
_GLOBAL_INTERVAL = re.compile(r"^global:\n(?:[ \t]+.*\n)*?[ \t]+scrape_interval: *(\S+)", re.M)


class FleetError(Exception):
    """Prometheus could not be asked, or answered with an error."""


class AnswerRefused(FleetError):
    """Prometheus's answer is refused as input: too slow, too large, or a redirect."""


class _Deadline:
    """The moment a request must be done by."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left; TimeoutError once none are."""
        left = self.at - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        return left


class _DeadlineReader(io.RawIOBase):
    """A socket's bytes, each read waiting only as long as the deadline leaves."""

    def __init__(self, sock: socket.socket, deadline: _Deadline) -> None:
        super().__init__()
        self.sock, self.deadline = sock, deadline

    def readable(self) -> bool:
        """It is read from."""
        return True

    def readinto(self, buffer: Any) -> int:
        """What arrives before the deadline, at most `buffer`'s length."""
        self.sock.settimeout(self.deadline.left())
        return self.sock.recv_into(buffer)


class _DeadlineSocket:
    """What http.client asks of its socket (sendall, makefile, close), every send and read
    bounded by one deadline; the caller closes the real socket."""

    def __init__(self, sock: socket.socket, deadline: _Deadline) -> None:
        self.sock, self.deadline = sock, deadline

    def sendall(self, data: bytes) -> None:
        """Send all of `data` before the deadline."""
        self.sock.settimeout(self.deadline.left())
        self.sock.sendall(data)

    def makefile(self, mode: str) -> io.BufferedReader:
        """The answer's bytes, buffered."""
        return io.BufferedReader(_DeadlineReader(self.sock, self.deadline))

    def close(self) -> None:
        """Left to the caller, who owns the socket."""


class PrometheusClient:
    """Instant queries (and status reads) against one Prometheus server's HTTP API. Each
    request has one deadline for all of it, its answer a size cap; no redirect is followed."""

    def __init__(self, url: str, timeout_s: float = TIMEOUT_S,
                 cap_bytes: int = ANSWER_CAP_BYTES) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.cap_bytes = cap_bytes
        self._server = urllib.parse.urlsplit(self.url)
        self._tls: ssl.SSLContext | None = None

    def get(self, path: str, params: dict[str, str] | None = None, what: str = "") -> Any:
        """The `data` of an API answer; anything else is a FleetError in one line."""
        target = self._server.path + path + ("?" + urllib.parse.urlencode(params)
                                             if params else "")
        what = what or path
        try:
            body = json.loads(self._fetch(target, what, _Deadline(self.timeout_s)))
        except TimeoutError:
            raise AnswerRefused(f"Prometheus at {self.url} did not answer within "
                                f"{self.timeout_s:g} s") from None
        except (OSError, ValueError, RecursionError, http.client.HTTPException) as exc:
            raise FleetError(f"cannot query {self.url}: {exc}") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            raise FleetError(f"{self.url} refused {what!r}: {str(body)[:200]}")
        return body.get("data")

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The result vector of an instant query."""
        data = self.get("/api/v1/query", {"query": promql}, what=promql)
        result = data.get("result", []) if isinstance(data, dict) else []
        return result if isinstance(result, list) else []

    def _fetch(self, target: str, what: str, deadline: _Deadline) -> bytearray:
        """The body of a 200 answer to GET `target`, all of it read before `deadline`."""
        sock = self._connect(deadline)
        try:
            # duck-typed: http.client only sends through it and reads through its makefile()
            bounded = cast(socket.socket, _DeadlineSocket(sock, deadline))
            # it never connects: the socket is handed to it, and the Host header named
            connection = http.client.HTTPConnection(self._server.hostname or "", 80)
            connection.sock = bounded
            connection.request("GET", target, headers={
                "Host": self._server.netloc.rpartition("@")[2], "Accept": "application/json"})
            response = http.client.HTTPResponse(bounded, method="GET")
            response.begin()
            self._check_status(response, what)
            return self._body(response, what)
        finally:
            sock.close()

    def _connect(self, deadline: _Deadline) -> socket.socket:
        """A socket to the server, TLS for https, connected before `deadline`."""
        https = self._server.scheme == "https"
        host = self._server.hostname or ""
        sock = socket.create_connection((host, self._server.port or (443 if https else 80)),
                                        timeout=deadline.left())
        if not https:
            return sock
        try:
            if self._tls is None:
                self._tls = ssl.create_default_context()
            sock.settimeout(deadline.left())  # what the whole handshake may take
            return self._tls.wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise

    def _check_status(self, response: http.client.HTTPResponse, what: str) -> None:
        """Refuse a redirect, and any answer but 200, in one line."""
        if 300 <= response.status < 400:
            location = printable(str(response.getheader("Location", "")))[:200]
            raise AnswerRefused(f"Prometheus at {self.url} redirected {what!r} to {location!r} "
                                f"(HTTP {response.status}): refused, its API never redirects; "
                                "give --fleet the URL it names if you trust it")
        if response.status != 200:
            raise FleetError(f"{self.url} answered HTTP {response.status} to {what!r}")

    def _body(self, response: http.client.HTTPResponse, what: str) -> bytearray:
        """The whole body; AnswerRefused once it is larger than the cap."""
        if response.length is not None and response.length > self.cap_bytes:
            raise self._too_large(what)
        body = bytearray()
        while chunk := response.read(_CHUNK_BYTES):
            body += chunk
            if len(body) > self.cap_bytes:
                raise self._too_large(what)
        return body

    def _too_large(self, what: str) -> AnswerRefused:
        return AnswerRefused(f"Prometheus at {self.url} answered more than "
                             f"{self.cap_bytes >> 20} MiB to {what!r}: refused")


def _labels(item: object, key: str = "metric") -> dict[str, str]:
    """The string labels under `key` of a result series or a target ({} when malformed)."""
    labels = item.get(key) if isinstance(item, dict) else None
    if not isinstance(labels, dict):
        return {}
    return {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}


def _by_instance(result: list[dict[str, Any]]) -> dict[str, float | None]:
    """Each instance's value; None where it is NaN or infinite (no figure to show)."""
    values: dict[str, float | None] = {}
    for series in result:
        try:
            value = float(series["value"][1])
            values[str(series["metric"]["instance"])] = value if math.isfinite(value) else None
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
            shown = (host_detail(self.client.query, detail) if detail is not None
                     and any(h.instance == detail and h.up for h in hosts) else None)
            return FleetReport(self.url, hosts, scrape_interval_s=self._interval_s,
                               detail=shown)
        except FleetError as exc:
            return FleetReport(self.url, error=printable(str(exc)),
                               scrape_interval_s=self._interval_s,
                               answer_refused=isinstance(exc, AnswerRefused))

    def _hosts(self) -> list[FleetHost]:
        """Every target of the gputop jobs, and every instance that answered in the last hour
        (see the module's docstring)."""
        seen: dict[str, dict[str, str]] = {}
        for series in self.client.query(TARGETS):
            labels = _labels(series)
            if "instance" in labels:
                seen[labels["instance"]] = labels
        up_result = self.client.query("up")
        up_series = [_labels(s) for s in up_result]
        active = self._active_targets()
        jobs = gputop_jobs({labels.get("job", "") for labels in seen.values()},
                           [labels.get("job", "") for labels in up_series]
                           + [_labels(t, "labels").get("job", "") for t in active])
        scraped = {labels["instance"]: t for t in active
                   if _in_jobs(labels := _labels(t, "labels"), jobs)}
        if self._interval_s is None:
            self._interval_s = self._scrape_interval(scraped.values())
        listed = dict.fromkeys([*seen, *(labels["instance"] for labels in up_series
                                         if _in_jobs(labels, jobs)), *scraped])
        up = _by_instance(up_result)
        figures = {name: _by_instance(self.client.query(q)) for name, q in QUERIES.items()}
        return [_host(instance, seen.get(instance), up.get(instance) == 1.0,
                      scraped.get(instance, {}), figures) for instance in listed]

    def _active_targets(self) -> list[dict[str, Any]]:
        """Prometheus's active targets, as its targets API lists them."""
        data = self.client.get("/api/v1/targets", {"state": "active"})
        targets = data.get("activeTargets", []) if isinstance(data, dict) else []
        return [t for t in targets if isinstance(t, dict)] if isinstance(targets, list) else []

    def _scrape_interval(self, targets: Iterable[dict[str, Any]]) -> float | None:
        """How often Prometheus scrapes the gputop targets (the shortest, if they differ),
        from its targets; else its global scrape_interval; None when it says neither."""
        known = [s for s in (parse_duration(t.get("scrapeInterval")) for t in targets)
                 if s is not None]
        if known:
            return min(known)
        config = self.client.get("/api/v1/status/config")
        found = _GLOBAL_INTERVAL.search(str(config.get("yaml", "")) if isinstance(config, dict)
                                        else "")
        return parse_duration(found.group(1)) if found else None


def _in_jobs(labels: dict[str, str], jobs: set[str]) -> bool:
    """Whether a target (its labels) has an instance and belongs to one of `jobs`."""
    return "instance" in labels and labels.get("job", "") in jobs


def gputop_jobs(answered: set[str], known: Iterable[str]) -> set[str]:
    """The jobs gputop serves in: those of the targets that `answered` (exported
    gputop_exporter_info within the last hour); while none has, the `known` jobs whose name
    holds JOB_WORD ("gputop", as docs/prometheus.md names it)."""
    return answered or {job for job in known if JOB_WORD in job.lower()}


def _host(instance: str, seen: dict[str, str] | None, up: bool, target: dict[str, Any],
          figures: dict[str, dict[str, float | None]]) -> FleetHost:
    """One target: its figures when up, else none; what Prometheus says of its scrapes."""
    labels = seen or {}
    health = target.get("health")
    error = target.get("lastError")
    host = FleetHost(
        instance=printable(instance),
        hostname=printable(labels.get("Hostname", instance)),
        up=up,
        simulated=labels.get("simulated") == "true",
        seen=seen is not None,
        scrape_health=health if health in HEALTHS else None,
        last_scrape=parse_time(target.get("lastScrape")),
        scrape_error=bounded(error) if isinstance(error, str) and error else None,
    )
    return replace(host, **_figures(instance, figures)) if host.up else host


def bounded(text: str, chars: int = SCRAPE_ERROR_CHARS) -> str:
    """Outside `text` made printable and cut to `chars` (… marks a cut)."""
    shown = printable(text[:chars * 2])
    return shown if len(shown) <= chars else shown[:chars - 1] + "…"


def parse_time(text: object) -> float | None:
    """Unix time of an RFC 3339 time as Prometheus writes it ("2026-12-07T04:51:55.1Z");
    None if it is not one, or is before 1970 (Prometheus's zero time: never)."""
    if not isinstance(text, str) or len(text) > 40:
        return None
    found = _RFC3339.fullmatch(text)
    if found is None:
        return None
    stamp, fraction, zone = found.groups()
    try:
        seconds = datetime.fromisoformat(stamp + ("+00:00" if zone == "Z" else zone)).timestamp()
    except (ValueError, OverflowError):
        return None
    seconds += float(f"0.{fraction}") if fraction else 0.0
    return seconds if seconds > 0 else None


def parse_duration(text: object) -> float | None:
    """Seconds in a Prometheus duration ("15s", "1m30s", "500ms"); None if it is not one."""
    if not isinstance(text, str) or not text:
        return None
    parts = _DURATION.findall(text)
    if "".join(number + unit for number, unit in parts) != text:
        return None
    seconds = sum(float(number) * _UNIT_S[unit] for number, unit in parts)
    return seconds if 0 < seconds < math.inf else None


def _figures(instance: str, figures: dict[str, dict[str, float | None]]) -> dict[str, Any]:
    """The instance's figures; a count no series answered for is 0, a value is None; a
    value that is not finite is None (n/a), in its own field alone."""
    out: dict[str, Any] = {}
    for name, values in figures.items():
        value = values.get(instance)
        if name in COUNTS and instance not in values:
            out[name] = 0
        elif name in COUNTS:
            out[name] = None if value is None else int(value)
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
