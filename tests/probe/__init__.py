"""Tests of the in-trainer probe (gputop.probe)."""
