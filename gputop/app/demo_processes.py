"""The real processes `gputop --demo SCENARIO` shows beside its simulated GPUs: the
scenario's trainer on GPU 0 and, where the scenario has one, its idle holder. Started
together, and stopped together however the command ends (each leads a process group of its
own, so what they start goes with them)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gputop.app.children import DemoTrainer


@dataclass(frozen=True)
class DemoProcesses:
    """What a demo started: its trainer, its holder (None: none), and the simulated GPUs'
    owners by index (0: no owner)."""

    trainer: DemoTrainer | None = None
    holder: DemoTrainer | None = None
    owners: list[int] = field(default_factory=list)


@contextmanager
def demo_processes(demo: str | None, gpus: int | None,
                   with_trainer: bool = True) -> Iterator[DemoProcesses]:
    """Start `demo`'s processes (nothing when `demo` is None; no trainer without
    `with_trainer` or in a scenario that has none) and stop every one of them on leaving."""
    if demo is None:
        yield DemoProcesses()
        return
    from gputop.app import children
    from gputop.app.demo_holder import demo_owners, holder_gpu, start_demo_holder
    from gputop.app.demo_trainer import NO_TRAINER

    with ExitStack() as started:
        trainer = None
        if with_trainer and demo not in NO_TRAINER:  # it behaves as the scenario's GPUs look
            trainer = children.start_demo_trainer(extra_args=("--scenario", demo))
            started.callback(trainer.stop)
        held = holder_gpu(demo, gpus)
        holder = start_demo_holder(held)
        if holder is not None:
            started.callback(holder.stop)
        yield DemoProcesses(trainer, holder,
                            demo_owners(trainer.pid if trainer else None, holder, held))
