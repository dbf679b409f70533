"""Process table rows: trainers with their workers beneath, sorted, filtered, collapsible."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import overload

from gputop.analysis.grouping import KTHREADD
from gputop.core import fmt
from gputop.core.model import Frame, ProcessSample, ThreadSample, TrainerGroup
from gputop.core.printable import printable
from gputop.tui import cells
from gputop.tui.lines import Line, Span, clip

SORT_KEYS: dict[str, str] = {"cpu": "%CPU", "rss": "RSS", "gpu": "GPU MEM", "pid": "PID",
                             "time": "TIME"}


@dataclass(frozen=True, slots=True)
class TableState:
    """What the user chose: sort key and direction, filter text, GPU-only, collapsed groups,
    grouped or full tree."""

    sort: str = "cpu"
    ascending: bool = False
    filter: str = ""
    only_gpu: bool = False
    collapsed: frozenset[int] = field(default_factory=frozenset)
    tree: bool = False  # every process under its parent (htop's F5), not trainer groups
    kernel_threads: bool = False  # list the kernel's threads (htop's K; hidden by default)
    threads: bool = False  # each process's userland threads as rows beneath it (htop's H)


@dataclass(frozen=True, slots=True)
class Row:
    """One table row; `group` is set on trainer rows, `depth` is 1 for workers.

    In the full tree (`tree`), `depth` is the depth under the root, `guides` the lines drawn
    before the command and `children` how many processes sit directly beneath. A `thread`
    row is a userland thread of the process above it (H): its TID, name and CPU.
    """

    process: ProcessSample
    depth: int = 0
    group: TrainerGroup | None = None
    collapsed: bool = False
    last: bool = False
    tree: bool = False
    guides: str = ""
    children: int = 0
    thread: bool = False

    @property
    def key(self) -> tuple[int, int]:
        """Identity across ticks (pid + start ticks)."""
        return self.process.key


class Rows(Sequence[Row]):
    """Table rows made on demand: a plain process row stays its ProcessSample until it is
    drawn or looked at, since thousands are listed, a screenful is drawn, and a Row costs
    about a microsecond to make."""

    __slots__ = ("_items", "hidden_kernel_threads")

    def __init__(self, items: Sequence[ProcessSample | Row] = (),
                 hidden_kernel_threads: int = 0) -> None:
        self._items = items
        self.hidden_kernel_threads = hidden_kernel_threads  # left out: the badge says how many

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> Row: ...

    @overload
    def __getitem__(self, index: slice) -> Rows: ...

    def __getitem__(self, index: int | slice) -> Row | Rows:
        if isinstance(index, slice):
            return Rows(self._items[index])
        item = self._items[index]
        return item if isinstance(item, Row) else Row(item)

    def item(self, index: int) -> ProcessSample | Row:
        """Row `index` as held: a plain process row is its ProcessSample (no Row made)."""
        return self._items[index]

    def find(self, key: tuple[int, int]) -> int | None:
        """The index of process `key`'s row (pid + start ticks), None when it is not listed."""
        for index, item in enumerate(self._items):
            proc = item.process if isinstance(item, Row) else item
            if proc.pid == key[0] and proc.start_ticks == key[1]:
                return index
        return None


def table_rows(frame: Frame, state: TableState) -> Rows:
    """Top-level processes sorted by the key; each trainer's workers follow it, sorted too
    (or, in tree mode, every process under its parent)."""
    rows = _process_rows(frame, state)
    return _with_threads(rows, frame.threads, state) if state.threads and frame.threads else rows


