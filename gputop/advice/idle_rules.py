"""gpu-idle: a process holds GPU memory and does nothing with it; freeing it frees the GPU."""

from __future__ import annotations

from gputop.advice.context import Context
from gputop.analysis.idle_holders import IdleHolder, idle_holders
from gputop.core.model import Advice

GIB = 1024**3
LONG_IDLE_S = 60.0  # idle this long, or stopped, is a warning; less may be a pause (info)
STATE_WORDS = {"R": "running", "S": "sleeping", "D": "blocked in the kernel (D)",
               "T": "stopped (T)", "t": "stopped by a debugger (t)", "Z": "a zombie (Z)",
               "I": "idle (I)"}


def gpu_idle(ctx: Context) -> list[Advice]:
    """GPU memory held by processes with no util, no steps and no CPU: name them and what
    freeing them gives back."""
    found = idle_holders(ctx.frame, ctx.gpu_util_history)
    if not found:
        return []
    gpus = sorted({h.gpu.index for h in found})
    several = len(gpus) > 1
    which = ", ".join(str(i) for i in gpus)
    return [Advice(
        id="gpu-idle",
        severity="warn" if any(h.idle_s >= LONG_IDLE_S or h.kind == "stopped"
                               for h in found) else "info",
        title=(f"GPUs {which} are" if several else f"GPU {which} is") + " held by "
        + ("idle processes" if len(found) > 1 else "an idle process"),
        evidence="; ".join(_evidence(ctx, h) for h in found),
        action=" ".join(_action(h) for h in found),
    )]


def _evidence(ctx: Context, h: IdleHolder) -> str:
    """'GPU 2 holds 78.0 GiB for PID 4121 (ana, ipykernel_launcher): a Jupyter kernel,
    sleeping, no CPU for 42 min, util 0% over 30 samples'."""
    row = h.row
    utils = ctx.gpu_util_history.get(h.gpu.index) or (
        () if h.gpu.util_percent is None else (h.gpu.util_percent,))
    util = f"{max(utils):.0f}%" if utils else "n/a"
    own = next((p.sm_util_percent for p in h.gpu.processes if p.pid == row.pid), None)
    text = (f"GPU {h.gpu.index} holds {h.held_bytes / GIB:.1f} GiB for PID {row.pid} "
            f"({row.username or '?'}, {_program(row.cmdline, row.name)}): {_what(h)}, "
            f"{STATE_WORDS.get(row.state, f'state {row.state}')}, "
            f"no CPU for {_span(h.idle_s)}")
    if h.last_step_s is not None:
        text += f", last step {_span(h.last_step_s)} ago"
    text += f"; GPU util at most {util} over {len(utils)} samples"
    if own is not None:
        text += f", its own {own:.0f}%"
    return text


def _what(h: IdleHolder) -> str:
    return {"jupyter": "a Jupyter kernel", "stopped": "a stopped job",
            "blocked": "a process blocked in the kernel",
            "stalled": "a trainer that stopped stepping"}.get(h.kind, "an idle process")


def _action(h: IdleHolder) -> str:
    """What to do with the holder, and the figure it gives back."""
    pid = h.row.pid
    do = {
        "jupyter": f"Shut down or restart the Jupyter kernel (or `kill {pid}`)",
        "stopped": f"PID {pid} is stopped (SIGSTOP / Ctrl-Z): `kill -CONT {pid}` to resume "
        f"it, or end it (`kill {pid}`)",
        "blocked": f"PID {pid} waits in the kernel (on I/O or the driver: "
        f"`cat /proc/{pid}/wchan` names where); end it once that returns (`kill {pid}`)",
        "stalled": f"Trainer {pid} is hung (`py-spy dump --pid {pid}` shows where): end it "
        f"(`kill {pid}`)",
    }.get(h.kind, f"Free it if nothing will use it (`kill {pid}`)")
    held = f"{h.held_bytes / GIB:.1f} GiB"
    total = h.gpu.memory_total_bytes
    if h.alone:
        gain = f"the whole GPU {h.gpu.index}"
    elif total:
        gain = f"{held} of GPU {h.gpu.index}'s {total / GIB:.1f} GiB"
    else:
        gain = f"{held} on GPU {h.gpu.index}"
    return f"{do}: that frees {held}, {gain}, for others." if h.alone else (
        f"{do}: that frees {gain} for others.")


def _program(cmdline: tuple[str, ...], name: str) -> str:
    """The script or module a command line runs ('ipykernel_launcher', 'train.py'), else
    its process name."""
    if not cmdline:
        return name
    program = cmdline[0].rsplit("/", 1)[-1]
    if not program.startswith("python"):
        return program
    args = list(cmdline[1:])
    for at, arg in enumerate(args):
        if arg in ("-m", "-c") and at + 1 < len(args):
            return args[at + 1] if arg == "-m" else f"{program} -c"
        if not arg.startswith("-"):
            return arg.rsplit("/", 1)[-1]
    return program


def _span(seconds: float) -> str:
    """'0.9 s', '12 s', '42 min', '3 h 05 min'."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"
