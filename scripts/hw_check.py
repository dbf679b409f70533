"""`make hw-check`: what each memory-bandwidth rung and the memory-layout check say on this machine.

Run from the repository root: `PYTHONPATH=. python3 scripts/hw_check.py [--seconds S]`.
It opens every rung of the ladder in turn (resctrl MBM, perf uncore, the core PMU, the
canary's plan) and prints whether it is available here or why not, then which rung
`--membw auto` picks and two readings from it `--seconds` apart (with the processes that
made the traffic, where the rung can tell), then every source of the memory-module list
and the layout check's verdict. Read-only; needs only the standard library and gputop.
Exit 0 when it could report, 1 when a check itself crashed (the line says which).
Run it as root too: several rungs and the SMBIOS records need it.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from gputop.core.model import MemoryBandwidthSample, MemoryLayoutCheck
from gputop.sources.membw import open_membw_source
from gputop.sources.membw.canary import getconf_llc_bytes, llc_bytes, plan_canary
from gputop.sources.membw.corepmu import core_events, core_pmus, open_core_pmu
from gputop.sources.membw.dimm_check import check_layout, read_layout
from gputop.sources.membw.dimm_slots import MemoryLayout, read_edac, read_udev
from gputop.sources.membw.hardware import open_resctrl, read_cpu_id
from gputop.sources.membw.perf_event import cpu_wide_refusal, paranoid_level
from gputop.sources.membw.smbios import (
    parse_dmidecode,
    read_dmi_entries,
    read_dmi_table,
    run_dmidecode,
)
from gputop.sources.membw.uncore import open_uncore

LABEL_WIDTH = 20


def line(label: str, text: str) -> None:
    """One verdict line: a fixed-width label, then what was found."""
    print(f"  {label:<{LABEL_WIDTH}} {text}")


def cpu_model() -> str:
    """'model name' of the first CPU, or the machine type."""
    try:
        for row in Path("/proc/cpuinfo").read_text().splitlines():
            if row.startswith("model name"):
                return row.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def header() -> None:
    """Who and where: the verdicts depend on both."""
    print(f"gputop hw-check on {platform.node()}: {cpu_model()}, {os.cpu_count()} CPUs, "
          f"Linux {platform.release()}")
    print(f"  uid {os.geteuid()}, perf_event_paranoid={paranoid_level()}, CPU-wide perf "
          f"events: {cpu_wide_refusal() or 'allowed'}")


def rung(label: str, opener: Callable[[], tuple[object | None, str]]) -> None:
    """Open one hardware rung, print available (with what) or n/a (with why), close it."""
    meter, why = opener()
    if meter is None:
        line(label, f"n/a — {why}")
        return
    line(label, f"available — {why}")
    close = getattr(meter, "close", None)
    if close is not None:
        close()


def rungs() -> None:
    """Every rung, best first."""
    print("\nmemory-bandwidth rungs (best first; --membw auto takes the first available):")
    rung("resctrl MBM", lambda: open_resctrl())
    rung("perf uncore", lambda: open_uncore())
    pmus = core_pmus()
    events = ", ".join(e.name for e in core_events(read_cpu_id()))
    line("core PMUs", ", ".join(pmus) or "none listed")
    line("core events tried", events)
    rung("perf core", lambda: open_core_pmu())
    llc = llc_bytes() or getconf_llc_bytes()
    plan = plan_canary(llc)
    line("canary estimate", ("available — " if plan.footprint else "n/a — ") + plan.reason)


def describe(sample: MemoryBandwidthSample) -> str:
    """One reading: the number and what it is, or n/a and why."""
    if sample.total_bytes_per_s is None and sample.pressure is None:
        return f"{sample.confidence} (why: the note below)"
    parts = [f"{sample.confidence}"]
    if sample.total_bytes_per_s is not None:
        parts.append(f"total {sample.total_bytes_per_s / 1e9:.2f} GB/s")
    if sample.pressure is not None:
        parts.append(f"pressure {sample.pressure:.2f} vs {sample.relative_to}")
    return ", ".join(parts)


def reading(seconds: float) -> None:
    """What --membw auto picks, and two samples from it `seconds` apart."""
    source = open_membw_source("auto")
    if source is None:
        return
    try:
        print(f"\n--membw auto picks: {source.source}")
        source.sample()
        time.sleep(seconds)
        sample = source.sample()
        line("reading", describe(sample))
        for consumer in sample.top_consumers:
            line("  top consumer", f"{consumer.name or '?'} (pid {consumer.pid}) "
                                   f"{consumer.bytes_per_s / 1e9:.2f} GB/s")
        if sample.note:
            line("note", sample.note)
    finally:
        source.close()


def found(layout: MemoryLayout | None) -> str:
    """A module list in one line, or 'nothing'."""
    if layout is None or not (layout.modules or layout.empty):
        return "nothing"
    return layout.summary() + (f"; {len(layout.empty)} empty slot(s)" if layout.empty else "")


def layout_sources() -> None:
    """Every source of the module list, then the verdict on the one gputop uses."""
    print("\nmemory layout (the first source that lists modules is used):")
    line("udev DMI data", found(read_udev()))
    line("SMBIOS entries", found(read_dmi_entries()))
    line("SMBIOS table", found(read_dmi_table()))
    text = run_dmidecode()
    why_not = ("not installed" if not shutil.which("dmidecode")
               else "needs root" if os.geteuid() else "gave nothing")
    line("dmidecode", found(parse_dmidecode(text)) if text else why_not)
    line("EDAC", found(read_edac()))
    print_check(check_layout(read_layout()))


def print_check(check: MemoryLayoutCheck) -> None:
    """The layout check's verdict, findings and the slots they name."""
    counts = (f", {check.channels_populated} of {check.channels_total} channels populated"
              if check.channels_total else "")
    line("layout check", f"{check.verdict}{counts}" + (f" ({check.source})" if check.source
                                                       else ""))
    for finding in check.findings:
        line("  finding", finding)
    if check.reason:
        line("  why", check.reason)


def main(argv: list[str] | None = None) -> int:
    """Run every check; a check that crashes is one line and exit 1, the rest still run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=1.0,
                        help="time between the two readings (default 1)")
    args = parser.parse_args(argv)
    failed = False
    for check in (header, rungs, lambda: reading(args.seconds), layout_sources):
        try:
            check()
        except Exception:  # a crash in one check must not hide the others
            failed = True
            print(f"  CHECK CRASHED: {traceback.format_exc().strip().splitlines()[-1]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
