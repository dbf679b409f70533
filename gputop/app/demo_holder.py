"""The idle GPU holder `gputop --demo mixed` shows on its memory-full simulated GPU: a real
process that does nothing, as an idle notebook kernel or a forgotten job does, and whose
(simulated) GPU memory gpu-idle tells the user to free. It exits when gputop does."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from gputop.app.children import DemoTrainer
from gputop.app.demo_trainer import die_with_parent, orphaned

ORPHAN_CHECK_S = 30.0  # a backup for PDEATHSIG: rare enough to read as no CPU at all


def holder_gpu(demo: str | None, gpus: int | None) -> int | None:
    """The simulated GPU the demo's idle holder holds with `--demo DEMO --gpus GPUS` (None:
    not a demo, or a scenario or a count without one)."""
    if demo is None:
        return None
    from gputop.sources.gpu import DEFAULT_SIMULATED_COUNT
    from gputop.sources.simulated import idle_holder_gpu

    return idle_holder_gpu(demo, DEFAULT_SIMULATED_COUNT if gpus is None else gpus)


def start_demo_holder(gpu: int | None) -> DemoTrainer | None:
    """Start the holder in the background when the scenario has a GPU for it (None: none)."""
    if gpu is None:
        return None
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    process = subprocess.Popen(
        [sys.executable, "-m", "gputop.app.demo_holder"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=env, close_fds=True, start_new_session=True,
    )
    return DemoTrainer(process)


def demo_owners(trainer_pid: int | None, holder: DemoTrainer | None,
                gpu: int | None) -> list[int]:
    """The simulated GPUs' owners by index: the trainer on GPU 0, the holder on its GPU (0:
    no owner)."""
    owners = [trainer_pid or 0]
    if holder is not None and gpu is not None:
        owners += [0] * (gpu + 1 - len(owners))
        owners[gpu] = holder.pid
    return owners


def main() -> int:
    """Hold on, doing nothing, until the parent goes away."""
    parent = os.getppid()
    die_with_parent(parent)
    while not orphaned(parent):
        time.sleep(ORPHAN_CHECK_S)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
