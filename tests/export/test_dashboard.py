"""The Grafana dashboard (dashboards/gputop.json): every query in it names only metrics a real
`gputop serve --demo` exposes, and a real Prometheus scraping that exporter answers each one
(valid PromQL), with data for every panel that a demo trainer fills."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.probe import ROOT
from tests.helpers.prometheus import prometheus, serve, serve_env, wait_until

DASHBOARD = ROOT / "dashboards" / "gputop.json"
METRIC = re.compile(r"\bgputop_[a-z0-9_]+")
TYPED = re.compile(r"^# TYPE (gputop_\w+) (?:gauge|counter)$", re.M)
# Grafana's variables, as a query over all hosts would read them
VARIABLES = {"$__rate_interval": "1m", "$host": ".*"}
# what a healthy demo need not show: host code's share (the demo's steps may not split it
# out), failing sources, advice (the scenario decides)
MAY_BE_EMPTY = ("gputop_trainer_host_ratio", "gputop_source_errors", "gputop_advice_active")


def _dashboard() -> dict[str, object]:
    return dict(json.loads(DASHBOARD.read_text()))


def _queries() -> list[str]:
    """Every PromQL expression of the dashboard: its panels' targets and its variables'."""
    board = _dashboard()
    panels = board["panels"]
    assert isinstance(panels, list)
    exprs = [t["expr"] for p in panels for t in p.get("targets", ())]
    templating = board["templating"]
    assert isinstance(templating, dict)
    for variable in templating["list"]:
        if variable["type"] == "query":
            inner = re.fullmatch(r"label_values\((.+), *\w+\)", variable["query"]["query"])
            assert inner is not None, variable
            exprs.append(inner.group(1))
    return exprs


def _concrete(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr


def test_the_dashboard_covers_gpus_step_time_verdicts_shares_and_advice() -> None:
    names = {name for expr in _queries() for name in METRIC.findall(expr)}
    assert {"gputop_gpu_utilization_ratio", "gputop_gpu_memory_used_bytes",
            "gputop_trainer_mean_step_seconds", "gputop_trainer_verdict",
            "gputop_trainer_state", "gputop_trainer_data_wait_ratio",
            "gputop_trainer_host_ratio", "gputop_advice_active"} <= names
    kinds = {p["type"] for p in _dashboard()["panels"]}  # type: ignore[attr-defined]
    assert "state-timeline" in kinds


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("prometheus") is None,
                    reason="prometheus is not installed (.ci/run installs Debian's package)")
def test_every_query_names_exported_metrics_and_prometheus_answers_it(tmp_path: Path) -> None:
    pytest.importorskip("torch")  # the demo trainer
    args = ("--listen", "127.0.0.1:0", "--demo", "--gpus", "2", "--membw", "off",
            "--interval", "0.5")
    with serve(args, serve_env(tmp_path)) as exporter:
        def with_step_time() -> str | None:
            text = exporter.scrape()
            return text if "gputop_trainer_mean_step_seconds{" in text else None

        text = wait_until(with_step_time, 180, what="the demo trainer's step time in a scrape")
        exposed = {s.name for family in text_string_to_metric_families(text)
                   for s in family.samples} | set(TYPED.findall(text))  # no samples: no advice
        queries = _queries()
        unknown = {n for expr in queries for n in METRIC.findall(expr)} - exposed
        assert unknown == set(), "the dashboard queries metrics gputop does not export"
        with prometheus(tmp_path, [exporter.target], interval_s=1.0) as server:
            for expr in queries:
                concrete = _concrete(expr)
                answer = server.query(concrete)  # fails unless Prometheus says "success"
                if answer or any(name in expr for name in MAY_BE_EMPTY):
                    continue
                wait_until(lambda q=concrete: server.query(q), 120,  # type: ignore[misc]
                           what=f"data for {concrete}")
