"""Header lines: host, uptime, load, CPU, memory, swap, and the banners nobody may miss."""

from __future__ import annotations

import time
from dataclasses import dataclass

from gputop.core import fmt
from gputop.core.model import Frame, SourceName
from gputop.tui import cells
from gputop.tui.lines import Line, Span, clip


@dataclass(frozen=True)
class ReplayPlace:
    """Where a replay stands: the tick shown of how many, its speed, whether it is held."""

    tick: int
    ticks: int
    speed: float
    paused: bool


def recorded_time(at: float) -> str:
    """A recorded tick's wall-clock time, local, to the second."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def replay_line(frame: Frame, place: ReplayPlace, width: int) -> Line:
    """The banner a replay never hides: recorded when, where in the recording, how fast."""
    spans: list[Span] = [
        (" REPLAY ", "banner-crit"),
        (f" recorded {recorded_time(frame.time)}", "bold"),
        (f"  tick {place.tick}/{place.ticks}  speed {place.speed:g}x", "plain"),
        ("  PAUSED" if place.paused else "", "banner-crit"),
        ("  ←/→ step  g/G first/last  +/- speed  p play/pause", "dim"),
    ]
    return clip(tuple(spans), width)


def header_lines(frame: Frame | None, width: int, *, paused: bool = False,
                 replay: ReplayPlace | None = None) -> list[Line]:
    """The one-line summary plus a banner for CPU-only or simulated mode (and a replay's)."""
    if frame is None:
        return [(("gputop", "title"), ("  waiting for the first sample…", "dim"))]
    host = frame.host
    mem_used = host.memory_total_bytes - host.memory_available_bytes
    mem_frac = mem_used / host.memory_total_bytes if host.memory_total_bytes else None
    swap_frac = host.swap_used_bytes / host.swap_total_bytes if host.swap_total_bytes else None
    cpu_frac = None if host.cpu_percent is None else host.cpu_percent / 100
    wide = width >= 100
    load = " ".join(f"{value:.2f}" if wide else f"{value:.1f}" for value in host.load_average)
    spans: list[Span] = [
        ("gputop ", "title"),
        (host.hostname, "bold"),
        (f"  up {fmt.uptime(host.uptime_s)}", "plain"),
        (f"  load {load}", "plain"),
        ("  CPU ", "dim"),
        (fmt.percent(host.cpu_percent), cells.level(cpu_frac)),
        (f" of {host.cpu_count}" if wide else "", "dim"),
        ("  mem ", "dim"),
        (
            f"{fmt.short_size(mem_used)}/{fmt.short_size(host.memory_total_bytes)}",
            cells.level(mem_frac),
        ),
        ("  swap ", "dim"),
        (
            f"{fmt.short_size(host.swap_used_bytes)}/{fmt.short_size(host.swap_total_bytes)}",
            cells.level(swap_frac, warn=0.25, crit=0.6),
        ),
    ]
    if paused and replay is None:
        spans.insert(1, ("PAUSED ", "banner-crit"))
    lines = [clip(tuple(spans), width)]
    if replay is not None:
        lines.append(replay_line(frame, replay, width))
    banner = fmt.gpu_banner(frame.gpu)
    if banner:
        lines.append(((f" {banner}".ljust(width)[: max(width, 1)], "banner"),))
    return lines + error_lines(frame, width, "host", "processes", "sampler", "record")


def error_lines(frame: Frame, width: int, *sources: SourceName) -> list[Line]:
    """One line for each of `sources` that failed this tick, for the pane that shows it."""
    return [clip(((f" {err.line()}", "banner-crit"),), width)
            for err in frame.errors if err.source in sources]
