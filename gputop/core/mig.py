"""Where a GPU process runs, named: its GPU, or the MIG instance of it when the GPU is split."""

from __future__ import annotations

from gputop.core.model import GpuProcess, GpuReport, GpuSample, MigInstance


def instance_label(gpu: GpuSample, instance: MigInstance) -> str:
    """A MIG instance as people name it, e.g. "GPU 0 MIG 1g.10gb gi 1 ci 0"."""
    return (f"GPU {gpu.index} MIG {instance.profile} gi {_id(instance.gpu_instance_id)} "
            f"ci {_id(instance.compute_instance_id)}")


def instance_of(gpu: GpuSample, process: GpuProcess) -> MigInstance | None:
    """The MIG instance of `gpu` that `process` runs on (None: no MIG, or none matches)."""
    for instance in gpu.mig_instances:
        if (instance.gpu_instance_id == process.gpu_instance_id
                and instance.compute_instance_id == process.compute_instance_id):
            return instance
    return None


def processes_on(gpu: GpuSample, instance: MigInstance) -> tuple[GpuProcess, ...]:
    """The processes `gpu` reports on its MIG instance `instance`."""
    return tuple(p for p in gpu.processes if instance_of(gpu, p) is instance)


def process_places(report: GpuReport) -> dict[int, tuple[str, ...]]:
    """PID -> where it runs: "GPU 0", or its MIG instance's label on a GPU in MIG mode."""
    places: dict[int, list[str]] = {}
    for gpu in report.gpus:
        for process in gpu.processes:
            instance = instance_of(gpu, process)
            label = instance_label(gpu, instance) if instance else f"GPU {gpu.index}"
            if label not in places.setdefault(process.pid, []):
                places[process.pid].append(label)
    return {pid: tuple(labels) for pid, labels in places.items()}


def _id(value: int | None) -> str:
    return "?" if value is None else str(value)
