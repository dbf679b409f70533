"""`make bench`: every benchmark in turn, each with ratios to a reference from the same run.

About 27 minutes on a 2-core VM (benchmarks/RESULTS.md; the soak runs 5 of them;
`python benchmarks/soak.py` alone runs 10); `--quick` for a rough look in about 6.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ("bench_sampler.py", "bench_steps.py", "bench_record.py", "bench_report.py",
         "bench_probe.py", "bench_membw.py", "bench_tui.py", "bench_breakdown.py", "bench_fleet.py",
         "soak.py")
ARGS = {"soak.py": ["--minutes", "5"]}
QUICK_ARGS = {
    "bench_sampler.py": ["--quick"],
    "bench_steps.py": ["--rounds", "3"],
    "bench_probe.py": ["--rounds", "60"],
    "bench_membw.py": ["--repeat", "1", "--seconds", "4"],
    "bench_tui.py": ["--quick"],
    "bench_breakdown.py": ["--quick"],
    "soak.py": ["--minutes", "1.5"],
}


def main() -> int:
    """Run each benchmark script that exists; report which failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs of each")
    args = parser.parse_args()
    extra = QUICK_ARGS if args.quick else ARGS
    failed = []
    began = time.monotonic()
    for name in ORDER:
        script = HERE / name
        if not script.exists():
            print(f"== {name}: missing", flush=True)
            failed.append(name)
            continue
        command = [sys.executable, str(script), *extra.get(name, [])]
        print(f"\n== {' '.join([name, *extra.get(name, [])])}", flush=True)
        started = time.monotonic()
        code = subprocess.call(command, cwd=HERE.parent)
        print(f"== {name}: exit {code} after {time.monotonic() - started:.0f} s", flush=True)
        if code:
            failed.append(name)
    print(f"\nmake bench: {time.monotonic() - began:.0f} s")
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
