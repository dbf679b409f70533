"""Fleet lines: one row per host, worst first, with why it wants a look; and one host's GPUs,
trainers and advice. A host that is down says so and shows no figures (stale is not zero)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from gputop.core import fmt
from gputop.core.model import (
    FLEET_PRESSURE_RATIO,
    FleetGpu,
    FleetHost,
    FleetHostDetail,
    FleetReport,
    FleetTrainer,
)
from gputop.tui import cells
from gputop.tui.lines import Line, Span, bar_spans, clip, plain
from gputop.tui.views.advice import SEVERITY_MARK
from gputop.tui.views.processes import Column, columns_for

DOWN = "—"  # a down host's figures: not known, never zero
FLEET_COLUMNS = (
    Column("HOST", 20, 99), Column("STATE", 5, 99), Column("GPUS", 4, 3), Column("UTIL", 4, 5),
    Column("GPU MEM", 11, 2), Column("IDLE+MEM", 8, 99), Column("TRAIN", 5, 4),
    Column("DATA", 4, 99), Column("WAIT", 4, 99), Column("STRAG", 5, 99), Column("MEMBW", 5, 6),
    Column("ADV", 3, 1),
)
WHY_MIN = 16
WAIT_WARN, WAIT_CRIT = 0.2, 0.5  # the profiler's "highly input-bound", and half the step
BAR = 10


def fleet_title_lines(report: FleetReport | None, width: int, interval_s: float, *,
                      paused: bool = False, now: float | None = None) -> list[Line]:
    """What is shown, from where, how fresh (how old, when Prometheus stopped answering);
    the error from Prometheus in one line."""
    if report is None:
        return [(("gputop fleet", "title"), ("  asking Prometheus…", "dim"))]
    down = sum(1 for h in report.hosts if not h.up)
    trouble = sum(1 for h in report.hosts if h.trouble)
    spans: list[Span] = [("gputop fleet ", "title"), (report.url, "bold"),
                         (f"  {len(report.hosts)} hosts", "plain"),
                         (f", {down} down" if down else "", "crit"),
                         (f", {trouble} want a look" if trouble else "", "warn"),
                         (f"  refresh {interval_s:g} s", "dim"),
                         (" (scrape interval)" if report.scrape_interval_s == interval_s
                          else "", "dim"),
                         (f"  {time.strftime('%H:%M:%S')}", "dim")]
    if report.stale_from is not None:
        age = (time.time() if now is None else now) - report.stale_from
        spans.insert(1, (f"stale: the hosts below are {_age(age)} old ", "banner-crit"))
    if paused:
        spans.insert(1, ("PAUSED ", "banner-crit"))
    lines = [clip(tuple(spans), width)]
    if report.error is not None:
        lines.append(clip(((f" {report.error}", "banner-crit"),), width))
    return lines


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{max(0, int(seconds))} s"
    return f"{int(seconds // 60)} min" if seconds < 7200 else f"{int(seconds // 3600)} h"


def fleet_columns(width: int) -> tuple[Column, ...]:
    """The columns that fit, WHY taking the rest."""
    return columns_for(width, columns=FLEET_COLUMNS, rest_min=WHY_MIN)


def fleet_header_line(columns: Sequence[Column], width: int) -> Line:
    """Column titles, then WHY."""
    spans: list[Span] = [(_align(c, c.name) + " ", "header") for c in columns]
    room = max(0, width - sum(c.width + 1 for c in columns))
    return clip((*spans, ("WHY".ljust(room), "header")), width)


def fleet_row_line(host: FleetHost, columns: Sequence[Column], width: int,
                   selected: bool) -> Line:
    """One host in `width` cells; the whole line takes the cursor style when selected."""
    spans: list[Span] = []
    for column in columns:
        text, style = _cell(column.name, host)
        spans.append((cells.fit(_align(column, text), column.width) + " ", style))
    spans.append(why(host))
    line = clip(tuple(spans), width)
    if selected:
        return (("".join(t for t, _ in line).ljust(width), "cursor"),)
    return line


def why(host: FleetHost) -> Span:
    """What makes this host want a look, worst first; "ok" when nothing does."""
    if not host.up and host.scrape_error:  # the cause first: a narrow row keeps it
        cause = root_cause(host.scrape_error)
        return (f"{cause} · never answered" if not host.seen else f"down: {cause}"), "crit"
    if not host.up:
        return ("down: " if host.seen else "never answered: ") + (
            "scrapes fail, or the target is gone"), "crit"
    if not host.seen:
        return "up, but it exports no gputop series", "warn"
    reasons = []
    if host.idle_gpus_holding_memory:
        reasons.append(_count(host.idle_gpus_holding_memory, "idle GPU") + " holding memory")
    if host.data_bound_trainers:
        reasons.append(f"{host.data_bound_trainers} data-bound")
    if host.stragglers:
        reasons.append(_count(host.stragglers, "input straggler"))
    if (host.memory_pressure_ratio or 0.0) >= FLEET_PRESSURE_RATIO:
        reasons.append(f"membw pressure {host.memory_pressure_ratio:.2f}")
    return (" · ".join(reasons), "warn") if reasons else ("ok", "dim")


def root_cause(error: str) -> str:
    """The last part of a scrape error, its cause ("connection refused" of `Get "…": dial
    tcp …: connect: connection refused`), where a row has no room for all of it."""
    return error.rsplit(": ", 1)[-1]


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}" + ("s" if n != 1 else "")


def host_label(host: FleetHost) -> str:
    """The host's name, with its target when the target is not simply that name and a port
    (the target alone when it names no host: it never answered)."""
    same = host.instance.startswith(host.hostname + ":") or host.hostname == host.instance
    return host.hostname if same else f"{host.hostname} ({host.instance})"


def _align(column: Column, text: str) -> str:
    return text.ljust(column.width) if column.name == "HOST" else text.rjust(column.width)


def _cell(name: str, h: FleetHost) -> tuple[str, str]:
    if name == "HOST":
        return host_label(h) + (" SIM" if h.simulated else ""), "bold"
    if name == "STATE":
        return ("up", "ok") if h.up else ("DOWN", "crit")
    if not h.up:
        return DOWN, "dim"
    if name == "UTIL":
        return _percent(h.gpu_util_ratio), "plain"
    if name == "GPU MEM":
        used, total = h.gpu_memory_used_bytes, h.gpu_memory_total_bytes
        frac = used / total if used is not None and total else None
        return f"{fmt.short_size(used)}/{fmt.short_size(total)}", cells.level(frac)
    if name == "WAIT":
        return _percent(h.worst_data_wait_ratio), cells.level(h.worst_data_wait_ratio,
                                                              WAIT_WARN, WAIT_CRIT)
    if name == "MEMBW":
        pressure = h.memory_pressure_ratio
        return (fmt.NA if pressure is None else f"{pressure:.2f}",
                cells.level(pressure, FLEET_PRESSURE_RATIO))
    count = {"GPUS": h.gpus, "IDLE+MEM": h.idle_gpus_holding_memory, "TRAIN": h.trainers,
             "DATA": h.data_bound_trainers, "STRAG": h.stragglers, "ADV": h.advice}[name]
    bad = name in ("IDLE+MEM", "DATA", "STRAG") and bool(count)
    return (fmt.NA if count is None else str(count)), "warn" if bad else "plain"


def _percent(ratio: float | None) -> str:
    return fmt.percent(None if ratio is None else 100 * ratio)


# ---- one host ------------------------------------------------------------------------------

def host_lines(instance: str, host: FleetHost | None, detail: FleetHostDetail | None,
               width: int) -> list[Line]:
    """One host: its row's verdict, then its GPUs, trainers and advice."""
    if host is None:
        return [clip(((instance, "title"), ("  no longer among the fleet's targets", "dim")),
                     width)]
    state = ("  up", "ok") if host.up else ("  DOWN", "crit")
    target = "" if host.hostname == host.instance else f" ({host.instance})"
    lines = [clip(((host.hostname, "title"), (target, "dim"), state,
                   ("  SIMULATED" if host.simulated else "", "banner")), width),
             clip((("  ", "plain"), why(host)), width)]
    if not host.up:
        return [*lines, *_scrape_lines(host, width),
                plain("  no figures: a down target's series are stale, and stale is "
                      "not zero", "dim")]
    if detail is None or detail.instance != host.instance:
        return [*lines, plain("  asking Prometheus for its GPUs, trainers and advice…", "dim")]
    lines += [(), plain(f"GPUs ({len(detail.gpus)})", "title")]
    lines += [gpu_line(g, width) for g in detail.gpus] or [plain("  none exported", "dim")]
    lines += [(), plain(f"Trainers ({len(detail.trainers)})", "title")]
    lines += [trainer_line(t, width) for t in detail.trainers] or [plain("  none", "dim")]
    lines += [(), plain(f"Advice ({len(detail.advice)})", "title")]
    for item in detail.advice:
        mark, style = SEVERITY_MARK.get(item.severity, ("● ", "dim"))
        who = f"  trainer {item.trainer}" if item.trainer else "  host-wide"
        lines.append(clip((("  " + mark, style), (item.id, style), (who, "dim")), width))
    if not detail.advice:
        lines.append(plain("  none active", "dim"))
    return lines


