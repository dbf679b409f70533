"""The whole app's resident memory with the default `--membw auto` stays under 60 MiB."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import pytest

MiB = 1 << 20
CEILING = 60 * MiB


def run_with_peak_rss(argv: list[str], timeout: float = 60) -> tuple[int, str, str, int]:
    """Exit status, stdout, stderr and the peak RSS in bytes of this one child (wait4)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                raise AssertionError(f"{argv} still running after {timeout} s")
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        return (proc.returncode, out.read().decode(), err.read().decode(),
                usage.ru_maxrss * 1024)


@pytest.mark.slow
def test_once_json_with_default_membw_peaks_under_60_mib() -> None:
    code, out, err, peak = run_with_peak_rss([sys.executable, "-m", "gputop", "--once", "--json"])
    assert code == 0, err
    membw = json.loads(out)["memory_bandwidth"]
    assert membw is not None  # the default is auto: the source is open, not off
    assert peak <= CEILING, f"peak RSS {peak / MiB:.0f} MiB; membw: {membw}"
