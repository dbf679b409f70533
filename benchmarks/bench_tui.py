"""TUI cost beside btop and htop: one run, ~600 and ~3000 processes, 80x24 and 200x50, 1 s refresh.

Every tool runs at once, each in its own tmux session of the same size, so load from
elsewhere hits them alike (the machine is shared), and the window is cut into rounds: each
round's CPU (the run time of each of the tool's threads, /proc/PID/task/*/schedstat, in
ns: utime+stime's 10 ms ticks are too coarse for a few ms a second) gives each tool's
ratio to btop for that round, and the report gives the medians of the rounds. Tools:

- gputop: the live TUI on this machine's sources (no GPU here);
- gputop+8gpu: `--demo mixed --gpus 8`, eight simulated GPUs and the demo trainer attached
  (its probe's ring read every tick, its workers' waits);
- gputop-ui: the same app fed frames recorded beforehand (what drawing alone costs);
- textual-floor: a bare Textual app (benchmarks/textual_floor.py) that repaints as many
  lines a second as gputop-ui marked for repaint, ten styled spans a line: what Textual
  alone costs for that drawing (gputop-ui over it: how far drawing is from its floor);
- ansi-floor: the same lines written with no framework (benchmarks/ansi_floor.py: f-strings
  and one os.write a second): what Python itself costs for them;
- btop (1000 ms update) and htop (`-d 10`).

Peak RSS (VmHWM) of each at the end of each window. Then, at ~600 processes and 80x24:
`gputop --interval 0.1`, its CPU, and how many ticks pass between a key and the screen
answering it (counted by the app's own Sampler.sample calls, never wall-clock); and the
first useful frame (process rows sorted by CPU on the screen), median of 9 warm starts,
taken in turns with htop's.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SIZES = ((80, 24), (200, 50))
PROCESSES = (600, 3000)
ROUNDS, WINDOW_S = 4, 5.0
# What a monitor left open all day costs shows only after a minute: gputop looks at a process
# quiet for 64 ticks every 4th tick. --quick: 8 s (gputop-ui records 4 s of frames first).
WARMUP_S, QUICK_WARMUP_S = 70.0, 8.0
FIRST_RUNS = 9
KEY_PRESSES = 10
ROW = re.compile(r"^\s*\d+\s")  # a process row: the PID first


def gputop_command() -> list[str]:
    """`python -m gputop` from the project's venv (the interpreter running this, without one)."""
    python = str(REPO / ".venv" / "bin" / "python")
    return [python if Path(python).exists() else sys.executable, "-m", "gputop"]


class ReplaySampler:
    """Replays frames recorded beforehand at 1 Hz: isolates what drawing costs. Each tick
    it writes to `lines_file` how many lines the panes have marked for repaint so far."""

    def __init__(self, frames: list, lines_file: Path, repainted: list[int]) -> None:
        import threading

        self.frames = frames
        self.paused = False
        self._stop = threading.Event()
        self._lines_file = lines_file
        self._repainted = repainted

    def start(self, on_frame, *, on_prime=None) -> None:
        import threading

        def run() -> None:
            tick = 0
            while not self._stop.wait(1.0 if tick else 0.05):
                on_frame(self.frames[tick % len(self.frames)])
                tick += 1
                with suppress(OSError):
                    self._lines_file.write_text(str(self._repainted[0]))

        threading.Thread(target=run, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def set_paused(self, paused: bool) -> None:
        self.paused = paused

    def add_deferred_sources(self) -> None:
        pass

    def attach(self, pid: int) -> None:
        raise ValueError("replay")

    def detach(self, pid: int) -> None:
        pass


def serve_replay(lines_file: Path) -> int:
    """Run the real app on frames recorded from this machine first (drawing cost only),
    counting the lines its panes mark for repaint into `lines_file`."""
    from textual.geometry import Region
    from textual.widget import Widget

    from gputop.app.wiring import build_sampler
    from gputop.tui import paint, run_tui
    from gputop.tui.widgets.linepane import LinePane

    repainted = [0]
    repaint, relayout = paint.repaint, paint.relayout

    def counted(widget: Widget, regions: Sequence[Region]) -> None:  # a region a line
        repainted[0] += len(regions)
        repaint(widget, regions)

    def counted_whole(widget: Widget) -> None:  # a new height: the whole pane again
        repainted[0] += len(widget.lines) if isinstance(widget, LinePane) else widget.size.height
        relayout(widget)

    paint.repaint, paint.relayout = counted, counted_whole

    sampler = build_sampler(demo=None)
    sampler.prime()
    frames = []
    for _ in range(8):
        time.sleep(0.5)
        frames.append(sampler.sample())
    sampler.close()
    return run_tui(ReplaySampler(frames, lines_file, repainted))


def spawn_sleepers(count: int) -> list[subprocess.Popen[bytes]]:
    """`count` idle processes, so every tool has a realistic table to keep up to date."""
    return [subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL) for _ in range(count)]