def _process_rows(frame: Frame, state: TableState) -> Rows:
    """The process rows, as `table_rows` lists them without threads."""
    # the frame's index (the sampler's) finds a trainer's rows: no pass over the others
    groups = {group.pid: group for group in frame.trainers
              if frame.process(group.pid) is not None}
    if state.tree:
        processes, hidden = _without_kernel_threads(list(frame.processes), state)
        return Rows(tree_rows(processes, groups, state), hidden)
    needle = state.filter.strip().lower()
    value = _sort_value(state.sort, groups)
    listed, hidden = _without_kernel_threads(_listed(frame, groups), state)
    tops = _in_order(listed, state, groups, value)
    if not (needle or state.only_gpu or state.collapsed):  # every process listed
        return Rows(_with_workers(tops, groups, frame, state, value) if groups else tops, hidden)
    rows: list[ProcessSample | Row] = []
    for proc in tops:
        group = groups.get(proc.pid)
        workers = frame.processes_of(group.worker_pids) if group else []
        if state.only_gpu and not (_on_gpu(proc) or group or proc.role == "launcher"):
            continue
        if needle and not (_matches(proc, needle) or any(_matches(w, needle) for w in workers)):
            continue
        collapsed = proc.pid in state.collapsed
        rows.append(Row(proc, 0, group, collapsed) if group or collapsed else proc)
        if not collapsed:
            rows += _worker_rows(workers, state, value)
    return Rows(rows, hidden)


def _with_threads(rows: Rows, threads: Mapping[int, tuple[ThreadSample, ...]],
                  state: TableState) -> Rows:
    """`rows` with each unfolded process's threads (those read) beneath it, sorted by the key."""
    value = _sort_value(state.sort, {})
    items: list[ProcessSample | Row] = []
    for index in range(len(rows)):
        item = rows.item(index)
        items.append(item)
        row, proc = (item, item.process) if isinstance(item, Row) else (None, item)
        listed = threads.get(proc.pid)
        if not listed or (row is not None and row.collapsed):
            continue
        samples = sorted((_thread_process(proc, t) for t in listed), key=value,
                         reverse=not state.ascending)
        below = _guides_below(row) if row is not None and row.tree else ""
        more = row is not None and row.tree and row.children > 0  # its children follow
        for at, sample in enumerate(samples):
            last = at == len(samples) - 1 and not more
            items.append(Row(sample, 0 if row is None else row.depth, last=last,
                             tree=row is not None and row.tree,
                             guides=below + ("└─ " if last else "├─ "), thread=True))
    return Rows(items, rows.hidden_kernel_threads)


def _thread_process(owner: ProcessSample, thread: ThreadSample) -> ProcessSample:
    """Thread `thread` of `owner` as a row's process: its TID, name, state and CPU."""
    return ProcessSample(
        pid=thread.tid, ppid=owner.pid, name=thread.comm, cmdline=(), username=owner.username,
        state=thread.state, num_threads=None, cpu_percent=thread.cpu_percent, rss_bytes=None,
        cpu_time_s=thread.cpu_time_s, start_ticks=thread.start_ticks, in_proc=owner.in_proc)


def _guides_below(row: Row) -> str:
    """The guides a tree row's own rows beneath it start with."""
    if not row.depth:
        return ""
    return row.guides[:-3] + ("   " if row.last else "│  ")


def _without_kernel_threads(
    processes: list[ProcessSample], state: TableState,
) -> tuple[list[ProcessSample], int]:
    """`processes` without the kernel's threads (kthreadd and its children, as htop hides
    them) unless the user asked for them, and how many were left out."""
    if state.kernel_threads:
        return processes, 0
    # kthreadd (PID 2, parent 0) and its children; one read for a row whose parent is neither
    # grouping.is_kernel_thread inlined: one read for a row whose parent is neither 0 nor 2
    kept = [p for p in processes if (ppid := p.ppid) != KTHREADD and (ppid or p.pid != KTHREADD)]
    return kept, len(processes) - len(kept)


def _listed(frame: Frame, groups: dict[int, TrainerGroup]) -> list[ProcessSample]:
    """The rows listed at the top level: all but the workers whose trainer's row is shown
    (theirs follow it), taken out where the frame's index places them."""
    listed = list(frame.processes)
    if not groups:
        return listed
    places, rows = frame.process_places(), frame.processes
    grouped = [at for group in groups.values() for pid in group.worker_pids
               if (at := places.get(pid)) is not None
               and frame.process(rows[at].trainer_pid or -1) is not None]
    for at in sorted(grouped, reverse=True):
        del listed[at]
    return listed


