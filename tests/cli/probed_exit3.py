"""A stdlib trainer for `gputop run` tests: timed steps, a line of output, then exit code 3."""

import sys
import time

from gputop import probe

print("hello from the command", flush=True)
for _ in probe.watch(range(40)):
    with probe.phase("forward"):
        time.sleep(0.003)
    with probe.phase("backward"):
        time.sleep(0.002)
if len(sys.argv) > 1:
    time.sleep(float(sys.argv[1]))
sys.exit(3)
