"""The batch-size rule: GPU memory left unused by a compute-bound trainer, and what a larger
batch would gain, predicted from the part of each step that does not grow with the batch."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import fmean

from gputop.advice.context import (
    Context,
    StepShape,
    gpu_memory_fraction,
    modes_words,
    window_words,
)
from gputop.analysis.steps import STEP_STATISTIC
from gputop.core.model import Advice, AttachState, GpuSample

BATCH_MEMORY_TARGET = 0.90
LOW_MEMORY = 0.60
MIN_GAIN = 0.10  # advise a larger batch only when it predicts this much more samples/s


@dataclass(frozen=True, slots=True)
class FixedCost:
    """Per-step time that a larger batch shares among more samples, in ms, and what it is."""

    ms: float
    words: str


def raise_batch_size(ctx: Context, state: AttachState) -> list[Advice]:
    """Compute-bound with most of the GPU memory unused, and a bigger batch predicts a gain.

    The step's fixed part (optimizer.step and the loop's own time where the host computes,
    the GPU's idle time between kernels on a GPU) stays; the rest is taken to grow in
    proportion to the batch, so the prediction is a floor: small batches' forward and
    backward grow less than that (per-operation overhead, weights read once per batch).
    """
    batch = state.config.batch_size or _step_batch(state)
    shape = ctx.step_shape(state)
    if state.summary.verdict != "compute-bound" or not batch or shape is None:
        return []
    for gpu in ctx.gpus_of(state.pid):
        fraction = gpu_memory_fraction(gpu)
        if fraction is None or fraction >= LOW_MEMORY or fraction <= 0:
            continue
        estimate = int(batch * BATCH_MEMORY_TARGET / fraction)
        fixed = _fixed_cost(ctx, state, gpu, shape)
        if fixed is None or estimate <= batch:
            continue
        grow = estimate / batch
        scaled = shape.step_ms - fixed.ms
        floor = grow * shape.step_ms / (fixed.ms + grow * scaled)
        if floor < 1 + MIN_GAIN:
            continue
        return [Advice(
            id="raise-batch-size",
            severity="info",
            title="GPU memory is mostly unused: a larger batch fits",
            evidence=f"compute-bound ({state.summary.input_bound_percent or 0:.0f}% input) with "
            f"GPU {gpu.index} memory at {fraction:.0%} and batch_size={batch}; {fixed.words}: "
            f"{fixed.ms:.1f} ms of the {STEP_STATISTIC} step {shape.step_ms:.1f} ms "
            f"{window_words(state.summary)}{modes_words(state.summary)} does not grow with the "
            "batch",
            action=f"Try batch_size ≈ {estimate} (memory grows about linearly with batch size; "
            f"this leaves ~10% headroom) and retune the learning rate: {grow:.2f}x the samples "
            f"a step for {fixed.ms:.1f} + {grow:.2f} x {scaled:.1f} ms predicts at least "
            f"{floor:.2f}x the samples/s ({grow:.1f}x where compute barely grows, more where "
            "larger matmuls run their kernels fuller).",
        )]
    return []


def _fixed_cost(ctx: Context, state: AttachState, gpu: GpuSample, shape: StepShape
                ) -> FixedCost | None:
    """The step's part that a larger batch does not lengthen; None when unmeasured."""
    device = (state.config.device or "").split(":")[0]
    if device == "cpu":  # the host computes: its phase times are the work itself
        return _host_fixed_cost(state)
    history = ctx.gpu_util_history.get(gpu.index) or (
        (gpu.util_percent,) if gpu.util_percent is not None else ())
    if not history:
        return None
    idle = 1.0 - fmean(history) / 100.0
    # The GPU's idle time holds the input too, and loading grows with the batch.
    ms = max(0.0, idle * shape.step_ms - shape.input_ms)
    return FixedCost(ms, f"GPU {gpu.index} idles {idle:.0%} of the time (kernel launches and "
                     "host work, the same for any batch)")


def _host_fixed_cost(state: AttachState) -> FixedCost | None:
    """optimizer.step and, where forward and backward are timed, the loop's own time: their
    means over the window (the optimizer's work depends on the parameters, not the batch)."""
    steps = [s for s in state.steps if not s.warmup and s.optimizer_ns is not None]
    if not steps:
        return None
    optimizer = fmean(s.optimizer_ns or 0 for s in steps) / 1e6
    timed = [s for s in steps if s.forward_ns is not None and s.backward_ns is not None]
    loop = fmean(s.other_ns for s in timed) / 1e6 if timed else 0.0
    words = f"optimizer.step takes {optimizer:.1f} ms"
    if timed:
        words += f" and the loop's own code {loop:.1f} ms"
    return FixedCost(optimizer + loop, words)


def _step_batch(state: AttachState) -> int | None:
    """The newest step's batch size (looked for from the newest step back)."""
    return next((s.batch_size for s in reversed(state.steps) if s.batch_size), None)
