"""The cores a process may use: its CPU affinity, capped by its cgroup's CPU quota."""

from __future__ import annotations

from pathlib import Path

from gputop.sources.affinity import cpus_allowed


def cores_allowed(pid: int, proc_root: str = "/proc",
                  cgroup_root: str = "/sys/fs/cgroup") -> float | None:
    """The CPUs `pid`'s affinity allows (/proc/PID/status Cpus_allowed_list), no more than
    its cgroup's quota allows (cgroup v2 cpu.max, v1 cpu.cfs_quota_us, its own and its
    ancestors'); None when it is gone or its affinity cannot be read."""
    cpus = affinity_count(pid, proc_root)
    if cpus is None:
        return None
    quota = cgroup_quota(pid, proc_root, cgroup_root)
    return float(cpus) if quota is None else min(float(cpus), quota)


def affinity_count(pid: int, proc_root: str = "/proc") -> int | None:
    """How many CPUs `pid` may be scheduled on (affinity.cpus_allowed), or None."""
    cpus = cpus_allowed(pid, proc_root)
    return None if cpus is None else len(cpus)


def cgroup_quota(pid: int, proc_root: str = "/proc",
                 cgroup_root: str = "/sys/fs/cgroup") -> float | None:
    """The cores `pid`'s cgroup and its ancestors allow at most (quota / period, the
    tightest), or None without a quota or where it cannot be read."""
    try:
        lines = Path(proc_root, str(pid), "cgroup").read_text().splitlines()
    except OSError:
        return None
    limits: list[float] = []
    for line in lines:
        _, controllers, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        if not path:
            continue
        if controllers == "":  # cgroup v2: the unified hierarchy
            for root in (Path(cgroup_root), Path(cgroup_root, "unified")):
                limits += _v2_limits(root, path)
        elif "cpu" in controllers.split(","):
            limits += _v1_limits(Path(cgroup_root, controllers), path)
    return min(limits) if limits else None


def _ancestors(root: Path, path: str) -> list[Path]:
    """The cgroup at `path` under `root` and each of its parents up to `root` itself."""
    parts = [p for p in path.split("/") if p]
    return [root.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _v2_limits(root: Path, path: str) -> list[float]:
    """The quotas cpu.max sets along `path`: 'QUOTA PERIOD' gives QUOTA / PERIOD cores."""
    limits = []
    for group in _ancestors(root, path):
        try:
            quota, _, period = group.joinpath("cpu.max").read_text().strip().partition(" ")
        except OSError:
            continue
        if quota != "max" and _positive(quota) and _positive(period):
            limits.append(int(quota) / int(period))
    return limits


def _v1_limits(root: Path, path: str) -> list[float]:
    """The quotas cpu.cfs_quota_us sets along `path` (-1: none)."""
    limits = []
    for group in _ancestors(root, path):
        try:
            quota = group.joinpath("cpu.cfs_quota_us").read_text().strip()
            period = group.joinpath("cpu.cfs_period_us").read_text().strip()
        except OSError:
            continue
        if _positive(quota) and _positive(period):
            limits.append(int(quota) / int(period))
    return limits


def _positive(text: str) -> bool:
    return text.isdigit() and int(text) > 0
