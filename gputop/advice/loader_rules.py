"""Rules about an attached trainer's input pipeline and batch size."""

from __future__ import annotations

from gputop.advice.context import (
    Context,
    counted,
    cpu_only,
    gpu_memory_fraction,
    input_evidence,
    is_data_bound,
    num_workers,
    per_worker_cpu,
)
from gputop.model import Advice, AttachState

WORKER_LADDER = (4, 8, 16)
BUSY_WORKER = 80.0
IDLE_WORKER = 30.0
SATURATED_HOST = 90.0
H2D_SHARE = 0.05
BATCH_MEMORY_TARGET = 0.90
LOW_MEMORY = 0.60
FREE_CORE = 0.75  # a core this idle can feed one more worker (the trainer itself uses a little)


def no_dataloader(state: AttachState) -> bool:
    """The trainer's input is its own code before the forward (no DataLoader to tune)."""
    return state.summary.input_outside_model


def suggested_workers(current: int, free_cores: float) -> int | None:
    """The next rung of 4/8/16 the free cores can feed, or None when none fits."""
    ceiling = current + int(free_cores + 1 - FREE_CORE)
    fits = [n for n in WORKER_LADDER if current < n <= ceiling]
    if fits:
        return fits[-1]
    return ceiling if ceiling > current else None


def num_workers_zero(ctx: Context, state: AttachState) -> list[Advice]:
    """Data-bound while every batch is loaded in the main process."""
    if no_dataloader(state):
        return []
    if not is_data_bound(state) or num_workers(ctx, state) != 0:
        return []
    cores = ctx.frame.host.cpu_count
    advice_n = min(8, max(1, cores - 1))
    pin = "" if cpu_only(ctx, state) else ", pin_memory=True"
    return [Advice(
        id="num-workers-zero",
        severity="critical",
        title="Batches are loaded in the training process itself (num_workers=0)",
        evidence=f"{input_evidence(state)}; num_workers=0 on a {cores}-core host",
        action=f"Try DataLoader(num_workers={advice_n}{pin}, persistent_workers=True) so "
        "batches are prepared while the model computes.",
    )]


def raise_num_workers(ctx: Context, state: AttachState) -> list[Advice]:
    """Data-bound with every worker near a full core and cores to spare."""
    if no_dataloader(state):
        return []
    n = num_workers(ctx, state)
    busy = per_worker_cpu(ctx, state.pid)
    if not is_data_bound(state) or not n or busy is None or busy < BUSY_WORKER:
        return []
    if ctx.frame.host.cpu_percent is None:
        return []  # idle cores unknown until the host has a rate
    free = ctx.free_cores()
    target = suggested_workers(n, free)
    if target is None:
        return []
    return [Advice(
        id="raise-num-workers",
        severity="warn",
        title="Workers are saturated: add DataLoader workers",
        evidence=f"{input_evidence(state)}; {counted(n, 'worker')} at {busy:.0f}% CPU"
        f"{' each' if n > 1 else ''}, {free:.1f} cores idle",
        action=f"Try num_workers={target} (bounded by the idle cores; 4, 8 or 16 usually suffice).",
    )]


def too_many_workers(ctx: Context, state: AttachState) -> list[Advice]:
    """More workers than cores, or starved idle workers on a saturated host."""
    if no_dataloader(state):
        return []
    n = num_workers(ctx, state)
    cores = ctx.frame.host.cpu_count
    if not n:
        return []
    busy = per_worker_cpu(ctx, state.pid)
    host_cpu = ctx.frame.host.cpu_percent or 0.0
    target = min(max([w for w in WORKER_LADDER if w <= cores] or [max(1, cores - 1)]), n - 1)
    if target < 1:
        return []
    # Workers idle on a host with CPU to spare wait on storage: more than cores is fine then.
    waiting = busy is not None and busy < IDLE_WORKER and host_cpu < SATURATED_HOST
    if n > cores and not waiting:
        evidence = f"num_workers={n} on a {cores}-core host" + (
            "" if busy is None else f"; the workers average {busy:.0f}% CPU each, the host is "
            f"{host_cpu:.0f}% busy")
    elif (is_data_bound(state) and busy is not None and busy < IDLE_WORKER
          and host_cpu >= SATURATED_HOST):
        # Idle workers of a compute-bound trainer are simply ahead: only starved ones count.
        evidence = (f"{input_evidence(state)}; {counted(n, 'worker')} average {busy:.0f}% "
                    f"CPU each while the host is {host_cpu:.0f}% busy")
    else:
        return []
    return [Advice(
        id="too-many-workers",
        severity="warn",
        title="More DataLoader workers than the cores can run",
        evidence=evidence,
        action=f"Try num_workers={target}: extra workers fight over cores and "
        "dispatch costs more than it gains.",
    )]


