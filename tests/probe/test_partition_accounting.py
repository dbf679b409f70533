"""Issue 38, in-process: the recorder's partition of a step (data, h2d, forward, backward,
optimizer, sync, host) as the torch patch reports to it, and the device-wait timing's patch
on CPU tensors (which never wait)."""

from __future__ import annotations

import time
from time import perf_counter_ns

import pytest

from gputop.probe import torch as probe_torch
from gputop.probe.reader import RawRecord
from gputop.probe.steps import BACKWARD, FORWARD, HOST, INPUT, OPTIMIZER, Recorder
from tests.helpers.probe import published_records

PARTS = ("data_ns", "h2d_ns", "forward_ns", "backward_ns", "optimizer_ns", "sync_ns", "host_ns")



def _summed(r: RawRecord) -> int:
    return sum(max(0, getattr(r, name)) for name in PARTS)


def _wait(rec: Recorder, ns: int) -> None:
    """What the patched .item() of a CUDA tensor reports: the thread waited `ns`."""
    t0 = perf_counter_ns()
    while perf_counter_ns() - t0 < ns:
        pass
    rec.sync += perf_counter_ns() - t0


def test_device_waits_are_sync_not_data_nor_host(rec: Recorder) -> None:
    rec.sync_known = True
    rec.optimizer_done(100)  # opens a loader-less step: its input runs until the forward
    for _ in range(4):
        assert rec.phase_now == INPUT
        _wait(rec, 2_000_000)  # loss.item() in the input, as nanoGPT logs
        rec.forward_begin(perf_counter_ns())
        rec.phase_now = FORWARD
        rec.forward_done(300)
        rec.phase_now = HOST
        _wait(rec, 3_000_000)  # a sync in host time
        time.sleep(0.002)  # host work
        rec.auto_phase(BACKWARD, 500)
        rec.auto_optimizer_done(100)
    steps = published_records(rec)[1:]
    assert len(steps) == 4
    for r in steps:
        assert _summed(r) == r.duration_ns, r
        assert r.sync_ns >= 5_000_000 and r.data_ns < 2_000_000, r  # the input's wait left it
        assert r.host_ns >= 2_000_000, r


def test_a_closures_forward_ends_the_input_where_its_optimizer_step_began(rec: Recorder) -> None:
    rec.optimizer_done(100)
    for _ in range(3):
        time.sleep(0.002)  # the input
        rec.phase_now, rec.optimizer_t0 = OPTIMIZER, perf_counter_ns()
        time.sleep(0.001)  # the optimizer's own work before it calls the closure
        rec.forward_begin(perf_counter_ns())
        rec.forward_done(300)
        rec.auto_phase(BACKWARD, 500)
        rec.phase_now = HOST
        rec.auto_optimizer_done(perf_counter_ns() - rec.optimizer_t0 - 800)
    for r in published_records(rec)[1:]:
        assert _summed(r) == r.duration_ns, r
        assert r.sync_ns == -1  # no device seen: unknown, not zero


def test_the_wait_timing_patch_leaves_cpu_tensors_alone(rec: Recorder) -> None:
    torch = pytest.importorskip("torch")
    originals = {name: getattr(torch.Tensor, name) for name in ("item", "cpu", "tolist")}
    undo = len(probe_torch._undo)
    t = torch.arange(6.0)
    probe_torch._time_syncs(rec, torch)
    try:
        assert all(getattr(torch.Tensor, name) is not originals[name] for name in originals)
        rec.optimizer_done(1)
        rec.phase_now = HOST
        assert (t[2].item(), t.cpu().tolist(), t.tolist()) == (2.0, [0.0, 1.0, 2.0, 3.0, 4.0,
                                                                    5.0], t.tolist())
        assert rec.sync_known and rec.sync == 0  # a CPU tensor never waits on a device
    finally:
        while len(probe_torch._undo) > undo:
            probe_torch._undo.pop()()
    assert all(getattr(torch.Tensor, name) is originals[name] for name in originals)
