"""Process table rows: trainers with their workers beneath, sorted, filtered, collapsible."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gputop import fmt
from gputop.model import Frame, ProcessSample, TrainerGroup
from gputop.tui import cells
from gputop.tui.lines import Line, Span, clip

SORT_KEYS: dict[str, str] = {"cpu": "%CPU", "rss": "RSS", "gpu": "GPU MEM", "pid": "PID",
                             "time": "TIME"}


@dataclass(frozen=True, slots=True)
class TableState:
    """What the user chose: sort key and direction, filter text, GPU-only, collapsed groups."""

    sort: str = "cpu"
    ascending: bool = False
    filter: str = ""
    only_gpu: bool = False
    collapsed: frozenset[int] = field(default_factory=frozenset)


@dataclass(frozen=True, slots=True)
class Row:
    """One table row; `group` is set on trainer rows, `depth` is 1 for workers."""

    process: ProcessSample
    depth: int = 0
    group: TrainerGroup | None = None
    collapsed: bool = False
    last: bool = False

    @property
    def key(self) -> tuple[int, int]:
        """Identity across ticks (pid + start ticks)."""
        return self.process.key


def table_rows(frame: Frame, state: TableState) -> list[Row]:
    """Top-level processes sorted by the key; each trainer's workers follow it, sorted too."""
    by_pid = {proc.pid: proc for proc in frame.processes}
    groups = {group.pid: group for group in frame.trainers if group.pid in by_pid}
    grouped = {pid for group in groups.values() for pid in group.worker_pids}
    needle = state.filter.strip().lower()
    value = _sort_value(state.sort, groups)

    rows: list[Row] = []
    tops = [proc for proc in frame.processes if proc.pid not in grouped or
            by_pid.get(proc.trainer_pid or -1) is None]
    tops.sort(key=value, reverse=not state.ascending)
    for proc in tops:
        group = groups.get(proc.pid)
        workers = [by_pid[pid] for pid in group.worker_pids if pid in by_pid] if group else []
        if state.only_gpu and not (_on_gpu(proc) or group or proc.role == "launcher"):
            continue
        if needle and not (_matches(proc, needle) or any(_matches(w, needle) for w in workers)):
            continue
        collapsed = proc.pid in state.collapsed
        rows.append(Row(proc, 0, group, collapsed))
        if collapsed or not workers:
            continue
        workers.sort(key=value, reverse=not state.ascending)
        rows += [Row(w, 1, last=i == len(workers) - 1) for i, w in enumerate(workers)]
    return rows


def _sort_value(
    sort: str, groups: dict[int, TrainerGroup]
) -> Callable[[ProcessSample], tuple[float, int]]:
    def value(proc: ProcessSample) -> tuple[float, int]:
        if sort == "pid":
            return (float(proc.pid), 0)
        if sort == "rss":
            return (float(proc.rss_bytes or 0), -proc.pid)
        if sort == "gpu":
            return (float(proc.gpu_memory_bytes or 0), -proc.pid)
        if sort == "time":
            return (proc.cpu_time_s or 0.0, -proc.pid)
        cpu = proc.cpu_percent or 0.0
        group = groups.get(proc.pid)
        if group is not None:
            cpu += group.workers_cpu_percent  # a starving trainer's load lives in its workers
        return (cpu, -proc.pid)

    return value


def _on_gpu(proc: ProcessSample) -> bool:
    return bool(proc.gpu_indices) or bool(proc.gpu_memory_bytes) or proc.role != "other"


def _matches(proc: ProcessSample, needle: str) -> bool:
    if needle.isdigit() and needle == str(proc.pid):
        return True
    haystack = f"{proc.name} {' '.join(proc.cmdline)} {proc.username or ''}".lower()
    return needle in haystack


# ---- columns -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Column:
    """A fixed-width column; `drop` orders which go first when the terminal is narrow."""

    name: str
    width: int
    drop: int


COLUMNS = (
    Column("PID", 7, 99), Column("USER", 8, 2), Column("GPU", 3, 4), Column("GPU MEM", 7, 6),
    Column("%CPU", 6, 99), Column("THR", 4, 3), Column("RSS", 6, 5), Column("TIME", 9, 1),
)
COMMAND_MIN = 36


