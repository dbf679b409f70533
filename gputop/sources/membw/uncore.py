"""Memory-controller PMUs from sysfs: discovery, event encoding, which events give DRAM bytes."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gputop.sources.membw import hardware as hw
from gputop.sources.membw import perf_event as pe

Direction = Literal["read", "write", "total"]
FieldRange = tuple[str, int, int]
UNIT_BYTES = {"b": 1.0, "byte": 1.0, "bytes": 1.0, "kb": 1e3, "mb": 1e6, "gb": 1e9,
              "kib": 2.0**10, "mib": 2.0**20, "gib": 2.0**30}
# (source, PMU name, (direction, event names, the event's spec where sysfs lists none) per
# side, detail): Intel's families best first, never mixed (traffic would count twice), then
# perf's amdzen4 memory-controller events (the kernel exposes only amd_umc's format).
FAMILIES: tuple[tuple[str, str, tuple[tuple[Direction, tuple[str, ...], str | None], ...],
                      str], ...] = (
    ("perf-uncore-imc", r"uncore_imc_\d+", (("read", ("cas_count_read",), None),
                                             ("write", ("cas_count_write",), None)),
     "{} IMC PMU(s), CAS counts"),
    ("perf-uncore-imc", r"uncore_imc_free_running(_\d+)?", (
        ("read", ("data_read",), None), ("write", ("data_write",), None)),
     "{} IMC PMU(s), free-running"),
    ("perf-uncore-imc", r"uncore_imc", (("read", ("data_reads",), None),
                                         ("write", ("data_writes",), None)),
     "{} IMC PMU(s), client IMC"),
    ("perf-amd-umc", r"amd_umc_\d+", (("read", ("umc_cas_cmd.rd",), "event=0x0a,rdwrmask=0x1"),
                                       ("write", ("umc_cas_cmd.wr",), "event=0x0a,rdwrmask=0x2")),
     "{} UMC PMU(s), CAS commands"),
)
# perf's amdzen1..3 data-fabric events: 64-byte requests with data per DRAM channel.
AMD_DF_CHANNEL_CODES = (0x07, 0x47, 0x87, 0xC7, 0x107, 0x147, 0x187, 0x1C7)


@dataclass(frozen=True)
class PmuEvent:
    """One sysfs event alias: its terms and the optional .scale/.unit files."""

    spec: str
    scale: float | None = None
    unit: str | None = None


@dataclass(frozen=True)
class Pmu:
    """One /sys/bus/event_source/devices entry."""

    name: str
    type: int
    cpus: tuple[int, ...]
    formats: dict[str, tuple[FieldRange, ...]] = field(default_factory=dict)
    events: dict[str, PmuEvent] = field(default_factory=dict)


@dataclass(frozen=True)
class PlannedEvent:
    """One counter to open on each of `cpus`, and how many bytes one count means."""

    pmu: str
    pmu_type: int
    cpus: tuple[int, ...]
    event: str
    config: tuple[int, int, int]
    bytes_per_count: float
    direction: Direction


@dataclass(frozen=True)
class UncorePlan:
    """The events that add up to DRAM traffic, labelled with the ladder rung they belong to."""

    source: str
    events: tuple[PlannedEvent, ...]
    detail: str


def parse_format(text: str) -> tuple[FieldRange, ...]:
    """'config:0-7,32-35' -> (('config', 0, 7), ('config', 32, 35)); 'config1:9' is one bit."""
    name, _, ranges = text.strip().partition(":")
    if name not in ("config", "config1", "config2") or not ranges:
        raise ValueError(f"bad format {text!r}")
    return tuple((name, int(lo), int(hi or lo))
                 for lo, _, hi in (part.partition("-") for part in ranges.split(",")))


def encode_event(spec: str, formats: dict[str, tuple[FieldRange, ...]]) -> tuple[int, int, int]:
    """Encode 'event=0x04,umask=0x03' into (config, config1, config2) with the PMU's formats."""
    regs = {"config": 0, "config1": 0, "config2": 0}
    for term in filter(None, spec.strip().split(",")):
        key, _, raw = term.partition("=")
        key = key.strip()
        value = int(raw, 0) if raw else 1
        if key in regs and key not in formats:
            regs[key] |= value
            continue
        if key not in formats:
            raise ValueError(f"term {key!r} has no format")
        for reg, lo, hi in formats[key]:
            width = hi - lo + 1
            regs[reg] |= (value & ((1 << width) - 1)) << lo
            value >>= width
        if value:
            raise ValueError(f"value of {key!r} does not fit its format")
    return regs["config"], regs["config1"], regs["config2"]


def bytes_per_count(event: PmuEvent) -> float:
    """What one count is worth in bytes: .scale x .unit, else one 64-byte cache line."""
    if event.scale is None:
        return hw.CACHE_LINE
    unit = (event.unit or "bytes").strip().lower()
    if unit not in UNIT_BYTES:
        raise ValueError(f"unknown unit {event.unit!r}")
    return event.scale * UNIT_BYTES[unit]


