"""Live-TUI entry points for the CLI: plain, --demo (with the demo trainer) and attached runs."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

SamplerFactory = Callable[..., Any]


def run_live(
    *,
    interval_s: float = 1.0,
    demo: str | None = None,
    gpus: int | None = None,
    membw: str = "auto",
    attach_pid: int | None = None,
    build_sampler: SamplerFactory | None = None,
) -> int:
    """The live TUI; with `demo`, simulated GPUs plus the real demo trainer on GPU 0."""
    from gputop.tui import run_tui

    factory = build_sampler or _default_factory()
    trainer = None
    if demo is not None:
        from gputop.tui.demo import start_demo_trainer

        trainer = start_demo_trainer()
    try:
        sampler = factory(demo=demo, gpus=gpus, membw=membw, interval_s=interval_s, defer=True)
        if trainer is not None and hasattr(sampler.gpu, "set_owner_pids"):
            sampler.gpu.set_owner_pids([trainer.pid])
    except BaseException:
        if trainer is not None:
            trainer.stop()
        raise
    return run_tui(sampler, attach_pid=attach_pid, demo=trainer)


def run_attached_child(
    child: subprocess.Popen[bytes],
    *,
    interval_s: float = 1.0,
    membw: str = "auto",
    build_sampler: SamplerFactory | None = None,
) -> int:
    """`gputop run`: the TUI attached to `child`; returns the child's exit code."""
    from gputop.tui import run_tui

    factory = build_sampler or _default_factory()
    try:
        sampler = factory(demo=None, gpus=None, membw=membw, interval_s=interval_s, defer=True)
        run_tui(sampler, attach_pid=child.pid)
    finally:
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(5)
            except subprocess.TimeoutExpired:
                child.kill()
    from gputop.sources.launch import exit_status

    return exit_status(child.wait())


def _default_factory() -> SamplerFactory:
    from gputop.wiring import build_sampler

    return build_sampler
