"""Tests of gputop's command line (gputop.app.cli)."""
