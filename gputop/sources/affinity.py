"""The CPUs a process may run on (its affinity mask, /proc/PID/status Cpus_allowed_list),
read on demand for a few processes: the one reader and parser of that list."""

from __future__ import annotations

from pathlib import Path

ALLOWED_LIST = "Cpus_allowed_list:"
MAX_CPUS = 1 << 16  # more than any kernel's NR_CPUS: a list past it is not a real one


def cpus_allowed(pid: int, proc_root: str = "/proc") -> frozenset[int] | None:
    """The CPUs `pid` may be scheduled on; None when it is gone or its list cannot be read."""
    try:
        status = Path(proc_root, str(pid), "status").read_text()
    except (OSError, ValueError):
        return None
    for line in status.splitlines():
        if line.startswith(ALLOWED_LIST):
            return parse_cpu_list(line.removeprefix(ALLOWED_LIST))
    return None


def parse_cpu_list(text: str) -> frozenset[int] | None:
    """The CPUs a kernel CPU list such as '0-3,8,10-11' names; None when it names none or is
    not one (a reversed range, a sign, an empty part)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        low, dash, high = part.strip().partition("-")
        if not _number(low) or (dash and not _number(high)):
            return None
        first, last = int(low), int(high) if dash else int(low)
        if last < first or last >= MAX_CPUS:
            return None
        cpus.update(range(first, last + 1))
    return frozenset(cpus) or None


def _number(text: str) -> bool:
    return text.isascii() and text.isdigit()