def _scrape_lines(host: FleetHost, width: int) -> list[Line]:
    """What Prometheus says of a down host's scrapes: whether it ever answered, when it was
    last scraped, and its whole last error."""
    lines = [] if host.seen else [plain("  never answered within the last hour", "crit")]
    if host.last_scrape is not None:
        lines.append(plain(f"  last scrape {_age(time.time() - host.last_scrape)} ago"
                           + (f" ({host.scrape_health})" if host.scrape_health else ""), "dim"))
    if host.scrape_error:
        lines.append(clip((("  Prometheus: ", "dim"), (host.scrape_error, "crit")), width))
    return lines


def gpu_line(gpu: FleetGpu, width: int) -> Line:
    """One GPU: utilisation and memory as bars with their figures."""
    used, total = gpu.memory_used_bytes, gpu.memory_total_bytes
    mem_frac = used / total if used is not None and total else None
    return clip((
        (f"  {gpu.index:>2} ", "bold"), (cells.fit(gpu.name or gpu.uuid, 18) + " ", "dim"),
        ("util ", "dim"), *bar_spans(cells.bar_parts(gpu.util_ratio, BAR), "accent"),
        (f" {_percent(gpu.util_ratio):>4}  ", "plain"),
        ("mem ", "dim"), *bar_spans(cells.bar_parts(mem_frac, BAR), cells.level(mem_frac)),
        (f" {fmt.short_size(used)}/{fmt.short_size(total)}", "plain"),
    ), width)