def _with_workers(
    tops: list[ProcessSample], groups: dict[int, TrainerGroup],
    frame: Frame, state: TableState,
    value: Callable[[ProcessSample], tuple[float, int]],
) -> list[ProcessSample | Row]:
    """`tops` with each trainer's row followed by its workers' (the trainers found by a
    comprehension; the rest stay plain processes, copied a run at a time)."""
    rows: list[ProcessSample | Row] = []
    start = 0
    for at in [i for i, proc in enumerate(tops) if proc.pid in groups]:
        rows += tops[start:at]
        group = groups[tops[at].pid]
        rows.append(Row(tops[at], 0, group))
        rows += _worker_rows(frame.processes_of(group.worker_pids), state, value)
        start = at + 1
    rows += tops[start:]
    return rows


def _worker_rows(workers: list[ProcessSample], state: TableState,
                 value: Callable[[ProcessSample], tuple[float, int]]) -> list[Row]:
    """A trainer's workers as the rows beneath it, sorted by the key."""
    workers.sort(key=value, reverse=not state.ascending)
    return [Row(w, 1, last=i == len(workers) - 1) for i, w in enumerate(workers)]


def _in_order(
    procs: list[ProcessSample], state: TableState, groups: dict[int, TrainerGroup],
    value: Callable[[ProcessSample], tuple[float, int]],
) -> list[ProcessSample]:
    """`procs` sorted by `value`. By %CPU, the idle (most of a machine's processes, their
    key (0, -PID)) are put in PID order with no key made in Python: only the busy are."""
    if state.sort != "cpu":
        procs.sort(key=value, reverse=not state.ascending)
        return procs
    busy = [p for p in procs if p.cpu_percent or (p.pid in groups and value(p)[0] > 0)]
    idle = [p for p in procs if not (p.cpu_percent or (p.pid in groups and value(p)[0] > 0))]
    idle.sort(key=_PID, reverse=state.ascending)
    busy.sort(key=value, reverse=not state.ascending)
    return idle + busy if state.ascending else busy + idle


_PID = attrgetter("pid")


def tree_rows(
    processes: Sequence[ProcessSample], groups: dict[int, TrainerGroup], state: TableState
) -> list[Row]:
    """Every process under its parent, siblings sorted by the key; a filter or GPU-only keeps
    the matching processes and the path from their root down to them."""
    value = _sort_value(state.sort, groups)
    children, roots = _family(processes)
    for kids in children.values():
        kids.sort(key=value, reverse=not state.ascending)
    roots.sort(key=value, reverse=not state.ascending)
    kept = _kept_in_tree(roots, children, state, groups)
    rows: list[Row] = []
    stack: list[tuple[ProcessSample, int, str, bool]] = [
        (root, 0, "", False) for root in reversed(roots) if root.pid in kept]
    while stack:
        proc, depth, above, last = stack.pop()
        kids = [kid for kid in children.get(proc.pid, ()) if kid.pid in kept]
        collapsed = bool(kids) and proc.pid in state.collapsed
        guides = above + ("└─ " if last else "├─ ") if depth else ""
        rows.append(Row(proc, depth, groups.get(proc.pid), collapsed, last, tree=True,
                        guides=guides, children=len(kids)))
        if collapsed:
            continue
        below = above + ("   " if last else "│  ") if depth else ""
        stack += [(kid, depth + 1, below, i == len(kids) - 1) for i, kid in enumerate(kids)][::-1]
    return rows


