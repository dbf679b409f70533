"""Regenerate screenshots/*.svg: the real app in demo mode, fed deterministic frames.

Simulated GPUs (data-starved and compute-bound scenarios), the recorded process list
and an attached trainer, at 80x24 and 160x48. Run with `make screenshots`.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gputop.tui import build_app  # noqa: E402
from tests.helpers.tui import FedSampler, frames  # noqa: E402

OUT = REPO / "screenshots"
SIZES = ((80, 24), (160, 48))
SCENARIOS = ("data-starved", "compute-bound")


async def shoot(scenario: str, size: tuple[int, int]) -> Path:
    """One screenshot of `scenario` at `size` after 70 s of history."""
    app = build_app(FedSampler())
    starved = scenario == "data-starved"
    async with app.run_test(size=size) as pilot:
        for frame in frames(scenario, 70, attach=starved, advice=starved):
            app.show_frame(frame)
        await pilot.pause()
        name = f"{scenario}-{size[0]}x{size[1]}.svg"
        app.save_screenshot(filename=name, path=str(OUT))
    return OUT / name


def main() -> int:
    """Write every screenshot and list them."""
    OUT.mkdir(exist_ok=True)
    for scenario in SCENARIOS:
        for size in SIZES:
            print(asyncio.run(shoot(scenario, size)).relative_to(REPO))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
