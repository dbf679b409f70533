"""Every advice rule, made real: probed torch trainers, the real sources, the real Advisor.

A trainer under `python -m gputop.probe` writes its ring into a tmp dir; a real Sampler
(host, processes, ring attach, simulated GPUs owned by the trainer where the GPU side
matters, the real memory-bandwidth monitor on fixture folders where swap or layout
matter) samples it until the advice shows, and each test checks the numbers the advice
quotes against the frame it came from and against what the trainer measured itself.

gpu-shared needs several processes on one real GPU: it cannot be made real on a CPU-only
host and stays a hand-built-frame test in test_advice_rules.py. pin-memory-off and
raise-batch-size are made real, and followed, in test_follow_advice_real.py; the advice to
a trainer that loads in its own process (num_workers=0) in test_inline_loading_real.py.
Rules that need something of the host (an idle core, little other work) sample until it
gives it, and skip, saying what the host did, when it never does (tests/helpers/advice_run).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from gputop.advice import evaluate
from gputop.advice.context import Context, figure, job_cpu, others_cores, worker_load
from gputop.core.model import Frame, MemoryBandwidthSample
from gputop.sources.membw import MemoryBandwidthMonitor, open_membw_source
from gputop.sources.simulated import SimulatedGpuSource
from tests.helpers.advice_run import (
    CORES,
    PARALLEL,
    Need,
    advice,
    check_input_share,
    group,
    number,
    probed_trainer,
    ready,
    sample_until,
    shows,
    state,
    watching,
)
from tests.helpers.builders import attached, process, trainer_with_workers
from tests.helpers.builders import frame as make_frame
from tests.helpers.membw import sys_with_llc, write_vmstat
from tests.helpers.probe import ROOT

pytestmark = pytest.mark.alone

FIXTURES = ROOT / "tests" / "sources" / "fixtures" / "membw"
LOUD = ("warn", "critical")


def little_other_work(frame: Frame) -> bool:
    """The trainer's window holds a step, and its job is nearly all the host does this tick
    (other work under half a core: the rule's data-bound case speaks only then)."""
    if not ready(frame, 1):
        return False
    job = job_cpu(Context(frame, {}), frame.attached[0].pid, starved=True)
    return job is not None and others_cores(Context(frame, {}), job.used) < 0.5


def busy_and_idle(frame: Frame) -> bool:
    """The trainer's window is full enough, a worker is near a full core and the host left
    most of a core idle."""
    busy = [t.workers_cpu_percent for t in frame.trainers if t.worker_pids]
    return (ready(frame, 10) and bool(busy) and max(busy) >= 80
            and Context(frame, {}).free_cores() >= 0.75)


@pytest.mark.slow
def test_too_many_workers(tmp_path: Path) -> None:
    # Workers that compute: three per core can only take turns, each queueing about twice as
    # long as it runs (the rule asks for at least as long). The job is favoured, so other
    # work on a shared host gets little of the cores; the rule's data-bound case needs that
    # (with other work, fewer workers would get less of the cores: test_worker_advice_real).
    workers = 3 * CORES
    with probed_trainer(tmp_path, "--workers", str(workers), "--spin-ms", "5") as trainer, \
            watching(trainer) as sampler:
        frame = sample_until(sampler, shows("too-many-workers", min_steps=1),
                             need=Need("other work under half a core", little_other_work))
        found = advice(frame, "too-many-workers")
        found_group = group(frame, trainer.pid)
        assert len(found_group.worker_pids) == workers
        load = worker_load(Context(frame, {}), trainer.pid)
        assert load is not None and load.starved  # they queue for the cores more than they run
        assert found.evidence.startswith(
            f"num_workers={workers} on a {CORES}-core host; {load.words()}")
        suggested = number(r"num_workers=(\d+)", found.action)
        assert CORES <= suggested < workers


@pytest.mark.slow
def test_io_bound_loading(tmp_path: Path) -> None:
    with probed_trainer(tmp_path, "--workers", "2", "--sleep-ms", "10") as trainer, \
            watching(trainer) as sampler:
        frame = sample_until(sampler, shows("io-bound-loading"))
        found = advice(frame, "io-bound-loading")
        check_input_share(found, frame, trainer)
        assert len(group(frame, trainer.pid).worker_pids) == 2
        load = worker_load(Context(frame, {}), trainer.pid)
        assert load is not None and load.blocked is not None and load.blocked >= 0.5
        assert f"while {load.words()}" in found.evidence
        assert not {"too-many-workers", "num-workers-zero"} & {a.id for a in frame.advice}


@pytest.mark.slow
def test_raise_num_workers_bounded_by_idle_cores(tmp_path: Path) -> None:
    # One worker burns a core preparing samples; the model is light, the other cores idle.
    # Other work on a shared host can take those cores: sampling goes on until they are free
    # (the rule needs about a fifth of a core idle; frames with most of one count).
    frames: list[Frame] = []
    with probed_trainer(tmp_path, "--workers", "1", "--spin-ms", "10") as trainer, \
            watching(trainer) as sampler:
        frame = sample_until(sampler, shows("raise-num-workers"), frames,
                             need=Need("a busy worker with a core left idle", busy_and_idle))
        found = advice(frame, "raise-num-workers")
        # Its first frame has no CPU rates yet: that is unknown, not an idle worker.
        assert not [a for f in frames for a in f.advice if a.id == "io-bound-loading"]
        check_input_share(found, frame, trainer)
        workers = group(frame, trainer.pid)
        load = worker_load(Context(frame, {}), trainer.pid)
        assert load is not None and f"; {load.words()}." in found.evidence
        assert workers.workers_cpu_percent >= 80
        job = job_cpu(Context(frame, {}), trainer.pid, load.starved)
        assert job is not None and f"({job.words()})" in found.evidence
        suggested = number(r"num_workers=(\d+)", found.action)
        # Every added worker but the last (a part of one, rounded up) is fed by spare CPU.
        assert suggested > 1 and (suggested - 2) * load.run <= job.available - job.used


@pytest.mark.slow
def test_cpu_threads_oversubscribed(tmp_path: Path) -> None:
    threads = CORES + 1
    with probed_trainer(tmp_path, "--workers", "1", "--threads", str(threads),
                        *PARALLEL) as trainer, watching(trainer) as sampler:
        frame = sample_until(sampler, shows("cpu-threads", min_steps=1))
        found = advice(frame, "cpu-threads")
        assert trainer.ready["num_threads"] == threads == state(frame).config.num_threads
        assert state(frame).config.device == "cpu"
        row = Context(frame, {}).process(trainer.pid)
        assert row is not None and row.cpu_percent is not None
        assert row.runqueue_wait_percent is not None
        used, idle = row.cpu_percent / 100, Context(frame, {}).free_cores()
        assert found.severity == "warn"
        assert found.evidence == (
            f"torch.get_num_threads()={threads}; the trainer runs on {used:.1f} cores "
            f"({idle:.1f} idle besides) and its threads wait "
            f"{row.runqueue_wait_percent / 100:.1f} core-seconds per second for a core")
        target = max(1, math.ceil(used - 0.1), round(used + idle))
        assert target < threads and f"torch.set_num_threads({target})" in found.action


# pin-memory-off: torch pins host memory only to copy it to an accelerator, so the advice
# needs a trainer on CUDA; its effect (a DMA copy from page-locked memory) needs one too and
# is not followed here. A CPU trainer that copies its batches (timed as h2d) beside a
# simulated GPU gets none; the same trainer saying it trains on cuda:0 gets it, with the
# numbers of its own steps.
COPYING = ("--workers", "1", "--copies", "300")


@pytest.mark.slow
def test_pin_memory_is_not_advised_where_torch_cannot_pin(tmp_path: Path) -> None:
    frames: list[Frame] = []
    with probed_trainer(tmp_path, *COPYING) as trainer:
        gpu = SimulatedGpuSource("compute-bound", count=1, owner_pids=[trainer.pid])
        with watching(trainer, gpu=gpu) as sampler:
            last = sample_until(sampler, lambda f: len(frames) >= 8
                                and state(f).summary.steps >= 30, frames)
    config, summary = state(last).config, state(last).summary
    assert config.device == "cpu" and config.pin_memory is False
    h2d = dict(summary.median_phase_ns)["h2d"]
    assert h2d is not None and summary.median_step_ns and h2d / summary.median_step_ns >= 0.05
    assert not [a for f in frames for a in f.advice if a.id == "pin-memory-off"]


@pytest.mark.slow
def test_pin_memory_off_on_a_trainer_that_says_cuda(tmp_path: Path) -> None:
    with probed_trainer(tmp_path, *COPYING, "--claim-device", "cuda:0") as trainer:
        gpu = SimulatedGpuSource("compute-bound", count=1, owner_pids=[trainer.pid])
        with watching(trainer, gpu=gpu) as sampler:
            frame = sample_until(sampler, shows("pin-memory-off", min_steps=30))
    found = advice(frame, "pin-memory-off")
    config, summary = state(frame).config, state(frame).summary
    assert config.device == "cuda:0" and config.pin_memory is False
    h2d, step = dict(summary.median_phase_ns)["h2d"], summary.mean_step_ns
    assert h2d is not None and step
    assert found.evidence.startswith(
        f"host-to-device copy is {h2d / step:.0%} of the step (median copy "
        f"{figure(h2d / 1e6)} ms; mean step {figure(step / 1e6)} ms over the last "
        f"{summary.steps} steps")
    assert found.evidence.endswith(") with pin_memory=False")
    assert "pin_memory=True" in found.action and "x the samples/s or more" in found.action


def _udev_one_at(root: Path, mts: int) -> Path:
    """The one-module fixture (1 of 4 slots) with its module running at `mts`."""
    text = (FIXTURES / "udev-one" / "+dmi:id").read_text().replace("=3200", f"={mts}")
    root.mkdir()
    (root / "+dmi:id").write_text(text)
    return root


def _calibrated(membw: MemoryBandwidthMonitor | None) -> MemoryBandwidthMonitor:
    assert membw is not None and membw.estimator is not None
    membw.sample()  # starts calibration
    assert membw.estimator.wait_calibrated(30), membw.estimator.failure
    return membw


@pytest.mark.slow
def test_host_memory_bandwidth_far_under_one_module(tmp_path: Path) -> None:
    # This machine's all-thread copy traffic first, then one module rated eight times that: the
    # rule speaks under half, so the second calibration may read up to four times the first.
    # The canary sized for the fixture's small cache runs in the machine's real one, whose
    # speed moves with the box's other work by more than a factor of two from run to run, and
    # a module rated only three or four times the first reading let the second read more than
    # half (benchmarks/RESULTS.md). A small cache, so the canary runs here (a large real LLC
    # turns it off).
    small_llc, state_dir = sys_with_llc(tmp_path / "sys", "2048K"), tmp_path / "state"
    probe = _calibrated(open_membw_source(
        "estimate", proc_root=FIXTURES / "proc-nopsi", udev_root=FIXTURES / "udev-none",
        sys_root=small_llc, state_dir=state_dir))
    try:
        measured = probe.sample().measured_peak_bytes_per_s or 0.0
    finally:
        probe.close()
    mts = max(3200, -(-int(8 * measured / 8e6) // 400) * 400)
    udev = _udev_one_at(tmp_path / "udev", mts)
    membw = _calibrated(open_membw_source(
        "estimate", proc_root=FIXTURES / "proc-nopsi", udev_root=udev, sys_root=small_llc,
        state_dir=state_dir))
    with watching(None, membw=membw) as sampler:
        frame = sample_until(sampler, lambda f: any(a.id == "host-memory-bandwidth"
                                                    for a in f.advice))
    found = advice(frame, "host-memory-bandwidth")
    m = frame.memory_bandwidth
    assert m is not None and m.measured_peak_bytes_per_s and m.expected_peak_bytes_per_s
    assert m.expected_peak_bytes_per_s == mts * 8e6
    assert found.evidence == (
        f"measured peak traffic {m.measured_peak_bytes_per_s / 1e9:.1f} GB/s is "
        f"{m.measured_peak_bytes_per_s / m.expected_peak_bytes_per_s:.0%} of the "
        f"{mts * 8 / 1e3:.1f} GB/s the memory layout should give "
        f"(1 of 4 slots: 16 GiB DDR4 {mts} MT/s; 1 channel (B))")
    assert "one memory channel" in found.action


@pytest.mark.slow
def test_healthy_run_gives_no_warning(tmp_path: Path) -> None:
    proc_root = tmp_path / "proc"
    proc_root.mkdir()
    write_vmstat(proc_root, 0, 10)
    membw = open_membw_source("estimate", proc_root=proc_root,
                              udev_root=FIXTURES / "udev-none")
    frames: list[Frame] = []
    with probed_trainer(tmp_path, "--workers", "1", "--batch-size", "16", "--passes", "8",
                        "--threads", "1") as trainer:
        gpu = SimulatedGpuSource("compute-bound", count=1, owner_pids=[trainer.pid])
        with watching(trainer, gpu=gpu, membw=membw) as sampler:
            sample_until(sampler, lambda f: len(frames) >= 12 and state(f).summary.steps >= 30,
                         frames)
    last = frames[-1]
    assert state(last).summary.verdict == "compute-bound"
    assert len(group(last, trainer.pid).worker_pids) == 1
    assert last.gpu.gpus[0].processes[0].pid == trainer.pid
    loud = [(a.id, a.evidence) for f in frames for a in f.advice if a.severity in LOUD]
    assert not loud


# The rule changes the real runs above led to, pinned on hand-built frames (fast).


def _ids(f: Frame) -> set[str]:
    return {a.id for a in evaluate(Context(f, {}))}


def test_idle_worker_of_compute_bound_trainer_on_busy_host_is_healthy() -> None:
    # Seen in the real healthy run: the prefetching worker idles while the model computes.
    rows, grp = trainer_with_workers(10, workers=1, worker_cpu=20.0)
    f = make_frame(processes=rows, trainers=(grp,), cores=2, cpu_percent=100.0,
                   attach=(attached(10, data_ms=1, compute_ms=40, num_workers=1),))
    assert "too-many-workers" not in _ids(f)


def test_starved_workers_on_saturated_host_are_not_called_io_bound() -> None:
    # Nor too many: two workers on two cores, starved by other work (the case).
    rows, grp = trainer_with_workers(10, workers=2, worker_cpu=20.0, worker_wait=70.0)
    f = make_frame(processes=rows, trainers=(grp,), cores=2, cpu_percent=100.0,
                   attach=(attached(10, data_ms=70, compute_ms=30, num_workers=2),))
    assert not _ids(f) & {"io-bound-loading", "too-many-workers"}


def test_more_workers_than_cores_waiting_on_storage_is_not_too_many() -> None:
    rows, grp = trainer_with_workers(10, workers=4, worker_cpu=5.0)
    f = make_frame(processes=rows, trainers=(grp,), cores=2, cpu_percent=40.0,
                   attach=(attached(10, data_ms=70, compute_ms=30, num_workers=4),))
    assert _ids(f) >= {"io-bound-loading"} and "too-many-workers" not in _ids(f)


def test_worker_without_a_rate_yet_is_unknown_not_idle() -> None:
    rows, grp = trainer_with_workers(10, workers=1, worker_cpu=0.0)
    rows = [replace(r, cpu_percent=None) if r.role == "worker" else r for r in rows]
    f = make_frame(processes=rows, trainers=(grp,), cores=2,
                   attach=(attached(10, data_ms=70, compute_ms=30, num_workers=1),))
    assert not _ids(f) & {"io-bound-loading", "too-many-workers", "raise-num-workers"}


def test_num_workers_zero_suggests_pinning_only_with_a_gpu() -> None:
    def starved(device: str) -> Frame:
        return make_frame(cores=4, processes=[process(7, role="trainer", cpu=100.0)],
                          attach=(attached(7, data_ms=80, compute_ms=20, num_workers=0,
                                           device=device),))

    cpu, cuda = starved("cpu"), starved("cuda:0")
    (on_cpu,) = [a for a in evaluate(Context(cpu, {})) if a.id == "num-workers-zero"]
    (on_cuda,) = [a for a in evaluate(Context(cuda, {})) if a.id == "num-workers-zero"]
    assert "pin_memory" not in on_cpu.action and "pin_memory=True" in on_cuda.action


def test_one_channel_of_several_slots_says_so() -> None:
    m = MemoryBandwidthSample(source="estimate", confidence="estimated",
                              measured_peak_bytes_per_s=9e9,
                              expected_peak_bytes_per_s=25.6e9,
                              layout="1 of 4 slots: 16 GiB DDR4 3200 MT/s; 1 channel (B)")
    (found,) = [a for a in evaluate(Context(make_frame(membw=m), {}))]
    assert found.action.startswith("Only one memory channel is populated")
    single = replace(m, layout="1 of 1 slots: 16 GiB DDR4 3200 MT/s; 1 channel (A)")
    (other,) = [a for a in evaluate(Context(make_frame(membw=single), {}))]
    assert "Only one memory channel" not in other.action