def _family(
    processes: Sequence[ProcessSample],
) -> tuple[dict[int, list[ProcessSample]], list[ProcessSample]]:
    """Each listed parent's children, and the roots (no listed parent); a process caught in
    a parent loop (PIDs reused between reads) becomes a root, so none is ever lost."""
    by_pid = {proc.pid: proc for proc in processes}
    children: dict[int, list[ProcessSample]] = {}
    roots: list[ProcessSample] = []
    for proc in processes:
        if proc.ppid in by_pid and proc.ppid != proc.pid and not _in_loop(proc, by_pid):
            children.setdefault(proc.ppid, []).append(proc)
        else:
            roots.append(proc)
    return children, roots


def _in_loop(proc: ProcessSample, by_pid: dict[int, ProcessSample]) -> bool:
    seen = {proc.pid}
    parent = by_pid.get(proc.ppid or -1)
    while parent is not None:
        if parent.pid in seen:
            return True
        seen.add(parent.pid)
        parent = by_pid.get(parent.ppid or -1) if parent.ppid != parent.pid else None
    return False


def _kept_in_tree(
    roots: Sequence[ProcessSample], children: dict[int, list[ProcessSample]], state: TableState,
    groups: dict[int, TrainerGroup],
) -> set[int]:
    """PIDs the tree shows: all, or those that pass the filter (what runs beneath a match
    comes along, as a trainer's workers do) and GPU-only, with their ancestors."""
    needle = state.filter.strip().lower()
    workers = {pid for group in groups.values() for pid in group.worker_pids}
    order: list[tuple[ProcessSample, ProcessSample | None]] = []  # parents before children
    stack: list[tuple[ProcessSample, ProcessSample | None]] = [(root, None) for root in roots]
    while stack:
        proc, parent = stack.pop()
        order.append((proc, parent))
        stack += [(kid, proc) for kid in children.get(proc.pid, ())]
    matched: set[int] = set()
    for proc, parent in order:
        if not needle or _matches(proc, needle) or (parent is not None and parent.pid in matched):
            matched.add(proc.pid)
    kept: set[int] = set()
    for proc, parent in reversed(order):  # children before their parents
        passes = proc.pid in matched and (not state.only_gpu or _on_gpu(proc) or proc.pid in
                                          groups or proc.pid in workers or proc.role == "launcher")
        if passes:
            kept.add(proc.pid)
        if proc.pid in kept and parent is not None:
            kept.add(parent.pid)
    return kept


def fold_pid(row: Row) -> int | None:
    """The PID whose rows `space` folds from `row`: its trainer's (grouped view) or its own
    when it has processes beneath (tree); None when there is nothing to fold."""
    if row.thread:
        return None
    if row.tree:
        return row.process.pid if row.children else None
    if row.depth:
        return row.process.trainer_pid
    return row.process.pid if row.group is not None else None


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
    if needle.isdigit() and (needle == str(proc.pid) or needle == str(proc.container_pid)):
        return True
    haystack = f"{proc.name} {' '.join(proc.cmdline)} {proc.username or ''}".lower()
    if proc.container is not None or proc.container_pod is not None:
        haystack += f" {_container_mark(proc)}"
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


def columns_for(width: int, keep: str = "", columns: Sequence[Column] = COLUMNS,
                rest_min: int = COMMAND_MIN) -> tuple[Column, ...]:
    """Columns that fit with the free-width column after them (COMMAND) keeping at least
    `rest_min` cells; those with drop 99 (PID, %CPU) and the column named `keep` (the sorted
    one) stay."""
    chosen = list(columns)
    for victim in sorted(columns, key=lambda c: c.drop):
        if sum(c.width + 1 for c in chosen) + rest_min <= width or victim.drop == 99:
            break
        if victim.name != keep:
            chosen.remove(victim)
    return tuple(chosen)


def sorted_column(state: TableState) -> str:
    """The title of the column the rows are sorted by."""
    return SORT_KEYS.get(state.sort, "")


