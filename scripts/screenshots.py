"""Regenerate screenshots/*.svg from real runs of `gputop --demo SCENARIO`.

For each scenario: the real demo trainer (real processes, real probe, real DataLoader
workers) on simulated GPUs (labelled SIMULATED on screen), the real sampler and the real
app attached to the trainer, run headless until the step pane has a window and the advice
has settled, then saved at 80x24 and 160x48. Run with `make screenshots`; `--quick` runs a
few seconds only (for tests), `--out DIR` writes elsewhere.

Every process starts from the repository root with relative paths, so no command line on
screen names this checkout; a screenshot that still holds its path is removed (exit 1).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gputop.app.children import DemoTrainer  # noqa: E402
from gputop.app.demo_holder import demo_owners, holder_gpu  # noqa: E402
from gputop.app.demo_trainer import NO_TRAINER  # noqa: E402
from gputop.app.wiring import build_sampler  # noqa: E402
from gputop.sources.simulated import SCENARIOS as KNOWN  # noqa: E402
from gputop.tui import build_app  # noqa: E402

OUT = REPO / "screenshots"
SIZES = ((80, 24), (160, 48))
WANTED = ("data-starved", "compute-bound", "host-bound")
SCENARIOS = tuple(s for s in WANTED if s in KNOWN)
SETTLE_S = 35.0  # real frames before the shot: a full step window, advice settled
QUICK_S = 20.0  # the window past warm-up
AGREE_S = 15.0


class LeakedPath(Exception):
    """A screenshot names this checkout's absolute path."""


def start_module(module: str, *args: str) -> DemoTrainer:
    """`python -m MODULE ARGS` from the repository root, as `gputop --demo` starts its
    children, but with argv[0] "python" so the process table shows no path of this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = "."
    # "python" is looked up on PATH for the interpreter's prefix: this one's, with its torch
    env["PATH"] = os.pathsep.join((os.path.dirname(sys.executable), env.get("PATH", "")))
    process = subprocess.Popen(
        ["python", "-m", module, *args], executable=sys.executable, cwd=REPO,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=env, close_fds=True,
    )
    return DemoTrainer(process)


async def shoot(scenario: str, out: Path, settle_s: float) -> list[Path]:
    """Run `scenario` for `settle_s` of real frames; save it at every size."""
    trainer = None
    if scenario not in NO_TRAINER:
        trainer = start_module("gputop.app.demo_trainer", "--scenario", scenario)
    held = holder_gpu(scenario, None)
    holder = start_module("gputop.app.demo_holder") if held is not None else None
    try:
        owners = demo_owners(trainer.pid if trainer else None, holder, held)
        sampler = build_sampler(demo=scenario, owner_pids=owners)
        app = build_app(sampler, attach_pid=trainer.pid if trainer else None)
        saved = []
        try:
            async with app.run_test(size=SIZES[0]) as pilot:
                if trainer is not None:  # the demo's processes, not whatever else runs here
                    await pilot.press("slash", *str(trainer.pid), "enter")
                await asyncio.sleep(settle_s)
                for size in SIZES:
                    await pilot.resize_terminal(*size)
                    await asyncio.sleep(1.5)  # a frame or so at the new size
                    await agreed(app, trainer.pid if trainer else None)
                    await pilot.pause()
                    name = f"{scenario}-{size[0]}x{size[1]}.svg"
                    app.save_screenshot(filename=name, path=str(out))
                    saved.append(out / name)
        finally:
            sampler.stop()
    finally:
        if trainer is not None:
            trainer.stop()
        if holder is not None:
            holder.stop()
    for path in saved:
        check_no_checkout_path(path)
    return saved


async def agreed(app: Any, pid: int | None, most_s: float = AGREE_S) -> None:
    """Wait (at most `most_s`) for a frame whose panes agree on the trainer: its row groups
    as many workers as its loader says it has. Non-persistent workers are replaced at each
    epoch, and a frame between the old ones' exit and the new ones' start shows fewer."""
    deadline = time.monotonic() + most_s
    while pid is not None and time.monotonic() < deadline:
        frame = app.frame
        group = next((g for g in frame.trainers if g.pid == pid), None) if frame else None
        state = next((a for a in frame.attached if a.pid == pid), None) if frame else None
        wanted = state.config.num_workers if state is not None else None
        if group is not None and (wanted is None or len(group.worker_pids) == wanted):
            return
        await asyncio.sleep(0.2)


def check_no_checkout_path(path: Path) -> None:
    """Refuse (and remove) a screenshot that shows where this checkout lives."""
    if str(REPO) in path.read_text(encoding="utf-8"):
        path.unlink()
        raise LeakedPath(f"{path} showed this checkout's path {REPO}: removed")


def main(argv: list[str] | None = None) -> int:
    """Write every screenshot and list them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_S:g} s of frames per scenario instead of {SETTLE_S:g}")
    parser.add_argument("--out", type=Path, default=OUT,
                        help="where to write (default: screenshots/)")
    parser.add_argument("--scenario", action="append", choices=SCENARIOS,
                        help="only this scenario (repeatable; default all)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    os.chdir(REPO)
    for scenario in args.scenario or SCENARIOS:
        try:
            paths = asyncio.run(shoot(scenario, args.out, QUICK_S if args.quick else SETTLE_S))
        except LeakedPath as exc:
            print(f"screenshots: {exc}", file=sys.stderr)
            return 1
        for path in paths:
            print(os.path.relpath(path))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
