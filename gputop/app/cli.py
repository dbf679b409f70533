"""Command line: argument parsing, exit codes and wiring; nothing else.

Exit codes: 0 ok, 2 bad input (one line on stderr), 1 internal error.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn

from gputop import __version__
from gputop.app.commands import BadInput
from gputop.sources import first_sample

if TYPE_CHECKING:
    from gputop.app.children import RunCommand
    from gputop.core.model import Frame
    from gputop.export.http import Tls
    from gputop.recording.writer_thread import Retention

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE = 0, 1, 2
DEFAULT_INTERVAL_S = 1.0
DEFAULT_SCENARIO = "data-starved"
READONLY_HELP = "send no signals: the k (kill) key is off"
ALL_USERS_HELP = ("take every user's trainers (root only); by default only those of the user "
                  "running gputop")


class UsageError(Exception):
    """Bad input from the user: reported in one line with exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see gputop --help)")


def _seconds_between(low: float, high: float, what: str) -> Callable[[str], float]:
    """An argparse type: a number of seconds from `low` to `high`."""

    def seconds(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        if not math.isfinite(value) or value < low or value > high:
            raise argparse.ArgumentTypeError(
                f"{what} between {low:g} and {high:g} s, got {text}")
        return value

    return seconds


_interval = _seconds_between(0.1, 3600, "interval must be")
_fleet_timeout = _seconds_between(0.1, 600, "must be")


def _pid(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a process id: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"not a process id: {text!r}")
    return value


_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_TIME_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _size(text: str) -> int:
    """Bytes from '500M', '2G', '1048576' (binary units; a trailing 'B' or 'iB' is allowed)."""
    body = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = body[-1:] if body[-1:] in _SIZE_UNITS else ""
    try:
        value = float(body[: len(body) - len(unit)])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (say 500M or 2G)") from None
    if not math.isfinite(value) or value * _SIZE_UNITS[unit] < 1 << 20:
        raise argparse.ArgumentTypeError(f"size must be at least 1M, got {text}")
    return int(value * _SIZE_UNITS[unit])


def _duration(text: str) -> float:
    """Seconds from '90s', '30m', '24h', '7d', '2w' or a plain number of seconds."""
    body = text.strip().lower()
    unit = body[-1:] if body[-1:] in _TIME_UNITS else "s"
    number = body[:-1] if body[-1:] in _TIME_UNITS else body
    try:
        value = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (say 90s, 30m, 24h or "
                                         "7d)") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"duration must be positive, got {text}")
    return value * _TIME_UNITS[unit]


def _add_retention(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-size", type=_size, metavar="SIZE",
                        help="keep the recording under SIZE (e.g. 500M, 2G): the oldest ticks "
                        "are dropped")
    parser.add_argument("--keep", type=_duration, metavar="DURATION",
                        help="keep only the last DURATION of ticks (e.g. 24h, 7d)")


def _file_mode(text: str) -> int:
    """Permission bits from octal: '0600', '640'."""
    try:
        value = int(text, 8)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a file mode: {text!r} (say 0600 or 0640)"
                                         ) from None
    if not 0 <= value <= 0o777:
        raise argparse.ArgumentTypeError(f"a file mode is 0000 to 0777, got {text}")
    return value


def _add_mode(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--mode", type=_file_mode, default="0600", metavar="OCTAL",
                        help=f"permissions of {what} gputop creates (default 0600: it holds "
                        "other users' command lines; a stricter umask still applies)")


