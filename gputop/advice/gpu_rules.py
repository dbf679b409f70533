"""Rules that need no probe: what the GPUs themselves show."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import fmean

from gputop.advice.context import Context, gpu_memory_fraction
from gputop.analysis.idle_holders import active_holder
from gputop.core.mig import instance_label, instance_of
from gputop.core.model import Advice, GpuProcess, GpuSample

MIN_HISTORY = 5
HIGH_MEMORY = 0.80
IDLE_UTIL = 10.0
SPIKE_UTIL = 60.0
SAWTOOTH_IDLE_SHARE = 0.3
MIN_RISES = 2
SHARED_MIN_BYTES = 256 * 1024**2
GIB = 1024**3


@dataclass(frozen=True, slots=True)
class _Starved:
    """What one starved GPU showed over its util history."""

    index: int
    memory: float
    mean_util: float
    samples: int
    flat: bool
    peak: float
    idle_share: float


def gpu_starved(ctx: Context) -> list[Advice]:
    """Memory held but util near zero, or util spiking and falling: waiting for input. Only
    where a process on it steps or uses CPU, or none is visible: a GPU whose holders do
    nothing is not waiting for input (gpu-idle names them)."""
    starved = [s for gpu in ctx.frame.gpu.gpus if (s := _starved(ctx, gpu)) is not None]
    if not starved:
        return []
    several = len(starved) > 1
    return [Advice(
        id="gpu-starved",
        severity="critical" if several or starved[0].flat else "warn",
        title=("GPUs are" if several else "GPU is") + " waiting for input, not computing",
        evidence=_evidence(starved),
        action=_starved_action(ctx, [s.index for s in starved]),
    )]


def _starved(ctx: Context, gpu: GpuSample) -> _Starved | None:
    history = ctx.gpu_util_history.get(gpu.index, ())
    fraction = gpu_memory_fraction(gpu)
    if gpu.lost or len(history) < MIN_HISTORY or fraction is None:
        return None
    if active_holder(ctx.frame, gpu) is False:
        return None
    idle_share = len([u for u in history if u <= IDLE_UTIL]) / len(history)
    peak = max(history)
    flat = fraction >= HIGH_MEMORY and peak <= IDLE_UTIL
    # A sawtooth needs idle samples and spikes: a busy or a quiet GPU is not walked again.
    sawtooth = (idle_share >= SAWTOOTH_IDLE_SHARE and peak >= SPIKE_UTIL
                and _rises(history) >= MIN_RISES)
    if not (flat or sawtooth):
        return None
    return _Starved(gpu.index, fraction, fmean(history), len(history), flat, peak, idle_share)


def _evidence(starved: list[_Starved]) -> str:
    """Each GPU in detail when there are one or two; otherwise one line per shape, as ranges."""
    if len(starved) <= 2:
        return "; ".join(
            f"GPU {s.index}: memory {s.memory:.0%} used, util averaged {s.mean_util:.0f}% over "
            f"{s.samples} samples, {_shape(s.flat, [s])}" for s in starved)
    parts = []
    for flat in (True, False):
        group = [s for s in starved if s.flat == flat]
        if group:
            indices = ", ".join(str(s.index) for s in group)
            parts.append(
                f"GPUs {indices}: memory {_span([s.memory * 100 for s in group])}% used, util "
                f"averaged {_span([s.mean_util for s in group])}% over {group[0].samples} "
                f"samples, {_shape(flat, group)}")
    return "; ".join(parts)


def _shape(flat: bool, group: list[_Starved]) -> str:
    if flat:
        return "near zero throughout"
    return (f"spiking to {_span([s.peak for s in group])}% then idle in "
            f"{_span([s.idle_share * 100 for s in group])}% of samples")


def _span(values: list[float]) -> str:
    low, high = round(min(values)), round(max(values))
    return f"{low}" if low == high else f"{low}-{high}"


def _starved_action(ctx: Context, indices: list[int]) -> str:
    """Point at the attached trainer's timings, or name the processes to attach to: the
    ones on those GPUs that /proc shows; where there is none, say so."""
    owners = sorted({p.pid for g in ctx.frame.gpu.gpus if g.index in indices for p in g.processes})
    attached = [a.pid for a in ctx.frame.attached if a.pid in owners]
    if attached:
        return (f"Trainer {attached[0]} is attached: its step timings and the advice on its "
                "input pipeline say what to change.")
    visible = [pid for pid in owners if (row := ctx.process(pid)) is not None and row.in_proc]
    if not visible:
        hidden = (f" ({_pids(owners)} {'are' if len(owners) > 1 else 'is'} in another PID "
                  "namespace)" if owners else "")
        return (f"No process on {'these GPUs' if len(indices) > 1 else 'this GPU'} is visible "
                f"to gputop{hidden}: run gputop where the trainer runs to see which one holds "
                "it, or start the trainer with gputop run to time its steps.")
    attach = " or ".join(f"gputop --attach {pid}" for pid in visible)
    return (f"Time the steps of {_pids(visible)} ({attach}, or start it with gputop run): its "
            "steps say whether the wait is the DataLoader, host code or a CPU it lacks.")


def _pids(pids: list[int]) -> str:
    """'PID 7', 'PIDs 7, 9'."""
    return f"PID{'s' if len(pids) > 1 else ''} {', '.join(map(str, pids))}"


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
    """Several training processes on one GPU (on one MIG instance of a GPU in MIG mode: each
    instance is a GPU of its own) time-slice it and slow each other."""
    out = []
    for gpu in ctx.frame.gpu.gpus:
        for where, util_percent, users in _sharers(gpu):
            names = ", ".join(
                f"{p.pid} ({(p.memory_used_bytes or 0) / GIB:.1f} GiB)" for p in users
            )
            util = "n/a" if util_percent is None else f"{util_percent:.0f}%"
            out.append(Advice(
                id="gpu-shared",
                severity="warn",
                title=f"{where} is shared by {len(users)} processes",
                evidence=f"{where} (util {util}) holds memory of PIDs {names}",
                action="Give each trainer its own GPU (CUDA_VISIBLE_DEVICES) or run them one "
                "after the other: sharing a card makes both jobs slower.",
            ))
    return out


def _sharers(gpu: GpuSample) -> list[tuple[str, float | None, list[GpuProcess]]]:
    """Each GPU, or MIG instance, that two or more processes hold memory on: its name, its
    util and those processes."""
    places: dict[str, tuple[float | None, list[GpuProcess]]] = {}
    for p in gpu.processes:
        if (p.memory_used_bytes or 0) < SHARED_MIN_BYTES:
            continue
        instance = instance_of(gpu, p)
        where, util = ((instance_label(gpu, instance), instance.util_percent) if instance
                       else (f"GPU {gpu.index}", gpu.util_percent))
        places.setdefault(where, (util, []))[1].append(p)
    return [(where, util, users) for where, (util, users) in places.items() if len(users) > 1]
