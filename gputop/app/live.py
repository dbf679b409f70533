"""`gputop [OPTIONS]`: the live view (with --record, --attach), one sample printed with
--once, or the fleet with --fleet (gputop.app.fleet)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gputop import __version__
from gputop.app import fleet, options
from gputop.app.options import BadInput
from gputop.sources import first_sample

if TYPE_CHECKING:
    import subprocess

    from gputop.core.model import Frame
    from gputop.export.scope import TrainerScope
    from gputop.frames.sampler import Sampler
    from gputop.recording.writer_thread import Retention
    from gputop.sources.first_sample import FirstSample

DEFAULT_INTERVAL_S = 1.0
# --demo --once waits for its trainer's verdict this long at most (torch's import on a loaded
# host included): a bound, not a speed check; past it, what it has is printed, verdict n/a
DEMO_VERDICT_S = 30.0
DEMO_STEPS = 8  # a window this long before its verdict counts


def parser() -> argparse.ArgumentParser:
    """The main command's options (each other command has its own parser)."""
    parser = options.Parser(
        prog="gputop",
        description="nvidia-smi + top for people who train models. "
        "`gputop run [--] CMD ...` runs CMD with the step probe and attaches to it; "
        "`gputop serve` publishes /metrics for Prometheus (see gputop serve --help); "
        "`gputop probe-path` prints a directory that makes the probe importable from any "
        "Python: PYTHONPATH=$(gputop probe-path) python -m gputop.probe train.py",
    )
    parser.add_argument("--version", action="version", version=f"gputop {__version__}")
    parser.add_argument("--once", action="store_true", help="sample one interval, print, exit")
    parser.add_argument("--json", action="store_true", help="with --once: print JSON")
    parser.add_argument("--interval", type=options.interval, default=None, metavar="SECONDS",
                        help=f"refresh period (default {DEFAULT_INTERVAL_S}; with --fleet, "
                        "Prometheus's scrape interval)")
    parser.add_argument("--attach", type=options.pid, metavar="PID",
                        help="show the step pane for a trainer running under the probe")
    parser.add_argument("--demo", nargs="?", const=options.DEFAULT_SCENARIO, metavar="SCENARIO",
                        help="simulated GPUs + a built-in demo trainer "
                        f"(scenario default {options.DEFAULT_SCENARIO})")
    parser.add_argument("--gpus", type=options.gpu_count, default=None, metavar="N",
                        help="number of simulated GPUs with --demo (1..16)")
    parser.add_argument("--membw", choices=options.MEMBW_SOURCES, default="auto",
                        help="host memory-bandwidth source (default auto)")
    parser.add_argument("--ascii", action="store_true",
                        help="draw with ASCII characters only (automatic where the locale's "
                        "encoding is not UTF-8); NO_COLOR=1 turns colour off")
    parser.add_argument("--readonly", action="store_true", help=options.READONLY_HELP)
    fleet.add_options(parser)
    parser.add_argument("--record", metavar="FILE",
                        help="also record what the screen shows to FILE (SQLite, "
                        "see `gputop record`); your own trainers only, unless --all-users")
    parser.add_argument("--all-users", action="store_true",
                        help=f"with --record: {options.ALL_USERS_HELP}")
    options.add_retention(parser)
    options.add_mode(parser, "a recording")
    return parser


def handle(args: argparse.Namespace) -> int:
    """Check the options that need no loading, look at the processes, then the rest."""
    if args.json and not args.once:
        raise BadInput("--json goes with --once (see gputop --help)")
    options.check_gpus_with_demo(args)
    # The live view looks at the processes before loading the rest of gputop, so its first
    # %CPU covers that loading instead of a wait after it.
    look = None if args.once or args.fleet is not None else first_sample.take()
    try:
        return _after_look(args, look)
    finally:
        if look is not None:
            look.close()


def _after_look(args: argparse.Namespace, look: FirstSample | None) -> int:
    from gputop.app.wiring import check_attach, check_scenario, trainer_scope

    if args.demo is not None:
        check_scenario(args.demo)
    if args.attach is not None:
        check_attach(args.attach)
    if args.once and (args.record or args.max_size or args.keep):
        raise BadInput("--record, --max-size and --keep go with the live view, not --once")
    if args.fleet is not None:
        return fleet.handle(args)
    if args.fleet_timeout is not None:
        raise BadInput("--fleet-timeout goes with --fleet URL")
    if args.interval is None:
        args.interval = DEFAULT_INTERVAL_S
    if args.once:
        return _once(args)
    if (args.max_size or args.keep) and not args.record:
        raise BadInput("--max-size and --keep go with --record FILE")
    if args.all_users and not args.record:
        raise BadInput("--all-users goes with --record FILE (the screen shows every user's)")
    if args.record:
        from gputop.app.wiring import check_record_path

        check_record_path(args.record)  # bad input is bad input, terminal or not
    options.need_terminal()
    try:
        return run_live(interval_s=args.interval, demo=args.demo, gpus=args.gpus,
                        membw=args.membw, attach_pid=args.attach, ascii=args.ascii,
                        record=args.record,
                        retention=options.retention(args) if args.record else None,
                        readonly=args.readonly,
                        on_exit=_say_final if args.demo is None else None, first_sample=look,
                        scope=trainer_scope(args.all_users), mode=args.mode)
    except KeyboardInterrupt:  # Ctrl-C quits the live view at any moment, as q does
        return options.EXIT_OK


