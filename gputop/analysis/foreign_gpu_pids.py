"""GPU processes NVML names by PIDs of another namespace (gputop in a container), matched to
our processes where that is proven, else one honest line.

NVML reports host PIDs and the driver ignores PID namespaces, so inside a container without
--pid=host NVML's PIDs are not ours. A PID of ours is matched to one of NVML's only where
it is proven: the GPU has a single compute process, its device node is known (NVML's index
given as its node, or the container sees a single GPU and a single node), and a single
process here (gputop aside) holds that node open. NSpid cannot help from inside: /proc
shows a process's PIDs from its own namespace down, never the host's above.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gputop.core.model import ForeignGpuPid, GpuReport

__all__ = ["ForeignGpuPid", "foreign_gpu_pids", "match_line", "outside_line"]

SHOWN_PIDS = 6  # host PIDs named in the line; the rest counted

def foreign_gpu_pids(gpu: GpuReport, ours: Iterable[int],
                     nodes: tuple[int, ...] = (), held: Mapping[int, frozenset[int]] | None = None,
                     node_of: Mapping[int, int] | None = None,
                     me: int | None = None) -> tuple[ForeignGpuPid, ...]:
    """Each (NVML PID, GPU) whose PID is not among `ours` (the PIDs /proc shows), matched
    where proven. `nodes`: the N of each /dev/nvidiaN here; `held`: N -> the PIDs here
    holding it open (gputop's own, `me`, aside); `node_of`: GPU index -> N, where known."""
    visible = set(ours)
    found: list[ForeignGpuPid] = []
    for device in gpu.gpus:
        outside = sorted({p.pid for p in device.processes if p.pid not in visible})
        if not outside:
            continue
        node = _node(device.index, len(gpu.gpus), nodes, node_of)
        holding = [] if node is None or held is None else sorted(
            pid for pid in held.get(node, ()) if pid != me)
        single = len({p.pid for p in device.processes}) == 1 and len(holding) == 1
        for host_pid in outside:
            if single and node is not None:
                found.append(ForeignGpuPid(
                    host_pid, device.index, holding[0],
                    f"the only process here holding /dev/nvidia{node}, the GPU's only compute "
                    "process"))
            else:
                found.append(ForeignGpuPid(host_pid, device.index))
    return tuple(found)


def _node(index: int, devices: int, nodes: tuple[int, ...],
          node_of: Mapping[int, int] | None) -> int | None:
    """The N of the GPU `index`'s /dev/nvidiaN, where known."""
    if node_of is not None and index in node_of:
        return node_of[index]
    if devices == 1 and len(nodes) == 1:
        return nodes[0]
    return None


def outside_line(found: Iterable[ForeignGpuPid]) -> str | None:
    """The honest line for the NVML PIDs left unmatched, None when there are none."""
    pids = sorted({f.host_pid for f in found if f.pid is None})
    if not pids:
        return None
    named = ", ".join(map(str, pids[:SHOWN_PIDS]))
    more = f" and {len(pids) - SHOWN_PIDS} more" if len(pids) > SHOWN_PIDS else ""
    return (f"GPU processes run outside this container's PID namespace (NVML reports host "
            f"PIDs {named}{more}): start the container with --pid=host or run gputop on the "
            "host")


def match_line(found: ForeignGpuPid) -> str | None:
    """How a host PID was matched to ours, in one line; None when it was not."""
    if found.pid is None:
        return None
    return f"matched: PID {found.pid} here is host PID {found.host_pid} — {found.how}"