def read_pmu(path: Path) -> Pmu | None:
    """One PMU folder (type, cpumask, format/*, events/* with .scale/.unit), or None if unusable."""
    try:
        type_ = int((hw.read_text(path / "type") or "").strip())
    except ValueError:
        return None
    formats: dict[str, tuple[FieldRange, ...]] = {}
    for fmt in sorted((path / "format").glob("*")):
        with contextlib.suppress(ValueError):  # unreadable ("") or not a format
            formats[fmt.name] = parse_format(hw.read_text(fmt) or "")
    events: dict[str, PmuEvent] = {}
    for ev in sorted((path / "events").glob("*")):
        if ev.suffix in (".scale", ".unit", ".snapshot", ".per-pkg") or (
                spec := hw.read_text(ev)) is None:
            continue
        scale_text, unit = (hw.read_text(ev.with_name(ev.name + s)) for s in (".scale", ".unit"))
        try:
            scale = float(scale_text) if scale_text is not None else None
        except ValueError:
            scale = None
        events[ev.name] = PmuEvent(spec.strip(), scale, unit.strip() if unit else None)
    return Pmu(path.name, type_, hw.parse_cpulist(hw.read_text(path / "cpumask") or ""), formats,
               events)


def discover_pmus(sys_root: Path | str = "/sys") -> list[Pmu]:
    """Every PMU under sys_root/bus/event_source/devices that names memory controllers or DF."""
    names = (n for n in hw.pmu_names(sys_root) if hw.is_uncore_pmu(n))
    return [pmu for n in names if (pmu := read_pmu(hw.pmu_dir(sys_root) / n)) is not None]


def _planned(pmu: Pmu, name: str, event: PmuEvent, direction: Direction) -> PlannedEvent | None:
    if not pmu.cpus:
        return None
    try:
        config, per_count = encode_event(event.spec, pmu.formats), bytes_per_count(event)
    except ValueError:
        return None
    return PlannedEvent(pmu.name, pmu.type, pmu.cpus, name, config, per_count, direction)


def is_zen1_to_zen3(cpu: tuple[str, int, int] | None) -> bool:
    """Family 17h (Zen 1/2) or a Zen 3 model of family 19h: the DF events below apply."""
    if cpu is None or cpu[0] != "AuthenticAMD":
        return False
    _, family, model = cpu
    return family == 0x17 or (family == 0x19 and (model <= 0x0F or 0x20 <= model <= 0x5F))


def plan_uncore(pmus: list[Pmu], cpu: tuple[str, int, int] | None = None) -> UncorePlan | None:
    """The best memory-controller plan this machine's PMUs allow (the first family in
    FAMILIES with events, else amd_df's DRAM channels), or None."""
    for source, pattern, sides, detail in FAMILIES:
        family = [p for p in pmus if re.fullmatch(pattern, p.name)]
        events = tuple(planned for pmu in family for direction, names, spec in sides
                       if (name := next((n for n in names if n in pmu.events), names[0]))
                       and (event := pmu.events.get(name) or (spec and PmuEvent(spec)))
                       and (planned := _planned(pmu, name, event, direction)))
        if events:
            return UncorePlan(source, events, detail.format(len(family)))
    df = next((p for p in pmus if p.name == "amd_df"), None)
    if df is None:
        return None
    named = {n: e for n, e in df.events.items() if n.startswith("dram_channel_data_controller_")}
    if not named and is_zen1_to_zen3(cpu):
        named = {f"dram_channel_data_controller_{i}": PmuEvent(f"event={code:#x},umask=0x38")
                 for i, code in enumerate(AMD_DF_CHANNEL_CODES)}
    df_events = tuple(p for n, e in sorted(named.items()) if (p := _planned(df, n, e, "total")))
    return UncorePlan("perf-amd-df", df_events, f"{len(df_events)} DRAM channel event(s)") \
        if df_events else None


class UncoreMeter(pe.CpuCounters):
    """Open counters for a plan and turn their deltas into DRAM bytes/s."""

    confidence = "measured"

    @classmethod
    def open(cls, plan: UncorePlan, opener: pe.Opener = pe.PerfCounter.open,
             clock: Callable[[], float] = time.monotonic) -> UncoreMeter:
        """Open and enable every event on each CPU of its PMU's cpumask; all or nothing."""
        meter = cls(plan.source, plan.detail, pe.open_all([
            (e.pmu_type, e.config[0], {"config1": e.config[1], "config2": e.config[2],
                                       "cpu": cpu}, e.direction, e.bytes_per_count)
            for e in plan.events for cpu in e.cpus], opener), clock)
        meter.read()
        return meter

    def read(self) -> hw.Traffic | None:
        """Bytes/s by direction since the last read; None on the first read."""
        delta = self.delta()
        return None if delta is None else traffic_from_sums(delta[0], delta[3], delta[1])


def traffic_from_sums(sums: dict[str, float], seconds: float, unseen: int = 0) -> hw.Traffic:
    """Per-direction byte sums over `seconds` -> Traffic; read/write only when both are counted."""
    note = f"{unseen} counter(s) not scheduled" if unseen else None
    if sums["total"]:
        return hw.Traffic(None, None, sums["total"] / seconds, note)
    read, write = sums["read"] / seconds, sums["write"] / seconds
    return hw.Traffic(read, write, read + write, note)


def open_uncore(sys_root: Path | str = "/sys", proc_root: Path | str = "/proc",
                opener: pe.Opener = pe.PerfCounter.open) -> tuple[UncoreMeter | None, str]:
    """The uncore meter for this machine, or None and the reason it refused."""
    plan = plan_uncore(discover_pmus(sys_root), hw.read_cpu_id(proc_root))
    if plan is None:
        return None, hw.NO_UNCORE_PMU
    refusal = pe.cpu_wide_refusal(proc_root)
    if refusal is not None:
        return None, f"{plan.source}: {refusal}"
    try:
        return UncoreMeter.open(plan, opener), plan.detail
    except OSError as exc:
        verdict = "not permitted" if exc.errno in pe.DENIED_ERRNOS else "cannot open"
        return None, f"{plan.source}: {verdict} ({exc.strerror or exc})"