def columns_for(width: int) -> tuple[Column, ...]:
    """Columns that fit with COMMAND keeping at least COMMAND_MIN cells; PID and %CPU stay."""
    chosen = list(COLUMNS)
    for victim in sorted(COLUMNS, key=lambda c: c.drop):
        if sum(c.width + 1 for c in chosen) + COMMAND_MIN <= width or victim.drop == 99:
            break
        chosen.remove(victim)
    return tuple(chosen)


def header_line(columns: Sequence[Column], state: TableState, width: int) -> Line:
    """Column titles; the sort column is marked with its direction."""
    arrow = "▲" if state.ascending else "▼"
    sorted_name = SORT_KEYS.get(state.sort, "")
    spans: list[Span] = []
    for column in columns:
        title = column.name + (arrow if column.name == sorted_name else "")
        align = title.ljust if column.name in ("USER", "GPU") else title.rjust
        spans.append((align(column.width) + " ", "header"))
    used = sum(c.width + 1 for c in columns)
    spans.append(("COMMAND".ljust(max(0, width - used)), "header"))
    return clip(tuple(spans), width)


def row_line(row: Row, columns: Sequence[Column], width: int, selected: bool) -> Line:
    """One process in `width` cells; the whole line takes the cursor style when selected."""
    proc = row.process
    spans: list[Span] = []
    for column in columns:
        text, style = _cell(column.name, proc)
        align = text.ljust if column.name in ("USER", "GPU") else text.rjust
        spans.append((cells.fit(align(column.width), column.width) + " ", style))
    spans += _command(row)
    line = clip(tuple(spans), width)
    if selected:
        text = "".join(t for t, _ in line)
        return ((text.ljust(width), "cursor"),)
    return line


def _cell(name: str, proc: ProcessSample) -> tuple[str, str]:
    if name == "PID":
        return str(proc.pid), "dim" if not proc.in_proc else "plain"
    if name == "USER":
        return (proc.username or "—"), "dim"
    if name == "GPU":
        return (",".join(str(i) for i in proc.gpu_indices) or "-"), "accent"
    if name == "GPU MEM":
        if proc.gpu_memory_bytes is None:
            return ("n/a" if proc.gpu_indices else "-"), "dim"
        return fmt.short_size(proc.gpu_memory_bytes), "accent"
    if name == "%CPU":
        if proc.cpu_percent is None:
            return "—", "dim"
        return f"{proc.cpu_percent:.1f}", "warn" if proc.cpu_percent >= 90 else "plain"
    if name == "THR":
        return ("—" if proc.num_threads is None else str(proc.num_threads)), "plain"
    if name == "RSS":
        return ("—" if proc.rss_bytes is None else fmt.short_size(proc.rss_bytes)), "plain"
    if name == "TIME":
        return ("—" if proc.cpu_time_s is None else fmt.cpu_time(proc.cpu_time_s)), "dim"
    return "", "plain"


def _command(row: Row) -> list[Span]:
    proc = row.process
    command = " ".join(proc.cmdline) if proc.cmdline else f"[{proc.name}]"
    if not proc.in_proc:
        command = f"{proc.name or 'pid ' + str(proc.pid)} (no /proc entry: other namespace)"
    probe = [("◆ ", "probe")] if proc.has_probe else []
    if row.depth:
        branch = "└─ " if row.last else "├─ "
        return [("  " + branch, "dim"), *probe, (proc.name, "plain")]
    if row.group is not None:
        group = row.group
        fold = "▸ " if row.collapsed else "▾ "
        pin = "on" if group.pin_memory_thread else "off"
        summary = (f"[{len(group.worker_pids)}w {group.workers_cpu_percent:.0f}% "
                   f"{group.num_threads_total}thr pin:{pin}] ")
        return [(fold, "accent"), *probe, (summary, "accent"), (command, "bold")]
    style = "dim" if proc.state == "Z" else ("accent" if proc.role == "launcher" else "plain")
    return [*probe, (command, style)]
