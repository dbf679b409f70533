"""Tests of gputop's export layer."""
