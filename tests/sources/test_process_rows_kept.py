"""The process source keeps its rows between ticks: the rows that changed are put in their
places, and the scan says where each PID's row is, so derive, the advice and the table look a
process up without a pass over the others. Checked against the rows made from scratch
through ticks where processes run, come, go and show up on a GPU."""

from __future__ import annotations

import random
from pathlib import Path

from gputop.core.model import GpuReport
from gputop.sources.processes import ProcProcessSource
from tests.helpers import builders
from tests.helpers.fakeproc import FakeProc

GPU_NONE = GpuReport("none")


def test_kept_rows_match_rows_made_anew_and_say_where_each_pid_is(tmp_path: Path) -> None:
    rng = random.Random(7)
    proc = FakeProc(tmp_path)
    cpu = {pid: 0 for pid in range(100, 140)}
    for pid in cpu:
        proc.add(pid, "worker")
    source = ProcProcessSource(str(tmp_path), max_fds=0)
    next_pid, last_rows = 200, None
    try:
        for tick in range(40):
            for pid in rng.sample(sorted(cpu), 5):  # some run
                cpu[pid] += rng.randrange(1, 50)
                proc.add(pid, "worker", ut=cpu[pid])
            if tick % 4 == 1:  # one comes
                cpu[next_pid] = 0
                proc.add(next_pid, "fresh")
                next_pid += 1
            if tick % 5 == 2:  # one goes
                gone = rng.choice(sorted(cpu))
                del cpu[gone]
                proc.remove(gone)
            # a tracked process on a GPU, and one NVML lists that /proc does not show
            gpu = GpuReport("simulated", gpus=(builders.gpu(0, pids=(
                (min(cpu), 1.0), (99_999, 2.0))),)) if tick % 3 == 0 else GPU_NONE
            scan = source.sample(gpu)
            rows = scan.rows
            assert scan.positions is not None
            assert {pid: rows[i].pid for pid, i in scan.positions.items()} == {
                row.pid: row.pid for row in rows}, "each PID's place holds its row"
            tracked = [row.pid for row in rows if row.in_proc]
            assert tracked == sorted(cpu), "every live process once, in PID order"
            assert [row.pid for row in rows if not row.in_proc] == (
                [99_999] if tick % 3 == 0 else []), "a foreign row after the tracked ones"
            on_gpu = {row.pid for row in rows if row.gpu_indices}
            assert on_gpu == ({min(cpu), 99_999} if tick % 3 == 0 else set())
            if tick >= 2 and last_rows is not None:  # the first two ticks make every rate
                before = {row.pid: row for row in last_rows}
                kept = [row for row in rows if before.get(row.pid) is row]
                assert kept, "rows that did not change are the same objects"
            last_rows = rows
    finally:
        source.close()
