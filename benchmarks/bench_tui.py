"""TUI cost beside htop and btop: same machine, same moment, ~600 more processes, 1 s refresh.

Each tool runs in its own tmux session of the same size, all at once, so load from
elsewhere hits them alike. utime+stime and VmHWM come from /proc for each tool's
process over the same window: CPU ms per refresh, peak RSS, gputop's ratio to each.
"gputop-ui" is the same app fed frames recorded beforehand (the drawing share alone).
Also gputop's startup: launch -> UI drawn, and launch -> first frame with process rows.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
SIZES = ((80, 24), (200, 50))


def gputop_command() -> list[str]:
    """`python -m gputop` from the project's venv (the interpreter running this, without one)."""
    python = str(REPO / ".venv" / "bin" / "python")
    return [python if Path(python).exists() else sys.executable, "-m", "gputop"]


class ReplaySampler:
    """Replays frames recorded beforehand at 1 Hz: isolates what drawing costs."""

    def __init__(self, frames: list) -> None:
        import threading

        self.frames = frames
        self.paused = False
        self._stop = threading.Event()

    def start(self, on_frame, *, on_prime=None) -> None:
        import threading

        def run() -> None:
            tick = 0
            while not self._stop.wait(1.0 if tick else 0.05):
                on_frame(self.frames[tick % len(self.frames)])
                tick += 1

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


def serve_replay() -> int:
    """Run the real app on frames recorded from this machine first (drawing cost only)."""
    from gputop.tui import run_tui
    from gputop.wiring import build_sampler

    sampler = build_sampler(demo=None)
    sampler.prime()
    frames = []
    for _ in range(8):
        time.sleep(0.5)
        frames.append(sampler.sample())
    sampler.close()
    return run_tui(ReplaySampler(frames))


def spawn_sleepers(count: int) -> list[subprocess.Popen[bytes]]:
    """`count` idle processes, so every tool has a realistic table to keep up to date."""
    return [subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL) for _ in range(count)]


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def start(name: str, command: list[str], size: tuple[int, int], env: dict[str, str]) -> int:
    """Run `command` in a new tmux session; return the tool's own PID (not the shell's)."""
    exports = shlex.join(f"{k}={v}" for k, v in env.items())
    line = f"exec env {exports} {shlex.join(command)}"
    tmux("new-session", "-d", "-s", name, "-x", str(size[0]), "-y", str(size[1]),
         "-c", str(REPO), line)
    return int(tmux("display-message", "-p", "-t", name, "#{pane_pid}").strip())


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def status_kib(pid: int, key: str) -> int:
    """One kB field of /proc/PID/status (VmRSS, VmHWM, ...); 0 when absent."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    return 0


def peak_rss_kib(pid: int) -> int:
    return status_kib(pid, "VmHWM")


def btop_config() -> str:
    """A config dir whose btop.conf sets a 1000 ms update, like the others."""
    home = tempfile.mkdtemp(prefix="bench-btop-")
    (Path(home) / "btop").mkdir()
    conf = "update_ms = 1000\nshown_boxes = \"cpu mem net proc\"\n"
    (Path(home) / "btop" / "btop.conf").write_text(conf)
    return home


def measure(size: tuple[int, int], seconds: float, warmup: float) -> dict[str, tuple[float, int]]:
    """CPU ms per 1 s refresh and peak RSS (KiB) of each tool over the same window."""
    python = gputop_command()[0]
    tools: dict[str, list[str]] = {"gputop": gputop_command(),
                                   "gputop-ui": [python, str(Path(__file__).resolve()),
                                                 "--serve-replay"]}
    if shutil.which("htop"):
        tools["htop"] = ["htop", "-d", "10"]
    if shutil.which("btop"):
        tools["btop"] = ["btop", "--utf-force"]
    conf = btop_config()
    env = {"TERM": "xterm-256color", "PYTHONPATH": str(REPO), "XDG_CONFIG_HOME": conf}
    sessions = {tool: f"bench-{tool}-{uuid.uuid4().hex[:6]}" for tool in tools}
    try:
        pids = {tool: start(sessions[tool], cmd, size, env) for tool, cmd in tools.items()}
        time.sleep(warmup + 4)  # the replay variant records 4 s of frames first
        before = {tool: cpu_ticks(pid) for tool, pid in pids.items()}
        t0 = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - t0
        after = {tool: cpu_ticks(pid) for tool, pid in pids.items()}
        rss = {tool: peak_rss_kib(pid) for tool, pid in pids.items()}
        return {tool: ((after[tool] - before[tool]) / CLK_TCK * 1000 / elapsed, rss[tool])
                for tool in tools}
    finally:
        for session in sessions.values():
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        shutil.rmtree(conf, ignore_errors=True)


def first_frame_s(size: tuple[int, int] = (120, 40)) -> tuple[float, float]:
    """Seconds from launch until the UI is up, and until process rows are on the screen."""
    name = f"bench-first-{uuid.uuid4().hex[:6]}"
    t0 = time.monotonic()
    start(name, gputop_command(), size, {"TERM": "xterm-256color", "PYTHONPATH": str(REPO)})
    ui = float("nan")
    try:
        while time.monotonic() - t0 < 30:
            screen = tmux("capture-pane", "-p", "-t", name)
            if ui != ui and "gputop" in screen:
                ui = time.monotonic() - t0
            if "%CPU" in screen and "COMMAND" in screen and "waiting" not in screen:
                return (ui if ui == ui else time.monotonic() - t0), time.monotonic() - t0
            time.sleep(0.005)
        return ui, float("nan")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)


def main() -> int:
    """Print each tool's cost at both sizes and gputop's ratios."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=4.0)
    parser.add_argument("--processes", type=int, default=600)
    parser.add_argument("--serve-replay", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_replay:
        return serve_replay()
    if shutil.which("tmux") is None:
        print("bench_tui: tmux is required", file=sys.stderr)
        return 2
    sleepers = spawn_sleepers(args.processes)
    try:
        print(f"{len(os.listdir('/proc'))} /proc entries, {args.seconds:.0f} s windows, "
              f"1 s refresh, {os.cpu_count()} cores")
        runs = [first_frame_s() for _ in range(3)]
        ui = sorted(r[0] for r in runs)[1]
        rows = sorted(r[1] for r in runs)[1]
        print(f"gputop startup (median of 3, via tmux): UI drawn {ui:.2f} s, "
              f"first frame with process rows {rows:.2f} s")
        for size in SIZES:
            result = measure(size, args.seconds, args.warmup)
            print(f"\n{size[0]}x{size[1]}:")
            for tool, (ms, rss) in result.items():
                print(f"  {tool:9s} {ms:6.1f} ms CPU per refresh   peak RSS {rss / 1024:6.1f} MiB")
            for ours in ("gputop", "gputop-ui"):
                for tool in ("htop", "btop"):
                    if tool in result and result[tool][0] > 0:
                        print(f"  {ours} / {tool}: {result[ours][0] / result[tool][0]:.2f}")
    finally:
        for proc in sleepers:
            proc.kill()
        for proc in sleepers:
            proc.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
