"""`--readonly` on gputop and gputop run: it reaches the wiring, which then hands the TUI no
signaller, so `k` sends nothing (the TUI side: tests/tui/test_keys.py)."""

from __future__ import annotations

import pytest

from gputop.app import cli, live, options, wiring
from gputop.app.signalling import ProcessSignaller


@pytest.mark.parametrize(("argv", "readonly"), [([], False), (["--readonly"], True)])
def test_gputop_readonly_reaches_the_live_view(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], readonly: bool
) -> None:
    seen: dict[str, object] = {}
    monkeypatch.setattr(live, "run_live", lambda **kw: seen.update(kw) or 0)
    monkeypatch.setattr(options, "need_terminal", lambda *words: None)  # no terminal here
    assert cli.main(argv) == 0
    assert seen["readonly"] is readonly


def test_gputop_run_takes_readonly(capsys: pytest.CaptureFixture[str]) -> None:
    """Parsed before the command (no terminal here: the command runs without the TUI)."""
    assert cli.main(["run", "--readonly", "--membw", "off", "--", "true"]) == 0
    assert "unrecognized" not in capsys.readouterr().err


def test_readonly_hands_the_tui_no_signaller() -> None:
    assert wiring.signaller(readonly=True) is None
    assert isinstance(wiring.signaller(readonly=False), ProcessSignaller)
