"""What the rules look at: the newest Frame plus a short history of what came before."""

from __future__ import annotations

from dataclasses import dataclass

from gputop.model import AttachState, Frame, GpuSample, ProcessSample, TrainerGroup

CORE_PERCENT = 100.0


@dataclass(frozen=True, slots=True)
class Context:
    """The newest frame and, per GPU index, its util history (oldest first, newest last)."""

    frame: Frame
    gpu_util_history: dict[int, tuple[float, ...]]

    def process(self, pid: int) -> ProcessSample | None:
        """The process row for `pid`, if it was seen this tick."""
        for p in self.frame.processes:
            if p.pid == pid:
                return p
        return None

    def trainer(self, pid: int) -> TrainerGroup | None:
        """The worker group of trainer `pid`, if grouping found one."""
        for t in self.frame.trainers:
            if t.pid == pid:
                return t
        return None

    def gpus_of(self, pid: int) -> list[GpuSample]:
        """The GPUs on which `pid` holds memory."""
        return [g for g in self.frame.gpu.gpus if any(p.pid == pid for p in g.processes)]

    def free_cores(self) -> float:
        """Cores the host left idle this tick (cpu_percent is of all cores)."""
        host = self.frame.host
        busy = (host.cpu_percent or 0.0) / CORE_PERCENT * host.cpu_count
        return max(0.0, host.cpu_count - busy)


def counted(n: int, noun: str) -> str:
    """'1 worker', '2 workers'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def cpu_only(ctx: Context, state: AttachState) -> bool:
    """The trainer says it trains on the CPU and holds no GPU memory."""
    return state.config.device == "cpu" and not ctx.gpus_of(state.pid)


def num_workers(ctx: Context, state: AttachState) -> int | None:
    """Workers the loader was configured with, else the workers grouping found."""
    if state.config.num_workers is not None:
        return state.config.num_workers
    group = ctx.trainer(state.pid)
    return len(group.worker_pids) if group else None


def per_worker_cpu(ctx: Context, pid: int) -> float | None:
    """Average %CPU of one DataLoader worker of trainer `pid` (100 = one core)."""
    group = ctx.trainer(pid)
    if group is None or not group.worker_pids:
        return None
    rows = [ctx.process(w) for w in group.worker_pids]
    if any(r is None or r.cpu_percent is None for r in rows):
        return None  # no rate yet (a first tick, a worker just born): unknown, not idle
    return group.workers_cpu_percent / len(group.worker_pids)


def is_data_bound(state: AttachState) -> bool:
    """The attached trainer's window says its steps wait for data."""
    return state.summary.verdict == "data-bound" and state.summary.steps > 0


def input_evidence(state: AttachState) -> str:
    """The numbers that make a trainer data-bound, in one phrase."""
    s = state.summary
    share = s.input_bound_percent or 0.0
    text = f"input is {share:.0f}% of step time over {s.steps} steps"
    median = dict(s.median_phase_ns)
    data, step = median.get("data"), s.median_step_ns
    if data is not None and step:
        text += f" (median data wait {data / 1e6:.1f} ms of a {step / 1e6:.1f} ms step)"
    return text


def gpu_memory_fraction(gpu: GpuSample) -> float | None:
    """Used / total device memory, or None when either is unknown."""
    if gpu.memory_used_bytes is None or not gpu.memory_total_bytes:
        return None
    return gpu.memory_used_bytes / gpu.memory_total_bytes