def process_count() -> int:
    return sum(1 for name in os.listdir("/proc") if name.isdigit())


def settled_count(polls: int = 20, gap_s: float = 0.25) -> int:
    """The process count once two looks agree: processes killed just before (another run's
    sleepers) still hold their /proc entries until they are reaped."""
    last = process_count()
    for _ in range(polls):
        time.sleep(gap_s)
        now = process_count()
        if now == last:
            break
        last = now
    return last


def reach(target: int, sleepers: list[subprocess.Popen[bytes]]) -> None:
    """Start or end our sleepers until the machine holds about `target` processes."""
    have = settled_count()
    if have < target:
        sleepers += spawn_sleepers(target - have)
        return
    surplus = min(len(sleepers), have - target)
    for proc in sleepers[len(sleepers) - surplus:]:
        proc.kill()
        proc.wait(timeout=30)
    del sleepers[len(sleepers) - surplus:]


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True,
                          timeout=30).stdout


def start(name: str, command: list[str], size: tuple[int, int], env: dict[str, str]) -> int:
    """Run `command` in a new tmux session; return the tool's own PID (not the shell's)."""
    exports = shlex.join(f"{k}={v}" for k, v in env.items())
    line = f"exec env {exports} {shlex.join(command)}"
    tmux("new-session", "-d", "-s", name, "-x", str(size[0]), "-y", str(size[1]),
         "-c", str(REPO), line)
    return int(tmux("display-message", "-p", "-t", name, "#{pane_pid}").strip())


def stop(name: str, pid: int) -> None:
    """SIGTERM the tool (gputop stops its demo trainer on the way out), then the session."""
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True, timeout=30)


def cpu_ns(pid: int) -> int:
    """CPU time of every thread of `pid` now, in ns (a thread that ends meanwhile is left out:
    the tools measured keep theirs)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with suppress(OSError):
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
    return total


def status_kib(pid: int, key: str) -> int:
    """One kB field of /proc/PID/status (VmRSS, VmHWM, ...); 0 when absent."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    return 0


def peak_rss_kib(pid: int) -> int:
    return status_kib(pid, "VmHWM")


