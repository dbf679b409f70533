"""Tests of gputop's sources layer."""
