"""`make bench`: every benchmark in turn, each with ratios to a reference from the same run."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ("bench_sampler.py", "bench_record.py", "bench_report.py", "bench_probe.py",
         "bench_membw.py", "bench_tui.py", "bench_fleet.py", "soak.py")


def main() -> int:
    """Run each benchmark script that exists; report which failed."""
    failed = []
    for name in ORDER:
        script = HERE / name
        if not script.exists():
            print(f"== {name}: missing", flush=True)
            failed.append(name)
            continue
        print(f"\n== {name}", flush=True)
        started = time.monotonic()
        code = subprocess.call([sys.executable, str(script)], cwd=HERE.parent)
        print(f"== {name}: exit {code} after {time.monotonic() - started:.0f} s", flush=True)
        if code:
            failed.append(name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