@contextmanager
def btop_home() -> Iterator[str]:
    """A config dir whose btop.conf sets a 1000 ms update, like the others."""
    home = tempfile.mkdtemp(prefix="bench-btop-")
    (Path(home) / "btop").mkdir()
    conf = "update_ms = 1000\nshown_boxes = \"cpu mem net proc\"\n"
    (Path(home) / "btop" / "btop.conf").write_text(conf)
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def tools(lines_file: Path, reference: str | None = None,
          python: str | None = None) -> dict[str, list[str]]:
    """Each tool's command line (btop and htop where installed; `reference`: gputop from
    another checkout, e.g. the code before a change, beside it in the same run; `python`:
    gputop and gputop+8gpu run by that interpreter too, as gputop@py and gputop+8gpu@py).
    gputop-ui counts its repainted lines into `lines_file`, which the floors follow."""
    python = gputop_command()[0]
    found = {"gputop": gputop_command(),
             "gputop+8gpu": [*gputop_command(), "--demo", "mixed", "--gpus", "8"],
             "gputop-ui": [python, str(Path(__file__).resolve()), "--serve-replay",
                           str(lines_file)],
             "textual-floor": [python, str(Path(__file__).resolve().parent / "textual_floor.py"),
                               "--follow", str(lines_file)],
             "ansi-floor": [python, str(Path(__file__).resolve().parent / "ansi_floor.py"),
                            "--follow", str(lines_file)]}
    if reference:
        found["gputop-ref"] = reference_command(reference)
    if python:
        found["gputop@py"] = [python, "-m", "gputop"]
        found["gputop+8gpu@py"] = [python, "-m", "gputop", "--demo", "mixed", "--gpus", "8"]
    if shutil.which("btop"):
        found["btop"] = ["btop", "--utf-force"]
    if shutil.which("htop"):
        found["htop"] = ["htop", "-d", "10"]
    return found


def interpreter(python: str) -> str:
    """`python`'s version and when it was built, in one line (which of two builds ran what)."""
    code = ("import platform, sys; print(platform.python_version(), "
            "platform.python_build()[1], sys.executable)")
    found = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    return found.stdout.strip() or f"{python}: {found.stderr.strip().splitlines()[-1:]}"


def reference_command(reference: str) -> list[str]:
    """gputop from the checkout `reference` (-m imports from the current directory)."""
    return ["env", "-C", reference, f"PYTHONPATH={reference}", *gputop_command()]


def tool_env(home: str) -> dict[str, str]:
    return {"TERM": "xterm-256color", "PYTHONPATH": str(REPO), "XDG_CONFIG_HOME": home}


@dataclass(frozen=True)
class Window:
    """Each tool's CPU ms per second in each round, and its peak RSS at the end."""

    cpu: dict[str, list[float]]
    rss_kib: dict[str, int]
    processes: tuple[int, int]  # the fewest and the most on the machine, over the rounds

    def median(self, tool: str) -> float:
        return statistics.median(self.cpu[tool])

    def ratio(self, tool: str, to: str) -> float:
        """The median over rounds of `tool`'s CPU over `to`'s in the same round."""
        pairs = [a / b for a, b in zip(self.cpu[tool], self.cpu[to], strict=True) if b > 0]
        return statistics.median(pairs) if pairs else float("nan")


def measure(commands: dict[str, list[str]], size: tuple[int, int], rounds: int,
            window_s: float, warmup_s: float) -> Window:
    """Start every tool at once, warm up, then `rounds` windows of `window_s`."""
    cpu: dict[str, list[float]] = {tool: [] for tool in commands}
    counts = []
    with btop_home() as home:
        sessions = {tool: f"bench-{tool.replace('+', '-')}-{uuid.uuid4().hex[:6]}"
                    for tool in commands}
        pids: dict[str, int] = {}
        try:
            for tool, command in commands.items():
                pids[tool] = start(sessions[tool], command, size, tool_env(home))
            time.sleep(warmup_s)
            for _ in range(rounds):
                counts.append(process_count())
                before = {tool: cpu_ns(pid) for tool, pid in pids.items()}
                t0 = time.monotonic()
                time.sleep(window_s)
                elapsed = time.monotonic() - t0
                for tool, pid in pids.items():
                    cpu[tool].append((cpu_ns(pid) - before[tool]) / 1e6 / elapsed)
            counts.append(process_count())
            rss = {tool: peak_rss_kib(pid) for tool, pid in pids.items()}
        finally:
            for tool, name in sessions.items():
                stop(name, pids.get(tool, 0))
    return Window(cpu, rss, (min(counts), max(counts)))