def sort_key_at(columns: Sequence[Column], x: int) -> str | None:
    """The sort key of the column title at cell `x` of the header, None for one that does
    not sort (USER, GPU, THR, COMMAND)."""
    left = 0
    for column in columns:
        if left <= x < left + column.width + 1:
            return next((key for key, name in SORT_KEYS.items() if name == column.name), None)
        left += column.width + 1
    return None


def badge(state: TableState, hidden_kernel_threads: int = 0) -> str:
    """What the rows show when it is not the default view: the filter, the sort key, tree,
    GPU only, kernel threads shown or how many are hidden; empty otherwise."""
    hidden = [f"{hidden_kernel_threads} kernel threads hidden (K)"] * bool(hidden_kernel_threads)
    if state == TableState(collapsed=state.collapsed):
        return " " + hidden[0] + " " if hidden else ""
    parts = [f"filter: {printable(state.filter.strip())}"] if state.filter.strip() else []
    parts.append(f"sort: {sorted_column(state)}{'▲' if state.ascending else '▼'}")
    parts += ["tree"] * state.tree + ["GPU only"] * state.only_gpu
    parts += ["kernel threads"] * state.kernel_threads + ["threads"] * state.threads + hidden
    return " " + " · ".join(parts) + " "


def header_line(columns: Sequence[Column], state: TableState, width: int,
                hidden_kernel_threads: int = 0) -> Line:
    """Column titles; the sort column is marked with its direction, and a badge at the right
    names an active filter, the sort key and the kernel threads left out."""
    arrow = "▲" if state.ascending else "▼"
    sorted_name = sorted_column(state)
    spans: list[Span] = []
    for column in columns:
        title = column.name
        if column.name == sorted_name:  # the arrow within the column: "GPU ME▼", not past it
            title = title[:column.width - 1] + arrow
        align = title.ljust if column.name in ("USER", "GPU") else title.rjust
        spans.append((align(column.width) + " ", "header"))
    room = max(0, width - sum(c.width + 1 for c in columns))
    label = badge(state, hidden_kernel_threads)
    label = cells.fit(label, min(len(label), max(0, room - len("COMMAND ")))) if label else ""
    spans += [("COMMAND".ljust(room - len(label)), "header"), (label, "badge")]
    return clip(tuple(spans), width)


def row_line(row: Row, columns: Sequence[Column], width: int, selected: bool) -> Line:
    """One process in `width` cells; the whole line takes the cursor style when selected."""
    proc = row.process
    spans: list[Span] = []
    for column in columns:
        text, style = _CELLS.get(column.name, _blank_cell)(proc)
        room = column.width
        if len(text) > room:  # rare: the common cell is padded below without a call
            text = cells.fit(text, room)
        spans.append(((text.ljust(room) if column.name in _LEFT else text.rjust(room)) + " ",
                      style))
    spans += _command(row)
    line = clip(tuple(spans), width)
    if row.thread:
        line = tuple((text, "dim") for text, _ in line)
    return cursor_line(line, width) if selected else line


def cursor_line(line: Line, width: int) -> Line:
    """`line` as the row under the cursor: its text in the cursor style, the full width."""
    return (("".join(t for t, _ in line).ljust(width), "cursor"),)


def _pid_cell(proc: ProcessSample) -> tuple[str, str]:
    return str(proc.pid), "dim" if not proc.in_proc else "plain"


def _user_cell(proc: ProcessSample) -> tuple[str, str]:
    return (proc.username or "—"), "dim"


def _gpu_cell(proc: ProcessSample) -> tuple[str, str]:
    return (",".join(str(i) for i in proc.gpu_indices) or "-"), "accent"


def _gpu_memory_cell(proc: ProcessSample) -> tuple[str, str]:
    if proc.gpu_memory_bytes is None:
        return ("n/a" if proc.gpu_indices else "-"), "dim"
    return fmt.short_size(proc.gpu_memory_bytes), "accent"


def _cpu_cell(proc: ProcessSample) -> tuple[str, str]:
    if proc.cpu_percent is None:
        return "—", "dim"
    return f"{proc.cpu_percent:.1f}", "warn" if proc.cpu_percent >= 90 else "plain"


