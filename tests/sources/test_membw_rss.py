"""The whole app's resident memory with the default `--membw auto` stays under 60 MiB."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.alone

MiB = 1 << 20
CEILING = 60 * MiB

# ru_maxrss counts what a child held before exec too, i.e. a fork of its parent: pytest,
# which may hold far more than the app. A bare `python -S` in between forks it instead.
PEAK_OF_CHILD = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
sys.stderr.write(f"\\nexit={os.waitstatus_to_exitcode(status)} maxrss_kib={usage.ru_maxrss}\\n")
"""


def run_with_peak_rss(argv: list[str], timeout: float = 60) -> tuple[int, str, str, int]:
    """Exit status, stdout, stderr and the peak RSS in bytes of `argv` (wait4 in a small parent)."""
    done = subprocess.run([sys.executable, "-S", "-c", PEAK_OF_CHILD, *argv],
                          capture_output=True, text=True, timeout=timeout, check=False)
    err, _, tail = done.stderr.rstrip().rpartition("\n")
    fields = dict(item.split("=") for item in tail.split())
    return int(fields["exit"]), done.stdout, err, int(fields["maxrss_kib"]) * 1024


@pytest.mark.slow
def test_once_json_with_default_membw_peaks_under_60_mib() -> None:
    code, out, err, peak = run_with_peak_rss([sys.executable, "-m", "gputop", "--once", "--json"])
    assert code == 0, err
    membw = json.loads(out)["memory_bandwidth"]
    assert membw is not None  # the default is auto: the source is open, not off
    assert peak <= CEILING, f"peak RSS {peak / MiB:.0f} MiB; membw: {membw}"