def print_window(size: tuple[int, int], window: Window) -> None:
    """One table: CPU, ratios to btop and htop, peak RSS."""
    rounds = len(next(iter(window.cpu.values())))
    fewest, most = window.processes
    print(f"\n{fewest}-{most} processes, {size[0]}x{size[1]}, 1 s refresh, median of {rounds} "
          f"rounds (ratios: median of the per-round ratios)")
    references = [tool for tool in ("btop", "htop", "gputop-ref") if tool in window.cpu]
    print(f"  {'tool':12s} {'CPU ms/s':>8} "
          + "".join(f"{'x ' + tool.removeprefix('gputop-'):>7} " for tool in references)
          + f"{'peak RSS':>9}")
    for tool in window.cpu:
        ratios = "".join(f"{window.ratio(tool, to):7.2f} " for to in references)
        print(f"  {tool:12s} {window.median(tool):8.1f} {ratios}"
              f"{window.rss_kib[tool] / 1024:6.1f} MiB", flush=True)


# ---- --interval 0.1: CPU and keys answered within a tick -------------------------------------

def counted_command(stats: Path, *gputop_args: str) -> list[str]:
    """gputop run through soak.py's serve mode, which writes its Sampler.sample count."""
    return [gputop_command()[0], str(Path(__file__).resolve().parent / "soak.py"),
            "--serve", str(stats), *gputop_args]


def samples_done(stats: Path) -> int:
    """How many ticks the served gputop has sampled (soak.STATS' first field)."""
    from soak import STATS

    data = stats.read_bytes()
    return STATS.unpack(data)[0] if len(data) == STATS.size else 0


def wait_screen(name: str, ok: Callable[[str], bool], timeout_s: float = 30.0) -> str:
    """Poll the pane as fast as tmux answers until `ok` accepts it."""
    deadline = time.monotonic() + timeout_s
    screen = ""
    while time.monotonic() < deadline:
        screen = tmux("capture-pane", "-p", "-t", name)
        if ok(screen):
            return screen
    raise RuntimeError(f"the screen never changed as expected:\n{screen}")


def shows(text: str) -> Callable[[str], bool]:
    """A screen test: `text` is on it."""
    return lambda screen: text in screen


def ticks_to_answer(name: str, stats: Path, presses: int) -> list[int]:
    """Press sort keys in turn (PID, then %CPU); for each, the ticks sampled between the
    key and the screen showing the new sort."""
    answered = []
    for i in range(presses):
        key, mark = ("n", "PID▲") if i % 2 == 0 else ("c", "%CPU▼")
        before = samples_done(stats)
        tmux("send-keys", "-t", name, key)
        wait_screen(name, shows(mark))
        answered.append(samples_done(stats) - before)
    return answered


def fast_refresh(size: tuple[int, int], window_s: float, rounds: int,
                 presses: int) -> tuple[list[float], list[int], int]:
    """gputop --interval 0.1: CPU ms/s per round, ticks to answer each key, peak RSS."""
    with tempfile.TemporaryDirectory(prefix="bench-fast-") as tmp, btop_home() as home:
        stats = Path(tmp) / "stats"
        stats.write_bytes(b"")
        name = f"bench-fast-{uuid.uuid4().hex[:6]}"
        pid = start(name, counted_command(stats, "--interval", "0.1"), size, tool_env(home))
        try:
            wait_screen(name, lambda screen: "%CPU▼" in screen)
            time.sleep(2)
            cpu = []
            for _ in range(rounds):
                before, t0 = cpu_ns(pid), time.monotonic()
                time.sleep(window_s)
                cpu.append((cpu_ns(pid) - before) / 1e6 / (time.monotonic() - t0))
            answered = ticks_to_answer(name, stats, presses)
            return cpu, answered, peak_rss_kib(pid)
        finally:
            stop(name, pid)


# ---- first useful frame ----------------------------------------------------------------------

def rows_shown(screen: str, header: str) -> bool:
    """A process table header (the CPU column `header`) with a process row beneath it."""
    lines = screen.splitlines()
    for i, line in enumerate(lines):
        if header in line and ("COMMAND" in line or "Command" in line):
            return any(ROW.match(below) for below in lines[i + 1:])
    return False


