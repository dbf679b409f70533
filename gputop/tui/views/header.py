"""Header lines: host, uptime, load, CPU, memory, swap, and the banners nobody may miss."""

from __future__ import annotations

import textwrap
import time
from dataclasses import dataclass

from gputop.analysis.foreign_gpu_pids import match_line, outside_line
from gputop.core import fmt
from gputop.core.model import Frame, HostSample, SourceName
from gputop.tui import cells
from gputop.tui.lines import Line, Span, clip, width_of

# Fields are whole spans and the spaces between them spans of their own: a span that began
# with its separator ran into the field before it wherever spans are read one by one (a
# screenshot's SVG draws each span as its own text, without the blank ones).
_GAP: Span = ("  ", "plain")
_SPACE: Span = (" ", "plain")
HOST_MIN = 16  # a hostname is cut no shorter than this


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
        (" REPLAY ", "banner-crit"), _SPACE,
        (f"recorded {recorded_time(frame.time)}", "bold"), _GAP,
        (f"tick {place.tick}/{place.ticks}", "plain"), _GAP,
        (f"speed {place.speed:g}x", "plain"),
        *((_GAP, ("PAUSED", "banner-crit")) if place.paused else ()), _GAP,
        ("←/→ step  g/G first/last  +/- speed  p play/pause", "dim"),
    ]
    return clip(tuple(spans), width)


def header_lines(frame: Frame | None, width: int, *, paused: bool = False,
                 replay: ReplayPlace | None = None) -> list[Line]:
    """The one-line summary plus a banner for CPU-only or simulated mode (and a replay's)."""
    if frame is None:
        return [(("gputop", "title"), _GAP, ("waiting for the first sample…", "dim"))]
    lines = [summary_line(frame.host, width, paused=paused and replay is None)]
    if replay is not None:
        lines.append(replay_line(frame, replay, width))
    banner = fmt.gpu_banner(frame.gpu)
    if banner:
        lines.append(((f" {banner}".ljust(width)[: max(width, 1)], "banner"),))
    lines += foreign_lines(frame, width)
    return lines + error_lines(frame, width, "host", "processes", "sampler", "record")


def summary_line(host: HostSample, width: int, *, paused: bool = False) -> Line:
    """Host, uptime, load, CPU, memory and swap: whole fields, as many as fit, the later ones
    left out from the last (a field is never cut; only a hostname too long for the line is)."""
    mem_used = host.memory_total_bytes - host.memory_available_bytes
    mem_frac = mem_used / host.memory_total_bytes if host.memory_total_bytes else None
    swap_frac = host.swap_used_bytes / host.swap_total_bytes if host.swap_total_bytes else None
    cpu_frac = None if host.cpu_percent is None else host.cpu_percent / 100
    wide = width >= 100
    load = " ".join(f"{value:.2f}" if wide else f"{value:.1f}" for value in host.load_average)
    head: list[Span] = [("gputop", "title"), _SPACE]
    if paused:
        head += [("PAUSED", "banner-crit"), _SPACE]
    fields: list[Line] = [
        ((f"up {fmt.uptime(host.uptime_s)}", "plain"),),
        ((f"load {load}", "plain"),),
        (("CPU", "dim"), _SPACE, (fmt.percent(host.cpu_percent), cells.level(cpu_frac)),
         *((_SPACE, (f"of {host.cpu_count}", "dim")) if wide else ())),
        (("mem", "dim"), _SPACE,
         (f"{fmt.short_size(mem_used)}/{fmt.short_size(host.memory_total_bytes)}",
          cells.level(mem_frac))),
        (("swap", "dim"), _SPACE,
         (f"{fmt.short_size(host.swap_used_bytes)}/{fmt.short_size(host.swap_total_bytes)}",
          cells.level(swap_frac, warn=0.25, crit=0.6))),
    ]
    # the hostname whole where all but the last field still fit beside it, else cut
    kept = sum(width_of((_GAP, *field)) for field in fields[:-1])
    room = max(HOST_MIN, width - width_of(tuple(head)) - kept)
    head.append((cells.fit(host.hostname, room).rstrip(), "bold"))
    used = width_of(tuple(head))
    for field in fields:
        need = width_of((_GAP, *field))
        if used + need > width:
            break
        head += [_GAP, *field]
        used += need
    return clip(tuple(head), width)


def foreign_lines(frame: Frame, width: int) -> list[Line]:
    """NVML's PIDs this PID namespace does not show: each proven match, dim, and the honest
    line for the rest."""
    found = frame.foreign_gpu_pids
    lines = [clip(((f" {line}", "dim"),), width)
             for f in found if (line := match_line(f)) is not None]
    outside = outside_line(found)
    if outside is not None:  # wrapped: what to do comes last and must not be cut
        lines += [clip(((f" {part}".ljust(width), "banner"),), width)
                  for part in textwrap.wrap(outside, max(width - 1, 20))]
    return lines


def error_lines(frame: Frame, width: int, *sources: SourceName) -> list[Line]:
    """One line for each of `sources` that failed this tick, for the pane that shows it."""
    return [clip(((f" {err.line()}", "banner-crit"),), width)
            for err in frame.errors if err.source in sources]
