"""Tests of gputop's analysis layer."""
