"""Tests of gputop's terminal UI (gputop.tui)."""
