"""gputop's tests, one folder per package layer: sources, analysis, advice, probe, export, tui, cli.

Helpers shared across folders live in tests/helpers and are imported as `tests.helpers.NAME`;
fixtures live in the conftest.py of the folder that uses them; scripts and data a test runs or
reads sit beside it (probe/trainers, sources/fixtures, tui/data, ...).

A test that starts a real trainer, a process under the probe, torch, a tmux terminal,
sysbench or the gputop command is marked `slow`; `make test-fast` runs the others.
"""