def _threads_cell(proc: ProcessSample) -> tuple[str, str]:
    return ("—" if proc.num_threads is None else str(proc.num_threads)), "plain"


def _rss_cell(proc: ProcessSample) -> tuple[str, str]:
    return ("—" if proc.rss_bytes is None else fmt.short_size(proc.rss_bytes)), "plain"


def _time_cell(proc: ProcessSample) -> tuple[str, str]:
    return ("—" if proc.cpu_time_s is None else fmt.cpu_time(proc.cpu_time_s)), "dim"


def _blank_cell(proc: ProcessSample) -> tuple[str, str]:
    return "", "plain"


# Each column's text and style for a process (a column the table does not know is blank).
_CELLS: dict[str, Callable[[ProcessSample], tuple[str, str]]] = {
    "PID": _pid_cell, "USER": _user_cell, "GPU": _gpu_cell, "GPU MEM": _gpu_memory_cell,
    "%CPU": _cpu_cell, "THR": _threads_cell, "RSS": _rss_cell, "TIME": _time_cell}
_LEFT = frozenset({"USER", "GPU"})  # the columns read from the left; the rest are numbers


def _command(row: Row) -> list[Span]:
    proc = row.process
    if row.thread:
        indent = row.guides if row.tree else "  " * (row.depth + 1) + "· "
        return [(indent, "dim"), (proc.name, "dim")]
    command = " ".join(proc.cmdline) if proc.cmdline else f"[{proc.name}]"
    if not proc.in_proc:
        command = f"{proc.name or 'pid ' + str(proc.pid)} (no /proc entry: other namespace)"
    probe = [("◆ ", "probe")] if proc.has_probe else []
    if proc.container is not None or proc.container_pod is not None or (
            proc.container_pid is not None):
        probe.append((_container_mark(proc) + " ", "dim"))
    if row.tree:
        return _tree_command(row, command, probe)
    if row.depth:
        branch = "└─ " if row.last else "├─ "
        return [("  " + branch, "dim"), *probe, (proc.name, "plain")]
    if row.group is not None:
        group = row.group
        fold = "▸ " if row.collapsed else "▾ "
        return [(fold, "accent"), *probe, (_group_summary(group), "accent"), (command, "bold")]
    return [*probe, (command, _command_style(proc))]


def _container_mark(proc: ProcessSample) -> str:
    """Where it runs: "ctr:<id>", its pod, its PID inside its namespace, as known."""
    parts = []
    if proc.container is not None:
        parts.append(f"ctr:{proc.container}")
    if proc.container_pod is not None:
        parts.append(f"pod:{proc.container_pod}")
    if proc.container_pid is not None:
        parts.append(f"nspid:{proc.container_pid}")
    return " ".join(parts)


def _group_summary(group: TrainerGroup) -> str:
    pin = "on" if group.pin_memory_thread else "off"
    return (f"[{len(group.worker_pids)}w {group.workers_cpu_percent:.0f}% "
            f"{group.num_threads_total}thr pin:{pin}] ")


def _command_style(proc: ProcessSample) -> str:
    return "dim" if proc.state == "Z" else ("accent" if proc.role == "launcher" else "plain")


def _tree_command(row: Row, command: str, probe: list[Span]) -> list[Span]:
    """A tree row: its guides, a fold mark when processes sit beneath, then as grouped."""
    proc = row.process
    fold = [("▸ " if row.collapsed else "▾ ", "accent")] if row.children else []
    if proc.role == "worker":  # a forked worker's command line is its trainer's
        return [(row.guides, "dim"), *fold, *probe, (proc.name, "plain")]
    if row.group is not None:
        return [(row.guides, "dim"), *fold, *probe, (_group_summary(row.group), "accent"),
                (command, "bold")]
    return [(row.guides, "dim"), *fold, *probe, (command, _command_style(proc))]
