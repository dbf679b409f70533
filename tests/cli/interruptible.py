"""A stdlib trainer for `gputop run` tests: data-bound steps, and a Ctrl-C handler that saves.

Arguments: MARK (the file its KeyboardInterrupt handler writes), STEPS (0: until
interrupted), CODE (its exit code after Ctrl-C). It prints its PID and session, then a line
every 20 steps, so a test can see it go on writing to its log.
"""

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from gputop import probe

mark, steps, code = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
probe.annotate(num_workers=0, batch_size=8, device="cpu")
print(f"pid {os.getpid()} sid {os.getsid(0)}", flush=True)


def batches() -> Iterator[int]:
    """Loading a batch takes longer than computing on it: the steps are data-bound."""
    n = 0
    while not steps or n < steps:
        time.sleep(0.012)
        yield n
        n += 1


done = 0
try:
    for _ in probe.watch(batches()):
        with probe.phase("forward"):
            time.sleep(0.002)
        with probe.phase("optimizer"):
            pass
        done += 1
        if done % 20 == 0:
            print(f"step {done}", flush=True)
except KeyboardInterrupt:
    mark.write_text(f"KeyboardInterrupt after {done} steps: checkpoint saved\n")
    print("interrupted: checkpoint saved", flush=True)
    sys.exit(code)
print(f"finished {done} steps", flush=True)