def first_rows_s(command: list[str], header: str,
                 size: tuple[int, int] = (120, 40)) -> tuple[float, float]:
    """Seconds from launch until process rows, sorted by CPU, are on the screen, and the CPU
    ms the tool spent until then (which a loaded box stretches less than the seconds)."""
    name = f"bench-first-{uuid.uuid4().hex[:6]}"
    with btop_home() as home:
        t0 = time.monotonic()
        pid = start(name, command, size, tool_env(home))
        try:
            wait_screen(name, lambda screen: rows_shown(screen, header))
            return time.monotonic() - t0, cpu_ns(pid) / 1e6
        finally:
            stop(name, pid)


def compile_bytecode(checkout: Path) -> None:
    """Write gputop's bytecode, as installing it does: under PYTHONDONTWRITEBYTECODE (set on
    some machines, this one included) every start would compile every module, 50 ms of CPU."""
    subprocess.run([gputop_command()[0], "-m", "compileall", "-q", str(checkout / "gputop")],
                   check=True, capture_output=True, timeout=300)


def first_frames(runs: int, reference: str | None = None) -> dict[str, list[tuple[float, float]]]:
    """gputop's and htop's first useful frame, warm (one start each first), in turns (and
    gputop-ref's: the `reference` checkout's, e.g. the code before a change): seconds and
    CPU ms of each start."""
    commands = {"gputop": (gputop_command(), "%CPU")}
    if reference:
        commands["gputop-ref"] = (reference_command(reference), "%CPU")
    if shutil.which("htop"):
        commands["htop"] = (["htop", "-d", "10"], "CPU%")
    for checkout in (REPO, *([Path(reference)] if reference else [])):
        compile_bytecode(checkout)
    for command, header in commands.values():
        first_rows_s(command, header)  # warm: imports and binaries in the page cache
    times: dict[str, list[tuple[float, float]]] = {tool: [] for tool in commands}
    for _ in range(runs):
        for tool, (command, header) in commands.items():
            times[tool].append(first_rows_s(command, header))
    return times


def report_first_frames(times: dict[str, list[tuple[float, float]]]) -> None:
    """Medians and ranges of the seconds and CPU ms to the first useful frame, per tool."""
    def spread(values: list[float], unit: str, digits: int) -> str:
        return (f"{statistics.median(values):.{digits}f} {unit} "
                f"({min(values):.{digits}f}-{max(values):.{digits}f})")

    runs = len(next(iter(times.values())))
    print(f"\nfirst useful frame (process rows sorted by CPU on screen, via tmux), warm, at "
          f"{process_count()} processes, median (range) of {runs} in turns; then the CPU it "
          f"took:")
    for tool, pairs in times.items():
        print(f"  {tool:12s} {spread([s for s, _ in pairs], 's', 2)}, "
              f"CPU {spread([c for _, c in pairs], 'ms', 0)}")


