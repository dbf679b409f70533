"""Fixtures for the sources' tests: the stand-in pynvml as `nv`."""

from tests.helpers.nvml import nv  # noqa: F401  (a fixture pytest finds here)
