"""A stdlib trainer that hands annotate() values JSON cannot hold, then runs its steps."""

import time

from gputop import probe


class Unprintable:
    """Neither str() nor repr() works."""

    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


probe.annotate(big=10**5000, s="\ud800x", obj=object(), raises=Unprintable(), ok="tea",
               device="cpu\ud800")
steps = 0
for _ in probe.watch(range(200)):
    with probe.phase("forward"):
        time.sleep(0.0003)
    steps += 1
print(f"finished {steps} steps", flush=True)
