"""Issue 39, containers seen from inside: NVML's host PIDs are matched to a process here only
where proven (the one process holding the GPU's device node, the GPU's one compute process),
else one honest line. The holders are real processes in namespaces of their own, holding a
/dev/nvidia0 made there; NVML's answer is given as data (no GPU here)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from gputop.analysis.foreign_gpu_pids import ForeignGpuPid, foreign_gpu_pids, outside_line
from gputop.core.model import GpuReport
from tests.helpers.builders import gpu
from tests.helpers.probe import ROOT, UNSHARE, pid_namespace_refusal, trainer_env

# Run inside: the holders started by the shell are its children; what gputop would decide.
INSIDE = """
import json, os, sys, time
from gputop.analysis.foreign_gpu_pids import foreign_gpu_pids, outside_line
from gputop.core.model import GpuReport, GpuProcess, GpuSample
from gputop.sources.device_holders import gpu_nodes, holders
mine = os.open("/dev/nvidia0", os.O_RDONLY)  # as NVML in gputop holds it: not a match
deadline = time.monotonic() + 60
while True:  # until the shell's holders have opened it
    ours = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    if len(holders(ours).get(0, ())) > int(sys.argv[1]) or time.monotonic() > deadline:
        break
    time.sleep(0.01)
host = max(ours) + 100_000  # NVML's PID: of the host, not among ours
report = GpuReport("nvml", (GpuSample(
    index=0, name="GPU", uuid="GPU-0", util_percent=90.0, memory_util_percent=None,
    memory_used_bytes=1, memory_total_bytes=2, temperature_c=None, power_w=None,
    power_limit_w=None, sm_clock_mhz=None, memory_clock_mhz=None, pcie_rx_bytes_per_s=None,
    pcie_tx_bytes_per_s=None, processes=(GpuProcess(host, 1),)),))
found = foreign_gpu_pids(report, ours, gpu_nodes(), holders(ours), me=os.getpid())
print(json.dumps({"host": host, "me": os.getpid(),
                  "found": [[f.host_pid, f.pid, f.how] for f in found], "line": outside_line(found),
                  "holders": sorted(holders(ours).get(0, ()))}))
"""


def _inside(holders: int) -> dict[str, Any]:
    """INSIDE's answer in PID and mount namespaces of their own with a /dev of their own,
    `holders` processes holding /dev/nvidia0 open (a character device, the null device's)."""
    hold = "(exec 3</dev/nvidia0; exec sleep 600) & " * holders
    script = ("mount -t tmpfs tmpfs /dev && mknod /dev/nvidia0 c 1 3 && "
              f"mknod -m 666 /dev/null c 1 3 || exit 1; {hold}"
              f"exec {sys.executable} -c \"$0\" {holders}")
    done = subprocess.run([*UNSHARE, "--mount", "sh", "-c", script, INSIDE],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=trainer_env(ROOT))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def unshare() -> None:
    refusal = pid_namespace_refusal()
    if refusal is not None:
        pytest.skip(refusal)


@pytest.mark.usefixtures("unshare")
def test_the_one_process_holding_the_gpu_is_matched_and_says_how() -> None:
    answer = _inside(holders=1)
    (host, pid, how), = answer["found"]
    assert host == answer["host"]
    assert answer["holders"] == sorted([pid, answer["me"]]) and pid != answer["me"]
    assert "/dev/nvidia0" in how and answer["line"] is None


@pytest.mark.usefixtures("unshare")
def test_two_holders_prove_nothing_and_the_line_says_so() -> None:
    answer = _inside(holders=2)
    assert len(answer["holders"]) == 3  # the two, and INSIDE itself
    assert [f[1] for f in answer["found"]] == [None]
    assert answer["line"] == (
        "GPU processes run outside this container's PID namespace (NVML reports host PIDs "
        f"{answer['host']}): start the container with --pid=host or run gputop on the host")


def test_pids_of_ours_are_not_foreign_and_many_are_counted() -> None:
    report = GpuReport("nvml", (gpu(0, pids=((10, 1), (4121, 1))),
                                gpu(1, pids=tuple((5000 + i, 1) for i in range(8)))))
    found = foreign_gpu_pids(report, ours=[10])
    assert [f.host_pid for f in found] == [4121, *range(5000, 5008)]
    assert all(f.pid is None for f in found)
    line = outside_line(found)
    assert line is not None and "host PIDs 4121, 5000, 5001, 5002, 5003, 5004 and 3 more" in line
    assert outside_line(foreign_gpu_pids(report, ours=[10, 4121, *range(5000, 5008)])) is None


def test_a_gpu_with_two_compute_processes_matches_neither() -> None:
    report = GpuReport("nvml", (gpu(0, pids=((4121, 1), (4188, 1))),))
    found = foreign_gpu_pids(report, ours=[1], nodes=(0,), held={0: frozenset({7})})
    assert found == (ForeignGpuPid(4121, 0), ForeignGpuPid(4188, 0))