def main() -> int:
    """Print each tool's cost at each size and count, ratios, RSS, --interval 0.1, first frame."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="2 rounds of 3 s, 3 first-frame starts (a rough look)")
    parser.add_argument("--processes", default=",".join(map(str, PROCESSES)),
                        help="process counts to reach, comma-separated")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--window", type=float, help="seconds per round")
    parser.add_argument("--reference", metavar="CHECKOUT",
                        help="also run gputop from this checkout (gputop-ref), e.g. main's")
    parser.add_argument("--python", metavar="INTERPRETER",
                        help="also run gputop and gputop+8gpu by this interpreter (gputop@py, "
                             "e.g. another venv's python), the code being this checkout's")
    parser.add_argument("--warmup", type=float,
                        help=f"seconds every tool runs before the rounds (default {WARMUP_S:g}, "
                             f"--quick {QUICK_WARMUP_S:g})")
    parser.add_argument("--cpu-only", action="store_true",
                        help="the side-by-side CPU windows only (no --interval 0.1, first frame)")
    parser.add_argument("--first-only", action="store_true",
                        help="the first useful frame only (with --reference: beside it)")
    parser.add_argument("--serve-replay", type=Path, metavar="LINES_FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_replay:
        return serve_replay(args.serve_replay)
    if shutil.which("tmux") is None:
        print("bench_tui: tmux is required", file=sys.stderr)
        return 2
    rounds = args.rounds or (2 if args.quick else ROUNDS)
    window_s = args.window or (3.0 if args.quick else WINDOW_S)
    warmup_s = args.warmup if args.warmup is not None else (
        QUICK_WARMUP_S if args.quick else WARMUP_S)
    counts = [int(n) for n in args.processes.split(",")]
    lines_file = Path(tempfile.mkdtemp(prefix="bench-tui-")) / "gputop-ui.lines"
    commands = tools(lines_file, args.reference, args.python)
    print(f"{os.cpu_count()} cores (shared: compare the ratios); tools: {', '.join(commands)}; "
          f"{warmup_s:g} s warm-up, then {rounds} rounds of {window_s:g} s")
    print(f"gputop's interpreter: {interpreter(gputop_command()[0])}"
          + (f"; gputop@py's: {interpreter(args.python)}" if args.python else ""))
    sleepers: list[subprocess.Popen[bytes]] = []
    try:
        summary: list[str] = []
        for count in [] if args.first_only else counts:
            for size in SIZES:
                reach(count, sleepers)
                lines_file.unlink(missing_ok=True)  # each window's gputop-ui counts from 0
                window = measure(commands, size, rounds, window_s, warmup_s)
                print_window(size, window)
                if "btop" in window.cpu:
                    summary.append(f"{count}/{size[0]}x{size[1]}: gputop "
                                   f"x{window.ratio('gputop', 'btop'):.2f}, +8gpu "
                                   f"x{window.ratio('gputop+8gpu', 'btop'):.2f}"
                                   + (f" (@py x{window.ratio('gputop@py', 'btop'):.2f}, +8gpu "
                                      f"x{window.ratio('gputop+8gpu@py', 'btop'):.2f})"
                                      if "gputop@py" in window.cpu else "")
                                   + "; drawing "
                                   f"x{window.ratio('gputop-ui', 'textual-floor'):.2f} "
                                   f"Textual's floor, "
                                   f"x{window.ratio('gputop-ui', 'ansi-floor'):.2f} a bare "
                                   f"writer's")
        if summary:
            print("\nvs btop (target <= 0.5), and gputop-ui vs the floors: "
                  + "; ".join(summary))
        if args.cpu_only:
            return 0
        reach(counts[0], sleepers)
        if not args.first_only:
            report_fast_refresh(window_s, rounds, 4 if args.quick else KEY_PRESSES)
        report_first_frames(first_frames(3 if args.quick else FIRST_RUNS, args.reference))
    finally:
        for proc in sleepers:
            proc.kill()
        for proc in sleepers:
            proc.wait(timeout=30)
        shutil.rmtree(lines_file.parent, ignore_errors=True)
    return 0


def report_fast_refresh(window_s: float, rounds: int, presses: int) -> None:
    """Print `--interval 0.1`'s CPU, peak RSS and ticks from a key to its answer."""
    cpu, answered, rss = fast_refresh(SIZES[0], window_s, rounds, presses)
    print(f"\n--interval 0.1 at {process_count()} processes, {SIZES[0][0]}x{SIZES[0][1]}: "
          f"{statistics.median(cpu):.1f} ms CPU per second (median of {len(cpu)} rounds), "
          f"peak RSS {rss / 1024:.1f} MiB; ticks from a key to its answer on screen: "
          f"{answered} (max {max(answered)}: "
          f"{'within one tick' if max(answered) <= 1 else 'NOT within one tick'})")


if __name__ == "__main__":
    raise SystemExit(main())
