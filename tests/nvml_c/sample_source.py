"""Opens gputop's NVML source as gputop does, samples it N times, prints the reports as JSON.

Run by tests/nvml_c/build.py with the C NVML on LD_LIBRARY_PATH: usage TICKS CLOCK_STEP_S.
The clock handed to the source moves by CLOCK_STEP_S between samples, so rates are exact;
the source is then closed twice and sampled once more ("after_close").
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from gputop.sources.nvml import open_nvml


class SteppedClock:
    """A monotonic clock moved by hand between samples."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def loaded_library() -> str | None:
    """The libnvidia-ml this process mapped, from /proc/self/maps."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        if "libnvidia-ml" in line:
            return line.split()[-1]
    return None


def main() -> None:
    ticks, step = int(sys.argv[1]), float(sys.argv[2])
    clock = SteppedClock()
    source = open_nvml(clock=clock)
    reports = []
    for _ in range(ticks):
        reports.append(dataclasses.asdict(source.sample()))
        clock.now += step
    source.close()
    source.close()  # a second close must do nothing
    after_close = dataclasses.asdict(source.sample())
    pynvml = sys.modules.get("pynvml")
    print(json.dumps({
        "source": type(source).__name__,
        "after_close": after_close,
        "pynvml": getattr(pynvml, "__file__", None),
        "library": loaded_library(),
        "reports": reports,
    }))


if __name__ == "__main__":
    main()