def io_bound_loading(ctx: Context, state: AttachState) -> list[Advice]:
    """Data-bound while the workers barely use an unsaturated CPU: they wait on storage."""
    if no_dataloader(state):
        return []
    n = num_workers(ctx, state)
    busy = per_worker_cpu(ctx, state.pid)
    if not is_data_bound(state) or not n or busy is None or busy >= IDLE_WORKER:
        return []
    if (ctx.frame.host.cpu_percent or 0.0) >= SATURATED_HOST:
        return []  # on a full host, idle workers may be waiting for a core, not for storage
    return [Advice(
        id="io-bound-loading",
        severity="warn",
        title="Loading waits on storage or network, not on the CPU",
        evidence=f"{input_evidence(state)} while {counted(n, 'worker')} "
        f"{'average' if n > 1 else 'uses'} {busy:.0f}% CPU{' each' if n > 1 else ''}",
        action="Check the dataset's storage: cache it on local SSD or in RAM, pack small files "
        "into larger shards, or pre-decode; more workers help only if reads can overlap.",
    )]


def pin_memory_off(ctx: Context, state: AttachState) -> list[Advice]:
    """A CUDA trainer that spends a noticeable share copying from pageable memory."""
    if no_dataloader(state):
        return []
    config = state.config
    median = dict(state.summary.median_phase_ns)
    h2d, step = median.get("h2d"), state.summary.median_step_ns
    on_cuda = (config.device or "").startswith("cuda")
    if not on_cuda or config.pin_memory is not False or h2d is None or not step:
        return []
    share = h2d / step
    if share < H2D_SHARE:
        return []
    return [Advice(
        id="pin-memory-off",
        severity="warn",
        title="Host-to-device copies run from pageable memory",
        evidence=f"host-to-device copy is {share:.0%} of the median step "
        f"({h2d / 1e6:.1f} of {step / 1e6:.1f} ms) with pin_memory=False",
        action="Set DataLoader(pin_memory=True) and copy with .to(device, non_blocking=True) "
        "if the host has memory to spare.",
    )]


def raise_batch_size(ctx: Context, state: AttachState) -> list[Advice]:
    """Compute-bound with most of the GPU memory unused: a bigger batch fits."""
    batch = state.config.batch_size or _step_batch(state)
    if state.summary.verdict != "compute-bound" or not batch:
        return []
    for gpu in ctx.gpus_of(state.pid):
        fraction = gpu_memory_fraction(gpu)
        if fraction is None or fraction >= LOW_MEMORY or fraction <= 0:
            continue
        estimate = int(batch * BATCH_MEMORY_TARGET / fraction)
        if estimate <= batch:
            continue
        return [Advice(
            id="raise-batch-size",
            severity="info",
            title="GPU memory is mostly unused: a larger batch fits",
            evidence=f"compute-bound ({state.summary.input_bound_percent or 0:.0f}% input) with "
            f"GPU {gpu.index} memory at {fraction:.0%} and batch_size={batch}",
            action=f"Try batch_size ≈ {estimate} (memory grows about linearly with batch size; "
            "this leaves ~10% headroom) and retune the learning rate.",
        )]
    return []


def _step_batch(state: AttachState) -> int | None:
    sizes = [s.batch_size for s in state.steps if s.batch_size]
    return sizes[-1] if sizes else None
