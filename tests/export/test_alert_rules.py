"""The shipped alerting rules (gputop/export/alerts.yml): promtool accepts them, promtool's
rule unit tests (alerts_test.yml) prove each alert fires for its case and stays quiet for
the look-alikes, and the straggler-across-hosts alert is the rule the fleet view applies."""

from __future__ import annotations

import re
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import pytest

from gputop.sources import fleet_detail

RULES = Path(str(resources.files("gputop.export") / "alerts.yml"))
UNIT_TESTS = Path(__file__).resolve().parent / "alerts_test.yml"
RECORDED = "(gputop:trainer_data_wait_ratio:rendezvous)"
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool is not installed (.ci/run installs "
                                    "Debian's prometheus package)")


def _alerts() -> list[str]:
    return re.findall(r"^\s+- alert: (\w+)$", RULES.read_text(), re.M)


def _expr(alert: str) -> str:
    """The folded `expr` of `alert`, its lines joined."""
    block = RULES.read_text().split(f"- alert: {alert}\n", 1)[1]
    folded = re.search(r"expr: >-\n((?:\s{10}.*\n)+)", block)
    assert folded is not None, alert
    return " ".join(line.strip() for line in folded.group(1).splitlines())


@pytest.mark.slow
@needs_promtool
def test_promtool_accepts_the_shipped_rules() -> None:
    checked = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True,
                             text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 5 rules found" in checked.stdout


@pytest.mark.slow
@needs_promtool
def test_promtool_rule_unit_tests_prove_each_alert_fires_and_stays_quiet() -> None:
    tested = subprocess.run(["promtool", "test", "rules", str(UNIT_TESTS)],
                            capture_output=True, text=True, timeout=120)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    text = UNIT_TESTS.read_text()
    cases = re.findall(r"alertname: (\w+)\n\s+exp_alerts:( \[\])?", text)
    assert sorted(_alerts()) == sorted({name for name, _ in cases}) == sorted(
        ["GputopTrainerDataBound", "GputopGpuIdleWithMemoryHeld", "GputopInputStraggler",
         "GputopInputStragglerAcrossHosts"])
    for alert in _alerts():
        assert {bool(quiet) for name, quiet in cases if name == alert} == {True, False}, alert


def test_the_straggler_across_hosts_alert_is_the_rule_the_fleet_view_applies() -> None:
    alert = _expr("GputopInputStragglerAcrossHosts")
    ranks = re.search(r"record: gputop:trainer_data_wait_ratio:rendezvous\n\s+expr: >-\n"
                      r"((?:\s{10}.*\n)+)", RULES.read_text())
    assert ranks is not None
    recorded = "(" + " ".join(line.strip() for line in ranks.group(1).splitlines()) + ")"
    as_fleet = alert.replace(RECORDED, recorded)
    assert re.sub(r"\s+", "", as_fleet) == re.sub(
        r"\s+", "", fleet_detail.STRAGGLERS_ACROSS_HOSTS)