def _once(args: argparse.Namespace) -> int:
    """`--once [--json]`: sample one interval and print it; with --demo, its processes run
    (the trainer too, unless --attach names one) until the trainer has a verdict."""
    from gputop.app.demo_processes import demo_processes
    from gputop.app.wiring import build_sampler

    with demo_processes(args.demo, args.gpus, with_trainer=args.attach is None) as demo:
        sampler = build_sampler(
            demo=args.demo, gpus=args.gpus, membw=args.membw, interval_s=args.interval,
            advice_after=1, owner_pids=demo.owners,
        )
        try:
            target = args.attach if demo.trainer is None else demo.trainer.pid
            if target is not None:
                sampler.attach(target)
            sampler.prime()
            if demo.trainer is None:
                sampler.wait(args.interval)
                frame = sampler.sample()
            else:
                frame = _until_verdict(sampler, demo.trainer.process)
        finally:
            sampler.close()
    if args.json:
        from gputop.export.snapshot import dumps

        sys.stdout.write(dumps(frame) + "\n")
    else:
        from gputop.export.text import ascii_text, render, write_text

        text = render(frame)
        write_text(ascii_text(text) if args.ascii else text, sys.stdout)
    return options.EXIT_OK


def _until_verdict(sampler: Sampler, trainer: subprocess.Popen[bytes]) -> Frame:
    """Sample every interval until `trainer` (attached) has a verdict that two samples in a
    row agree on, it exits, or DEMO_VERDICT_S have passed: the frame that ends the wait."""
    deadline = time.monotonic() + DEMO_VERDICT_S
    said = None
    while True:
        sampler.wait(sampler.interval_s)
        frame = sampler.sample()
        verdict = _verdict(frame, trainer.pid)
        if ((verdict is not None and verdict == said) or trainer.poll() is not None
                or time.monotonic() >= deadline):
            return frame
        said = verdict


def _verdict(frame: Frame, pid: int) -> str | None:
    """Trainer `pid`'s verdict once its window holds DEMO_STEPS steps; None before, or while
    its steps say nothing."""
    for state in frame.attached:
        if state.pid == pid and state.summary.steps >= DEMO_STEPS:
            verdict = state.summary.verdict
            return None if verdict == "unknown" else verdict
    return None


def _say_final(final: Frame) -> None:
    """After the live view: the last summary and advice of the trainers it was attached to
    (--attach, or Enter on a process), as `gputop run` prints them; nothing without one."""
    from gputop.export.text import attach_summary, write_text

    if final.attached:
        with contextlib.suppress(OSError):
            write_text(attach_summary(final), sys.stderr)
            sys.stderr.flush()


def run_live(
    *, interval_s: float = 1.0, demo: str | None = None, gpus: int | None = None,
    membw: str = "auto", attach_pid: int | None = None, ascii: bool = False,
    record: str | None = None, retention: Retention | None = None, readonly: bool = False,
    on_exit: Callable[[Frame], None] | None = None, first_sample: FirstSample | None = None,
    scope: TrainerScope | None = None, mode: int | None = None,
) -> int:
    """The live TUI; with `demo`, simulated GPUs plus the real demo trainer on GPU 0;
    `ascii` draws with ASCII characters only; `record` also writes what it shows there (a
    new file with `mode`), the trainers of `scope` only (default: the caller's);
    `readonly` sends no signals; `on_exit`
    gets the last frame, with the advice then on screen, once the terminal is back;
    `first_sample`: the CLI's, taken as it started."""
    from gputop.app.demo_processes import demo_processes
    from gputop.app.wiring import build_sampler, open_recorder, signaller
    from gputop.export.scope import ScopedSink, TrainerScope
    from gputop.tui import run_tui

    scope = scope or TrainerScope.of_caller()
    recorder = (open_recorder(record, retention, scope.label, mode) if record is not None
                else None)
    try:
        with demo_processes(demo, gpus) as shown:
            sampler = build_sampler(demo=demo, gpus=gpus, membw=membw, interval_s=interval_s,
                                    defer=True, owner_pids=shown.owners,
                                    early=True, first_sample=first_sample)
            if recorder is not None:
                sampler.add_sink(ScopedSink(recorder, scope))
            trainer = shown.trainer
            target = attach_pid if attach_pid is not None else (trainer.pid if trainer else None)
            return run_tui(sampler, attach_pid=target, ascii=ascii,
                           signaller=signaller(readonly), on_exit=on_exit)
    finally:
        if recorder is not None:
            recorder.close()
