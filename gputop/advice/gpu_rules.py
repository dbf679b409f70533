"""Rules that need no probe: what the GPUs themselves show."""

from __future__ import annotations

from statistics import fmean

from gputop.advice.context import Context, gpu_memory_fraction
from gputop.model import Advice

MIN_HISTORY = 5
HIGH_MEMORY = 0.80
IDLE_UTIL = 10.0
SPIKE_UTIL = 60.0
SAWTOOTH_IDLE_SHARE = 0.3
MIN_RISES = 2
SHARED_MIN_BYTES = 256 * 1024**2
GIB = 1024**3


def gpu_starved(ctx: Context) -> list[Advice]:
    """Memory held but util near zero, or util spiking and falling: waiting for input."""
    starved = []
    for gpu in ctx.frame.gpu.gpus:
        history = ctx.gpu_util_history.get(gpu.index, ())
        fraction = gpu_memory_fraction(gpu)
        if gpu.lost or len(history) < MIN_HISTORY or fraction is None:
            continue
        idle_share = sum(u <= IDLE_UTIL for u in history) / len(history)
        flat_idle = fraction >= HIGH_MEMORY and max(history) <= IDLE_UTIL
        sawtooth = _rises(history) >= MIN_RISES and idle_share >= SAWTOOTH_IDLE_SHARE
        if flat_idle or sawtooth:
            shape = "near zero throughout" if flat_idle else (
                f"spiking to {max(history):.0f}% then idle in {idle_share:.0%} of samples")
            starved.append(
                f"GPU {gpu.index}: memory {fraction:.0%} used, util averaged "
                f"{fmean(history):.0f}% over {len(history)} samples, {shape}"
            )
    if not starved:
        return []
    several = len(starved) > 1
    return [Advice(
        id="gpu-starved",
        severity="critical" if several or "throughout" in starved[0] else "warn",
        title=("GPUs are" if several else "GPU is") + " waiting for input, not computing",
        evidence="; ".join(starved),
        action="Attach to the trainer (gputop --attach PID, or start it with gputop run) to time "
        "its steps; the usual cause is the DataLoader: raise num_workers, set pin_memory=True.",
    )]


def _rises(history: tuple[float, ...]) -> int:
    """How often util climbed from idle to a spike: one ramp-up is not a sawtooth."""
    rises, was_idle = 0, False
    for util in history:
        if util <= IDLE_UTIL:
            was_idle = True
        elif util >= SPIKE_UTIL and was_idle:
            rises, was_idle = rises + 1, False
    return rises


def gpu_shared(ctx: Context) -> list[Advice]:
    """Several training processes on one GPU time-slice it and slow each other."""
    out = []
    for gpu in ctx.frame.gpu.gpus:
        users = [p for p in gpu.processes if (p.memory_used_bytes or 0) >= SHARED_MIN_BYTES]
        if len(users) < 2:
            continue
        names = ", ".join(
            f"{p.pid} ({(p.memory_used_bytes or 0) / GIB:.1f} GiB)" for p in users
        )
        util = "n/a" if gpu.util_percent is None else f"{gpu.util_percent:.0f}%"
        out.append(Advice(
            id="gpu-shared",
            severity="warn",
            title=f"GPU {gpu.index} is shared by {len(users)} processes",
            evidence=f"GPU {gpu.index} (util {util}) holds memory of PIDs {names}",
            action="Give each trainer its own GPU (CUDA_VISIBLE_DEVICES) or run them one after "
            "the other: sharing a card makes both jobs slower.",
        ))
    return out
