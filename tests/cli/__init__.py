"""Tests of gputop's command line (gputop.cli)."""
