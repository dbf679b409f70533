"""`make hw-check` on this machine: every rung and the layout check get a verdict line."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers.modules import load_file

SCRIPT = Path(__file__).parents[2] / "scripts" / "hw_check.py"
RUNGS = ("resctrl MBM", "perf uncore", "perf core", "canary estimate")


def _script() -> ModuleType:
    return load_file("hw_check", SCRIPT)


def test_every_rung_and_the_layout_get_a_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    assert _script().main(["--seconds", "0.2"]) == 0
    out = capsys.readouterr().out
    for label in RUNGS:
        assert re.search(rf"^  {re.escape(label)} +(available|n/a) — \S", out, re.M), label
    assert re.search(r"^--membw auto picks: \S+", out, re.M)
    assert re.search(r"^  layout check +(balanced|unbalanced|n/a)", out, re.M)
    for source in ("udev DMI data", "SMBIOS entries", "SMBIOS table", "dmidecode", "EDAC"):
        assert re.search(rf"^  {source} +\S", out, re.M), source
    assert "Traceback" not in out


def test_a_crashing_check_is_one_line_and_exit_1_and_the_rest_still_run(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    script = _script()

    def broken() -> None:
        raise RuntimeError("resctrl exploded")

    monkeypatch.setattr(script, "rungs", broken)
    assert script.main(["--seconds", "0"]) == 1
    out = capsys.readouterr().out
    assert "  CHECK CRASHED: RuntimeError: resctrl exploded" in out
    assert "layout check" in out
