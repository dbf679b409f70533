"""The fleet (`gputop --prometheus URL --once [--json]`) as a text table or a JSON document:
one row per host, worst first; a host that is down says so and shows no figures, and under
the table, what Prometheus last said when it scraped it."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from gputop.core import fmt
from gputop.core.model import FleetHost, FleetReport

SCHEMA = "gputop.fleet/1"
COLUMNS = ("HOST", "STATE", "GPUS", "UTIL", "GPU MEM", "IDLE+MEM", "TRAINERS", "DATA-BOUND",
           "WORST WAIT", "STRAGGLERS", "MEMBW", "ADVICE")


def fleet_json(report: FleetReport) -> dict[str, Any]:
    """The report as JSON-ready data (ratios 0..1, bytes; null where down or unknown)."""
    return {"schema": SCHEMA, "url": report.url, "error": report.error,
            "hosts": [asdict(h) for h in report.hosts]}


def dumps(report: FleetReport) -> str:
    """The report as one JSON text."""
    return json.dumps(fleet_json(report), indent=2, allow_nan=False)


def render(report: FleetReport) -> str:
    """The report as a table."""
    if report.error is not None:
        return f"fleet from {report.url}: {report.error}\n"
    down = sum(1 for h in report.hosts if not h.up)
    head = (f"fleet from {report.url}: {len(report.hosts)} hosts"
            + (f", {down} down" if down else "") + ", worst first\n")
    if not report.hosts:
        return head + "no gputop serve target in the last hour\n"
    rows = [COLUMNS, *(_row(h) for h in report.hosts)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    return head + "\n".join([*lines, *_down_notes(report.hosts)]) + "\n"


def _down_notes(hosts: tuple[FleetHost, ...]) -> list[str]:
    """Why each down host is down, as Prometheus says, after a blank line."""
    notes = [f"{h.instance}: {down_reason(h)}" for h in hosts if not h.up]
    return ["", *notes] if notes else []


def down_reason(host: FleetHost) -> str:
    """A down host: whether it ever answered (within the last hour), and Prometheus's last
    error for it."""
    said = (f"Prometheus's last scrape failed: {host.scrape_error}" if host.scrape_error
            else "Prometheus names no error (scrapes fail, or the target is gone)")
    return ("DOWN, never answered in the last hour; " if not host.seen else "DOWN; ") + said


def _row(h: FleetHost) -> tuple[str, ...]:
    name = (h.instance if h.hostname == h.instance else f"{h.hostname} ({h.instance})") + (
        " SIMULATED" if h.simulated else "")
    if not h.up:
        return (name, "DOWN", *("—",) * (len(COLUMNS) - 2))
    return (
        name, "up", _count(h.gpus), _ratio(h.gpu_util_ratio),
        f"{fmt.size(h.gpu_memory_used_bytes)} / {fmt.size(h.gpu_memory_total_bytes)}",
        _count(h.idle_gpus_holding_memory), f"{_count(h.trainers)} ({_count(h.probed_trainers)}"
        " probed)", _count(h.data_bound_trainers), _ratio(h.worst_data_wait_ratio),
        _count(h.stragglers), _ratio(h.memory_pressure_ratio), _count(h.advice),
    )


def _ratio(value: float | None) -> str:
    return fmt.percent(None if value is None else 100 * value)


def _count(value: int | None) -> str:
    return fmt.NA if value is None else str(value)
