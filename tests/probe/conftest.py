"""Fixtures for the probe's tests: a private ring directory and an in-process recorder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.probe import ring as ring_format
from gputop.probe.steps import Recorder


@pytest.fixture
def ring_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh directory that rings of this process go to (via the probe's env variable)."""
    monkeypatch.setenv(ring_format.ENV_DIR, str(tmp_path))
    return tmp_path


@pytest.fixture
def rec(tmp_path: Path) -> Iterator[Recorder]:
    """A Recorder of this process writing its ring into tmp_path; closed after the test."""
    path = ring_format.ring_path(os.getpid(), directory=str(tmp_path))
    recorder = Recorder(lambda: ring_format.RingWriter(path))
    yield recorder
    recorder.close()