def trainer_line(t: FleetTrainer, width: int) -> Line:
    """One trainer: who it is, its verdict and data wait, its workers, rank and straggling."""
    verdict_style = {"data-bound": "warn", "compute-bound": "ok"}.get(t.verdict or "", "dim")
    rank = f"  rank {t.rank}/{t.world_size or '?'}" if t.rank else ""
    step = (f"  step {t.step_statistic} {fmt.duration_ns(round(t.step_s * 1e9))}"
            if t.step_s is not None else "")
    spans: list[Span] = [
        ("  ", "plain"), ("◆ " if t.probed else "  ", "probe"), (f"{t.pid:>7} ", "bold"),
        (cells.fit(t.name or "?", 16) + " ", "plain"),
        (t.verdict or "no probe", verdict_style),
        (f"  data wait {_percent(t.data_wait_ratio)}" if t.data_wait_ratio is not None else "",
         cells.level(t.data_wait_ratio, WAIT_WARN, WAIT_CRIT)),
        (step, "dim"), (f"  {t.workers} workers" if t.workers is not None else "", "plain"),
        (rank, "dim"), ("  STALLED" if t.state == "stalled" else "", "warn"),
        ("  INPUT STRAGGLER" if t.straggler else "", "crit"),
        (f"  job {t.rendezvous}" if t.rendezvous else "", "dim"),
    ]
    return clip(tuple(s for s in spans if s[0]), width)
