"""`gputop run [--] CMD ...`: CMD started under the step probe with the TUI attached (without
a terminal, CMD keeps our stdio); at the end, its exit code and its step summary."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gputop.app import options
from gputop.app.options import BadInput

if TYPE_CHECKING:
    import subprocess

    from gputop.app.children import RunCommand
    from gputop.core.model import AttachState, Frame
    from gputop.frames.sampler import Sampler


def parser() -> argparse.ArgumentParser:
    """`gputop run`'s options, then CMD."""
    parser = options.Parser(prog="gputop run",
                            description="run CMD with the step probe, TUI attached")
    parser.add_argument("--interval", type=options.interval, default=1.0, metavar="SECONDS")
    parser.add_argument("--membw", choices=options.MEMBW_SOURCES, default="auto")
    parser.add_argument("--ascii", action="store_true", help="draw with ASCII characters only")
    parser.add_argument("--readonly", action="store_true", help=options.READONLY_HELP)
    parser.add_argument("--log", metavar="FILE",
                        help="where CMD's output goes while the TUI has the terminal "
                        "(default gputop-run-PID.log in the current directory)")
    options.add_mode(parser, "the log")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="CMD")
    return parser


def handle(args: argparse.Namespace) -> int:
    """Run CMD to its end (or until the user leaves it running); CMD's exit code."""
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise BadInput("run needs a command: gputop run -- python train.py")
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return _run_without_terminal(command, args)
    log = args.log or f"gputop-run-{os.getpid()}.log"
    from gputop.app.children import RunCommand

    new_log = args.log is None  # our own name: a file of ours, never one already there
    child = RunCommand(start_probed(command, log=log, new_log=new_log, log_mode=args.mode),
                       log)
    final = None
    try:
        final = run_attached_child(child, interval_s=args.interval, membw=args.membw,
                                   ascii=args.ascii, readonly=args.readonly)
    finally:
        code = _finish(child, command[0])
    if code is None:
        _say(f"gputop: left {command[0]} (PID {child.pid}) running; its output goes to {log}",
             final)
        return options.EXIT_OK
    _say(f"gputop: {command[0]} exited with code {code}; its output is in {log}", final)
    return code


def _finish(child: RunCommand, name: str) -> int | None:
    """The command's exit code; a command still running is stopped unless it was detached."""
    if child.running() and not child.detached:
        from gputop.app.children import STOP_GRACE_S

        _say(f"gputop: stopping {name} (PID {child.pid}): Ctrl-C (SIGINT), then SIGTERM "
             f"if it still runs after {STOP_GRACE_S:.0f} s")
    return child.finish()


def _say(line: str, final: Frame | None = None) -> None:
    """`line` and, after it, the final step summary with its advice (as without a terminal),
    on stderr; a terminal that hung up gets nothing, and that is no error."""
    from gputop.export.text import attach_summary, write_text

    text = line + "\n" + (attach_summary(final) if final is not None else "")
    with contextlib.suppress(OSError):
        write_text(text, sys.stderr)
        sys.stderr.flush()


def _run_without_terminal(command: list[str], args: argparse.Namespace) -> int:
    """No terminal for a TUI: CMD keeps our stdio, and its step summary is printed at the end."""
    from gputop.app.children import exit_status
    from gputop.app.wiring import build_sampler
    from gputop.export.text import attach_summary, write_text

    sampler = build_sampler(membw=args.membw, interval_s=args.interval, advice_after=1)
    try:
        child = start_probed(command)
        frame = watch_child(child, sampler)
    finally:
        sampler.close()
    code = exit_status(child.wait())
    write_text(f"gputop: {command[0]} exited with code {code}\n{attach_summary(frame)}", sys.stderr)
    return code


def start_probed(
    command: Sequence[str], log: str | None = None, new_log: bool = False,
    log_mode: int | None = None,
) -> subprocess.Popen[bytes]:
    """Start `command` with the step probe installed, a log it makes with `log_mode` (default
    0600); a bad command or log is bad input."""
    from gputop.app.children import LogError, start_under_probe
    from gputop.core.safe_files import PRIVATE

    try:
        return start_under_probe(list(command), log=log, new_log=new_log,
                                 log_mode=PRIVATE if log_mode is None else log_mode)
    except LogError as exc:
        raise BadInput(str(exc)) from None
    except FileNotFoundError:
        raise BadInput(f"command not found: {command[0]}") from None
    except PermissionError:
        raise BadInput(f"command not executable: {command[0]}") from None
    except IsADirectoryError:
        raise BadInput(f"command is a directory: {command[0]}") from None
    except OSError as exc:
        raise BadInput(f"cannot start {command[0]}: {exc.strerror}") from None


def _all_ranks_open(attached: Sequence[AttachState]) -> bool:
    """Whether every rank of the job (by the world size it reports) has an open ring."""
    open_ = [a for a in attached if a.error is None]
    if not open_ or len(open_) < len(attached):
        return False
    return len(open_) >= max(a.config.world_size or 1 for a in open_)


def watch_child(child: subprocess.Popen[bytes], sampler: Sampler) -> Frame:
    """Sample `child` under the probe until it exits; the frame read right after it ended."""
    sampler.attach(child.pid)
    sampler.prime()
    rings = sampler.attach_source
    ring_open = rings is None
    while child.poll() is None:
        if ring_open:
            sampler.wait(min(sampler.interval_s, 0.5))
            sampler.sample()
        else:  # rings are unlinked when their process exits: open each as soon as it exists
            sampler.wait(0.02)
            attached = rings.sample() if rings is not None else ()
            ring_open = _all_ranks_open(attached)
    return sampler.sample()


def run_attached_child(
    command: RunCommand, *, interval_s: float = 1.0, membw: str = "auto", ascii: bool = False,
    readonly: bool = False,
) -> Frame | None:
    """`gputop run`: the TUI attached to `command`, which it may interrupt, stop or leave
    running; the frame to summarise at the end (None if none was shown). Ending a command
    that is still running is the caller's (`RunCommand.finish`). `readonly`: `k` is off."""
    from gputop.app.wiring import build_sampler, signaller
    from gputop.tui import run_tui

    final: list[Frame] = []
    sampler = build_sampler(membw=membw, interval_s=interval_s, defer=True)
    run_tui(sampler, attach_pid=command.pid, command=command, on_exit=final.append,
            ascii=ascii, signaller=signaller(readonly))
    return final[-1] if final else None
