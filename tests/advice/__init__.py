"""Tests of gputop's advice layer."""