def _gpu_count(text: str) -> int:
    from gputop.app.commands import check_gpu_count

    try:
        return check_gpu_count(int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a GPU count: {text!r}") from None
    except BadInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    """The main command's options (the `run` subcommand is parsed separately)."""
    parser = _Parser(
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
    parser.add_argument("--interval", type=_interval, default=None, metavar="SECONDS",
                        help=f"refresh period (default {DEFAULT_INTERVAL_S}; with --fleet, "
                        "Prometheus's scrape interval)")
    parser.add_argument("--attach", type=_pid, metavar="PID",
                        help="show the step pane for a trainer running under the probe")
    parser.add_argument("--demo", nargs="?", const=DEFAULT_SCENARIO, metavar="SCENARIO",
                        help="simulated GPUs + a built-in demo trainer "
                        f"(scenario default {DEFAULT_SCENARIO})")
    parser.add_argument("--gpus", type=_gpu_count, default=None, metavar="N",
                        help="number of simulated GPUs with --demo (1..16)")
    parser.add_argument("--membw", choices=("auto", "estimate", "off"), default="auto",
                        help="host memory-bandwidth source (default auto)")
    parser.add_argument("--ascii", action="store_true",
                        help="draw with ASCII characters only (automatic where the locale's "
                        "encoding is not UTF-8); NO_COLOR=1 turns colour off")
    parser.add_argument("--readonly", action="store_true", help=READONLY_HELP)
    parser.add_argument("--fleet", "--prometheus", dest="fleet", metavar="URL",
                        help="the fleet: every `gputop serve` host this Prometheus server "
                        "scrapes (e.g. http://prometheus:9090), worst first, Enter for one "
                        "host; with --once, printed once")
    parser.add_argument("--fleet-timeout", type=_fleet_timeout, default=None,
                        metavar="SECONDS", help="with --fleet: the most one request to "
                        "Prometheus may take, all of it (default 10)")
    parser.add_argument("--record", metavar="FILE",
                        help="also record what the screen shows to FILE (SQLite, "
                        "see `gputop record`); your own trainers only, unless --all-users")
    parser.add_argument("--all-users", action="store_true",
                        help=f"with --record: {ALL_USERS_HELP}")
    _add_retention(parser)
    _add_mode(parser, "a recording")
    return parser


def record_parser() -> argparse.ArgumentParser:
    """`gputop record`'s options."""
    parser = _Parser(prog="gputop record",
                     description="sample without a screen and record every tick, and every "
                     "step of every probed trainer of yours (root: --all-users for everyone's), "
                     "to a SQLite file (schema gputop.record/1); `gputop replay FILE` shows it "
                     "again; secret-looking command-line values are masked")
    parser.add_argument("file", nargs="?", metavar="FILE",
                        help="where to record (default gputop-YYYYmmdd-HHMMSS.sqlite here); "
                        "an existing recording is appended to")
    parser.add_argument("--interval", type=_interval, default=1.0, metavar="SECONDS",
                        help="sampling period (default 1.0)")
    parser.add_argument("--attach", type=_pid, nargs="+", default=[], metavar="PID",
                        help="trainers to attach to from the start (every probed process "
                        "found later is attached too)")
    parser.add_argument("--duration", type=_duration, metavar="DURATION",
                        help="stop after DURATION (e.g. 8h); default: until Ctrl-C or SIGTERM")
    parser.add_argument("--membw", choices=("auto", "estimate", "off"), default="auto")
    parser.add_argument("--demo", nargs="?", const=DEFAULT_SCENARIO, metavar="SCENARIO",
                        help="simulated GPUs + the built-in demo trainer")
    parser.add_argument("--gpus", type=_gpu_count, default=None, metavar="N")
    parser.add_argument("--all-users", action="store_true", help=ALL_USERS_HELP)
    _add_retention(parser)
    _add_mode(parser, "a recording")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `gputop` console script."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        if args_list and args_list[0] == "run":
            return _run(args_list[1:])
        if args_list and args_list[0] == "probe-path":
            return _probe_path(args_list[1:])
        if args_list and args_list[0] == "record":
            return _record(record_parser().parse_args(args_list[1:]))
        if args_list and args_list[0] == "replay":
            return _replay(replay_parser().parse_args(args_list[1:]))
        if args_list and args_list[0] == "serve":
            return _serve(args_list[1:])
        if args_list and args_list[0] == "report":
            return _report(report_parser().parse_args(args_list[1:]))
        if args_list and args_list[0] == "export":
            return _export(export_parser().parse_args(args_list[1:]))
        return _main(build_parser().parse_args(args_list))
    except (UsageError, BadInput) as exc:
        print(f"gputop: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        if os.environ.get("GPUTOP_DEBUG"):
            raise
        return 130
    except Exception as exc:  # the one place internal errors become one line
        if os.environ.get("GPUTOP_DEBUG"):
            raise
        print(f"gputop: internal error: {type(exc).__name__}: {exc} "
              "(set GPUTOP_DEBUG=1 for a traceback)", file=sys.stderr)
        return EXIT_INTERNAL


def _main(args: argparse.Namespace) -> int:
    if args.json and not args.once:
        raise UsageError("--json goes with --once (see gputop --help)")
    if args.gpus is not None and args.demo is None:
        raise UsageError("--gpus sets the number of simulated GPUs and goes with --demo")
    # The live view looks at the processes before loading the rest of gputop, so its first
    # %CPU covers that loading instead of a wait after it.
    look = None if args.once or args.fleet is not None else first_sample.take()
    try:
        return _main_after_look(args, look)
    finally:
        if look is not None:
            look.close()


def _main_after_look(args: argparse.Namespace, look: first_sample.FirstSample | None) -> int:
    from gputop.app.commands import check_attach, check_scenario

    if args.demo is not None:
        check_scenario(args.demo)
    if args.attach is not None:
        check_attach(args.attach)
    if args.once and (args.record or args.max_size or args.keep):
        raise UsageError("--record, --max-size and --keep go with the live view, not --once")
    if args.fleet is not None:
        return _fleet(args)
    if args.fleet_timeout is not None:
        raise UsageError("--fleet-timeout goes with --fleet URL")
    if args.interval is None:
        args.interval = DEFAULT_INTERVAL_S
    if args.once:
        return _once(args)
    if (args.max_size or args.keep) and not args.record:
        raise UsageError("--max-size and --keep go with --record FILE")
    if args.all_users and not args.record:
        raise UsageError("--all-users goes with --record FILE (the screen shows every user's)")
    try:
        from gputop.app.commands import run_live, trainer_scope

        return run_live(interval_s=args.interval, demo=args.demo, gpus=args.gpus,
                        membw=args.membw, attach_pid=args.attach, ascii=args.ascii,
                        record=args.record,
                        retention=_retention(args) if args.record else None,
                        readonly=args.readonly,
                        on_exit=_say_final if args.demo is None else None, first_sample=look,
                        scope=trainer_scope(args.all_users), mode=args.mode)
    except KeyboardInterrupt:  # Ctrl-C quits the live view at any moment, as q does
        return EXIT_OK


def replay_parser() -> argparse.ArgumentParser:
    """`gputop replay`'s options."""
    parser = _Parser(prog="gputop replay",
                     description="show a recording (from `gputop record` or --record) in the "
                     "live view's TUI: ←/→ step, g/G first/last tick, +/- speed, p pause")
    parser.add_argument("file", metavar="FILE", help="a gputop.record/1 recording")
    parser.add_argument("--speed", type=_speed, default=1.0, metavar="X",
                        help="play X times as fast as recorded (default 1)")
    parser.add_argument("--ascii", action="store_true", help="draw with ASCII characters only")
    return parser


def _speed(text: str) -> float:
    from gputop.frames.playback import SPEEDS

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a speed: {text!r}") from None
    if value not in SPEEDS:
        raise argparse.ArgumentTypeError(
            f"speed must be one of {', '.join(f'{s:g}' for s in SPEEDS)}, got {text}")
    return value


def _replay(args: argparse.Namespace) -> int:
    """`gputop replay FILE`: the TUI over a recording; it needs a terminal."""
    from gputop.app.commands import open_playback, run_replay

    open_playback(args.file).recording.close()  # a bad file is one line, terminal or not
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError("replay needs a terminal; query the file with sqlite3 instead "
                         "(README: Recording)")
    try:
        return run_replay(args.file, speed=args.speed, ascii=args.ascii)
    except KeyboardInterrupt:
        return EXIT_OK


def report_parser() -> argparse.ArgumentParser:
    """`gputop report`'s options."""
    parser = _Parser(prog="gputop report",
                     description="turn a recording into one self-contained HTML page of "
                     "charts over the whole run (opens offline, fetches nothing)")
    parser.add_argument("file", metavar="FILE", help="a gputop.record/1 recording")
    parser.add_argument("-o", "--output", required=True, metavar="HTML",
                        help="where to write the report (replaced if it exists)")
    _add_mode(parser, "the report")
    return parser


def _report(args: argparse.Namespace) -> int:
    """`gputop report FILE -o report.html`: headless, no Textual."""
    from gputop.export.report.data import ReportError
    from gputop.export.report.page import write_report

    try:
        written = write_report(args.file, args.output, args.mode)
    except ReportError as exc:
        raise UsageError(str(exc)) from None
    print(f"gputop: wrote {written.path} ({written.bytes / 1e6:.1f} MB: {written.ticks} ticks, "
          f"{written.steps} steps)", file=sys.stderr)
    return EXIT_OK


def _retention(args: argparse.Namespace) -> Retention:
    from gputop.recording.writer_thread import Retention

    return Retention(max_bytes=args.max_size, keep_s=args.keep)


def _record(args: argparse.Namespace) -> int:
    """`gputop record`: headless, until Ctrl-C, SIGTERM or --duration."""
    if args.gpus is not None and args.demo is None:
        raise UsageError("--gpus sets the number of simulated GPUs and goes with --demo")
    from gputop.app.commands import (
        check_attach,
        check_in_scope,
        check_scenario,
        run_record,
        trainer_scope,
    )

    scope = trainer_scope(args.all_users)
    if args.demo is not None:
        check_scenario(args.demo)
    for pid in args.attach:
        check_attach(pid)
        check_in_scope(pid, scope)
    path = args.file or time.strftime("gputop-%Y%m%d-%H%M%S.sqlite")
    return run_record(path, interval_s=args.interval, attach_pids=args.attach,
                      membw=args.membw, retention=_retention(args), duration_s=args.duration,
                      demo=args.demo, gpus=args.gpus, scope=scope, mode=args.mode)


def export_parser() -> argparse.ArgumentParser:
    """`gputop export`'s options."""
    parser = _Parser(prog="gputop export",
                     description="turn a recording (from `gputop record` or --record) into "
                     "another format; no screen needed")
    parser.add_argument("file", metavar="FILE", help="a gputop.record/1 recording")
    parser.add_argument("--chrome-trace", required=True, metavar="OUT",
                        help="write the steps and phases as Chrome trace-event JSON (one "
                        "track per rank; open it in ui.perfetto.dev or chrome://tracing)")
    _add_mode(parser, "the trace")
    return parser


def _export(args: argparse.Namespace) -> int:
    """`gputop export FILE --chrome-trace OUT`: headless, one line on success or failure."""
    from gputop.export.chrome_trace import ExportError, write_chrome_trace
    from gputop.recording.reader import ReplayError

    try:
        steps, tracks = write_chrome_trace(args.file, args.chrome_trace, args.mode)
    except (ReplayError, ExportError) as exc:
        raise BadInput(str(exc)) from None
    print(f"gputop: wrote {steps} steps on {tracks} track{'s' * (tracks != 1)} to "
          f"{args.chrome_trace}", file=sys.stderr)
    return EXIT_OK


def _once(args: argparse.Namespace) -> int:
    from gputop.app.commands import build_sampler

    sampler = build_sampler(
        demo=args.demo, gpus=args.gpus, membw=args.membw, interval_s=args.interval,
        advice_after=1,
    )
    try:
        if args.attach is not None:
            sampler.attach(args.attach)
        sampler.prime()
        sampler.wait(args.interval)
        frame = sampler.sample()
    finally:
        sampler.close()
    if args.json:
        from gputop.export.snapshot import dumps

        sys.stdout.write(dumps(frame) + "\n")
    else:
        from gputop.export.text import ascii_text, render, write_text

        text = render(frame)
        write_text(ascii_text(text) if args.ascii else text, sys.stdout)
    return EXIT_OK


def _fleet(args: argparse.Namespace) -> int:
    """`--fleet URL [--once [--json]]`: the fleet as Prometheus has it, on a screen that
    refreshes at its scrape interval, or printed once."""
    if args.demo is not None or args.attach is not None:
        raise UsageError("--fleet reads the fleet from Prometheus; it takes no "
                         "--demo or --attach")
    _check_url(args.fleet)
    if not args.once:
        from gputop.app.commands import run_fleet

        try:
            return run_fleet(args.fleet, interval_s=args.interval, ascii=args.ascii,
                             timeout_s=args.fleet_timeout)
        except KeyboardInterrupt:
            return EXIT_OK
    from gputop.app.commands import fleet_frame_once

    frame = fleet_frame_once(args.fleet, args.interval, timeout_s=args.fleet_timeout)
    assert frame.fleet is not None
    from gputop.export import fleet
    from gputop.export.text import write_text

    if frame.fleet.error is not None:  # an answer refused as input is bad input
        print(f"gputop: {frame.fleet.error}", file=sys.stderr)
        return EXIT_USAGE if frame.fleet.answer_refused else EXIT_INTERNAL
    text = fleet.dumps(frame.fleet) + "\n" if args.json else fleet.render(frame.fleet)
    write_text(ascii_text_if(text, args.ascii), sys.stdout)
    return EXIT_OK


def _check_url(text: str) -> None:
    """Refuse a fleet URL that cannot name a Prometheus server, before any screen opens."""
    from urllib.parse import urlsplit

    try:
        url = urlsplit(text)
        port = url.port  # a port that is no number raises here
    except ValueError as exc:
        raise UsageError(f"--fleet wants an http(s):// URL, got {text!r}: {exc}") from None
    if url.scheme not in ("http", "https") or not url.hostname:
        raise UsageError(f"--fleet wants an http(s):// URL, got {text!r}")
    if port == 0 or any(ch.isspace() for ch in text):
        raise UsageError(f"--fleet wants an http(s):// URL, got {text!r}")
    if "@" in url.netloc:  # a password in argv is every user's to read in ps
        raise UsageError("--fleet takes no user:password@ in its URL")
    if url.query or url.fragment or text.endswith(("?", "#")):
        raise UsageError(f"--fleet takes a URL with no ?query or #fragment, got {text!r}")


def ascii_text_if(text: str, ascii: bool) -> str:
    """`text`, in ASCII when asked."""
    from gputop.export.text import ascii_text

    return ascii_text(text) if ascii else text


def _run(argv: list[str]) -> int:
    parser = _Parser(prog="gputop run", description="run CMD with the step probe, TUI attached")
    parser.add_argument("--interval", type=_interval, default=1.0, metavar="SECONDS")
    parser.add_argument("--membw", choices=("auto", "estimate", "off"), default="auto")
    parser.add_argument("--ascii", action="store_true", help="draw with ASCII characters only")
    parser.add_argument("--readonly", action="store_true", help=READONLY_HELP)
    parser.add_argument("--log", metavar="FILE",
                        help="where CMD's output goes while the TUI has the terminal "
                        "(default gputop-run-PID.log in the current directory)")
    _add_mode(parser, "the log")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="CMD")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise UsageError("run needs a command: gputop run -- python train.py")
    from gputop.app.commands import start_probed

    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return _run_without_terminal(command, args)
    log = args.log or f"gputop-run-{os.getpid()}.log"
    from gputop.app.children import RunCommand
    from gputop.app.commands import run_attached_child

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
        return EXIT_OK
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


def _say_final(final: Frame) -> None:
    """After the live view: the last summary and advice of the trainers it was attached to
    (--attach, or Enter on a process), as `gputop run` prints them; nothing without one."""
    from gputop.export.text import attach_summary, write_text

    if final.attached:
        with contextlib.suppress(OSError):
            write_text(attach_summary(final), sys.stderr)
            sys.stderr.flush()


def _serve(argv: list[str]) -> int:
    """`gputop serve`: a Prometheus exporter, headless (it never loads the terminal UI)."""
    from gputop.export.serve import DEFAULT_HOST, DEFAULT_PORT

    parser = _Parser(prog="gputop serve", description="Serve /metrics (Prometheus text and "
                     "OpenMetrics) from one sampler thread; every probed trainer of yours on "
                     "this host (root: --all-users for everyone's) is attached as it appears.")
    parser.add_argument("--listen", default=f"{DEFAULT_HOST}:{DEFAULT_PORT}",
                        metavar="HOST:PORT", help=f"address to serve on (default "
                        f"{DEFAULT_HOST}:{DEFAULT_PORT}, loopback only; 0.0.0.0:PORT for all "
                        "interfaces, port 0 for any free one)")
    parser.add_argument("--interval", type=_interval, default=1.0, metavar="SECONDS",
                        help="sampling period (default 1.0); a scrape never samples")
    parser.add_argument("--per-worker", action="store_true",
                        help="also one series per DataLoader worker process")
    parser.add_argument("--demo", nargs="?", const=DEFAULT_SCENARIO, metavar="SCENARIO",
                        help="simulated GPUs (labelled simulated in gputop_exporter_info) and "
                        "the demo trainer")
    parser.add_argument("--no-demo-trainer", action="store_true",
                        help="with --demo: simulated GPUs only, no demo trainer")
    parser.add_argument("--gpus", type=_gpu_count, default=None, metavar="N",
                        help="number of simulated GPUs with --demo (1..16)")
    parser.add_argument("--membw", choices=("auto", "estimate", "off"), default="auto",
                        help="host memory-bandwidth source (default auto)")
    parser.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this certificate "
                        "(PEM; with --tls-key)")
    parser.add_argument("--tls-key", metavar="FILE", help="the certificate's private key (PEM)")
    parser.add_argument("--tls-client-ca", metavar="FILE",
                        help="require client certificates signed by this CA (mutual TLS)")
    parser.add_argument("--basic-auth-file", metavar="FILE",
                        help="require HTTP basic auth: user:password lines, in a file only "
                        "its owner can read")
    parser.add_argument("--all-users", action="store_true", help=ALL_USERS_HELP)
    args = parser.parse_args(argv)
    if args.gpus is not None and args.demo is None:
        raise UsageError("--gpus sets the number of simulated GPUs and goes with --demo")
    if args.no_demo_trainer and args.demo is None:
        raise UsageError("--no-demo-trainer goes with --demo")
    from gputop.app.commands import check_scenario, run_serve, trainer_scope

    scope = trainer_scope(args.all_users)
    if args.demo is not None:
        check_scenario(args.demo)
    return run_serve(listen=args.listen, interval_s=args.interval, per_worker=args.per_worker,
                     demo=args.demo, gpus=args.gpus, membw=args.membw,
                     demo_trainer=not args.no_demo_trainer, tls=_tls(args),
                     users=_users(args.basic_auth_file), scope=scope)


def _users(path: str | None) -> dict[str, bytes] | None:
    """The basic-auth users, or None without --basic-auth-file."""
    if path is None:
        return None
    from gputop.export.http import AuthFileError, load_users

    try:
        return load_users(path)
    except AuthFileError as exc:
        raise UsageError(str(exc)) from None


def _tls(args: argparse.Namespace) -> Tls | None:
    """The TLS files, checked for presence; None for plain HTTP."""
    from gputop.export.http import Tls

    if args.tls_cert is None and args.tls_key is None:
        if args.tls_client_ca is not None:
            raise UsageError("--tls-client-ca goes with --tls-cert and --tls-key")
        return None
    if args.tls_cert is None or args.tls_key is None:
        raise UsageError("HTTPS needs both --tls-cert and --tls-key")
    for path in (args.tls_cert, args.tls_key, args.tls_client_ca):
        if path is not None and not os.path.isfile(path):
            raise UsageError(f"no such file: {path}")
    return Tls(args.tls_cert, args.tls_key, args.tls_client_ca)


def probe_path() -> str:
    """A directory that, on PYTHONPATH, makes `gputop.probe` (and only gputop) importable."""
    import gputop.probe

    return os.path.join(os.path.dirname(os.path.abspath(gputop.probe.__file__)), "_path")


def _probe_path(argv: list[str]) -> int:
    """`gputop probe-path`: print probe_path() for the user's own interpreter."""
    if argv in (["-h"], ["--help"]):
        print("usage: gputop probe-path\n\nPrints a directory to put on PYTHONPATH so that "
              "any Python can run\n`python -m gputop.probe train.py` or `from gputop import "
              "probe`, without\ninstalling gputop in that environment.")
        return EXIT_OK
    if argv:
        raise UsageError(f"probe-path takes no arguments, got {argv[0]!r}")
    print(probe_path())
    return EXIT_OK


def _run_without_terminal(command: list[str], args: argparse.Namespace) -> int:
    """No terminal for a TUI: CMD keeps our stdio, and its step summary is printed at the end."""
    from gputop.app.children import exit_status
    from gputop.app.commands import build_sampler, start_probed, watch_child
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
