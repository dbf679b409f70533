"""The core-PMU rung: cache misses x 64 bytes a line, per CPU or per process, with who made them.

It sits between the memory-controller counters and the canary: many cloud VMs expose
the cores' counters while hiding uncore ones. Where CPU-wide events are allowed (root,
CAP_PERFMON, perf_event_paranoid <= 0) one sampling counter per CPU gives the total and,
from its samples, the processes that missed most. Where the kernel lets a user count only
their own processes, coreown.py counts those (and says that other users' are not seen).
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from pathlib import Path

from gputop.sources.membw.coreevents import (
    CACHE_LINE,
    CoreEvent,
    Opener,
    RingFactory,
    core_events,
    core_pmus,
    online_cpus,
    top_consumers,
    why_not,
)
from gputop.sources.membw.coreown import ProcessCoreMeter, open_process_meter
from gputop.sources.membw.perf_event import (
    DENIED_ERRNOS,
    PERF_SAMPLE_PERIOD,
    PERF_SAMPLE_TID,
    Counter,
    CounterValue,
    PerfCounter,
    Ring,
    SampleRing,
    Samples,
    cpu_wide_refusal,
    paranoid_level,
    scaled_delta,
)
from gputop.sources.membw.pmus import NO_CORE_PMU
from gputop.sources.membw.traffic import Traffic
from gputop.sources.membw.uncore import read_cpu_id

SAMPLE_HZ = 50  # per CPU: enough samples a second to name the top few processes


def _notes(*parts: str | None) -> str | None:
    return "; ".join(p for p in parts if p) or None


class SystemCoreMeter:
    """A counter per CPU: the total from the counts, who made it from the samples (if any)."""

    source = "perf-core"
    confidence = "approximate"

    def __init__(
        self,
        event: CoreEvent,
        counters: list[tuple[Counter, Ring | None]],
        proc_root: Path | str = "/proc",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.event = event
        self.sampling = all(ring is not None for _, ring in counters)
        self.detail = f"{event.meaning}, {event.name} on all {len(counters)} CPUs" + (
            "" if self.sampling else " (this PMU cannot sample: no process named)")
        self._counters = counters
        self._proc_root = Path(proc_root)
        self._clock = clock
        self._last: list[CounterValue] | None = None
        self._last_time = 0.0

    def read(self) -> Traffic | None:
        """Bytes/s and the top processes since the last read; None on the first read."""
        now = self._clock()
        values = [counter.read() for counter, _ in self._counters]
        drained = [ring.drain() for _, ring in self._counters if ring is not None]
        last, last_time = self._last, self._last_time
        self._last, self._last_time = values, now
        if last is None or now <= last_time:
            return None
        deltas = [scaled_delta(b, a) for b, a in zip(last, values, strict=True)]
        unseen = sum(d is None for d in deltas)
        total = sum(d for d in deltas if d is not None) * CACHE_LINE / (now - last_time)
        merged = merge_samples(drained)
        note = _notes(f"{unseen} CPU counter(s) not scheduled" if unseen else None,
                      f"{merged.lost} sample(s) lost" if merged.lost else None)
        top = top_consumers({p: float(n) for p, n in merged.periods.items()}, total,
                            self._proc_root)
        return Traffic(None, None, total, note, top)

    def close(self) -> None:
        """Unmap every ring and close every counter."""
        for counter, ring in self._counters:
            if ring is not None:
                ring.close()
            counter.close()
        self._counters = []


def merge_samples(drained: list[Samples]) -> Samples:
    """The samples of every CPU's ring as one."""
    periods: dict[int, int] = {}
    for samples in drained:
        for pid, n in samples.periods.items():
            periods[pid] = periods.get(pid, 0) + n
    return Samples(periods, sum(s.lost for s in drained))


def open_system_meter(
    events: tuple[CoreEvent, ...],
    cpus: tuple[int, ...],
    proc_root: Path | str,
    opener: Opener,
    ring: RingFactory,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[SystemCoreMeter | None, str]:
    """A counter per CPU with the first event the PMU supports, sampling where it can."""
    reasons = []
    for event in events:
        for sampling in (True, False):  # some hypervisors count but cannot interrupt
            try:
                opened = _open_on_cpus(event, cpus, opener, ring if sampling else None)
            except (OSError, ValueError) as exc:
                code = getattr(exc, "errno", None)
                if code in DENIED_ERRNOS:
                    return None, f"not permitted ({event.name}: {os.strerror(code or 0)})"
                if sampling and code == errno.EOPNOTSUPP:
                    continue
                reasons.append(f"{event.name}: {why_not(exc)}")
                break
            meter = SystemCoreMeter(event, opened, proc_root, clock)
            meter.read()
            return meter, meter.detail
    return None, "no usable event (" + "; ".join(reasons) + ")"


def _open_on_cpus(
    event: CoreEvent, cpus: tuple[int, ...], opener: Opener, ring: RingFactory | None
) -> list[tuple[Counter, Ring | None]]:
    """Open, map (when `ring`) and enable the event on every CPU; all or nothing."""
    opened: list[tuple[Counter, Ring | None]] = []
    try:
        for cpu in cpus:
            if ring is None:
                counter = opener(event.type_, event.config, cpu=cpu)
                opened.append((counter, None))
            else:
                counter = opener(event.type_, event.config, cpu=cpu, sample_freq=SAMPLE_HZ,
                                 sample_type=PERF_SAMPLE_TID | PERF_SAMPLE_PERIOD)
                try:
                    opened.append((counter, ring(counter.fd)))
                except (OSError, ValueError):
                    counter.close()
                    raise
            counter.enable()
    except (OSError, ValueError):
        for counter, samples in opened:
            if samples is not None:
                samples.close()
            counter.close()
        raise
    return opened


def open_core_pmu(
    sys_root: Path | str = "/sys",
    proc_root: Path | str = "/proc",
    opener: Opener = PerfCounter.open,
    ring: RingFactory = SampleRing,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[SystemCoreMeter | ProcessCoreMeter | None, str]:
    """The core-PMU meter allowed here (all CPUs, else own processes), or None and why not."""
    pmus = core_pmus(sys_root)
    if not pmus:
        return None, NO_CORE_PMU
    events = core_events(read_cpu_id(proc_root))
    refusal = cpu_wide_refusal(proc_root)
    if refusal is None:
        cpus = online_cpus(sys_root)
        if not cpus:
            return None, "perf core: the online CPU list is unreadable"
        meter, why = open_system_meter(events, cpus, proc_root, opener, ring, clock)
        if meter is not None or not why.startswith("not permitted"):
            return meter, why if meter is not None else f"perf core: {why}"
        refusal = why
    level = paranoid_level(proc_root)
    if level is not None and level > 2:
        return None, (f"perf core: not permitted (perf_event_paranoid={level}; counting "
                      "even one's own processes needs <= 2)")
    own, why = open_process_meter(events, proc_root, opener, clock)
    if own is not None:
        return own, why
    return None, f"perf core: all CPUs {refusal}; own processes {why}"
