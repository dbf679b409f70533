"""The command-line contract: exit codes, one-line errors, the snapshot/1 JSON keys."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import gputop

pytestmark = pytest.mark.slow  # every test runs the real `python -m gputop`
TOP_KEYS = {"schema", "time", "hostname", "gpu_source", "gpus", "host", "processes",
            "trainers", "memory_bandwidth", "attach", "advice"}
GPU_KEYS = {"index", "name", "uuid", "util_percent", "memory_used_bytes", "memory_total_bytes",
            "temperature_c", "power_w", "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s",
            "processes"}
HOST_KEYS = {"cpu_count", "cpu_percent", "memory_total_bytes", "memory_available_bytes",
             "swap_used_bytes"}
PROCESS_KEYS = {"pid", "ppid", "name", "username", "num_threads", "cpu_percent", "rss_bytes",
                "gpu_memory_bytes", "role", "trainer_pid", "has_probe"}
TRAINER_KEYS = {"pid", "worker_pids", "workers_cpu_percent", "num_threads_total",
                "pin_memory_thread"}
MEMBW_KEYS = {"source", "read_bytes_per_s", "write_bytes_per_s", "peak_bytes_per_s", "pressure",
              "psi_some_avg10", "swap_in_per_s", "major_faults_per_s"}


def test_once_json_without_a_driver_is_cpu_only_mode() -> None:
    out = gputop("--once", "--json", "--interval", "0.3", "--membw", "off")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc.keys() >= TOP_KEYS
    assert doc["schema"] == "gputop.snapshot/1"
    assert doc["gpu_source"] == "none" and doc["gpus"] == []
    assert doc["gpu_note"] and "\n" not in doc["gpu_note"]
    assert doc["host"].keys() >= HOST_KEYS
    me = [p for p in doc["processes"] if p["pid"] == os.getpid()]
    assert me and me[0].keys() >= PROCESS_KEYS
    assert doc["attach"] is None and doc["memory_bandwidth"] is None


def test_demo_once_json_shows_simulated_gpus() -> None:
    out = gputop("--demo", "compute-bound", "--gpus", "4", "--once", "--json",
                 "--interval", "0.3", "--membw", "off")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["gpu_source"] == "simulated" and doc["simulated"] is True
    assert len(doc["gpus"]) == 4
    for g in doc["gpus"]:
        assert g.keys() >= GPU_KEYS
        assert "Simulated" in g["name"]
        assert g["util_percent"] is not None and g["memory_total_bytes"] > 0


def test_membw_section_is_labelled_with_its_source() -> None:
    out = gputop("--once", "--json", "--interval", "0.3")
    assert out.returncode == 0, out.stderr
    m = json.loads(out.stdout)["memory_bandwidth"]
    assert m.keys() >= MEMBW_KEYS
    assert m["source"] in {"resctrl-mbm", "estimate", "none"} or m["source"].startswith("perf-")
    if m["source"] == "none":  # nothing here can measure it honestly: null, and why
        assert m["pressure"] is None and m["note"]


def test_once_text_is_readable() -> None:
    out = gputop("--demo", "data-starved", "--once", "--interval", "0.3", "--membw", "off")
    assert out.returncode == 0, out.stderr
    assert "SIMULATED GPUs — scenario data-starved — not real hardware" in out.stdout
    assert "PROCESSES" in out.stdout and "Simulated" in out.stdout


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (("--interval", "-1"), "interval"),
        (("--interval", "soon"), "not a number"),
        (("--json",), "--json goes with --once"),
        (("--frobnicate",), "unrecognized arguments"),
        (("--demo", "nonsense", "--once"), "unknown demo scenario"),
        (("--gpus", "3", "--once"), "--gpus"),
        (("--demo", "idle", "--gpus", "99", "--once"), "1..16"),
        (("--attach", "abc"), "not a process id"),
        (("--attach", "999999999", "--once"), "999999999"),
        (("run",), "run needs a command"),
        (("run", "--", "no-such-program-gputop"), "command not found"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: tuple[str, ...], expect: str) -> None:
    out = gputop(*args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert expect in lines[0] and "Traceback" not in out.stderr


def test_attach_to_a_process_without_probe_says_how_to_start_one() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        out = gputop("--attach", str(sleeper.pid), "--once")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert out.returncode == 2
    assert str(sleeper.pid) in out.stderr and "gputop run" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


RUN_SCRIPT = Path(__file__).parent / "probed_exit3.py"


def test_run_without_a_terminal_passes_exit_code_and_prints_steps() -> None:
    out = gputop("run", "--membw", "off", "--", sys.executable, str(RUN_SCRIPT), timeout=120)
    assert out.returncode == 3, out.stderr
    assert "hello from the command" in out.stdout  # the command keeps our stdout
    assert "exited with code 3" in out.stderr
    summary = next(line for line in out.stderr.splitlines() if line.startswith("ATTACHED"))
    steps = int(summary.split(" over the last ")[1].split()[0])
    assert steps >= 30 and "(exited, final summary)" in summary


def test_run_reports_a_signal_as_128_plus_n() -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "gputop", "run", "--membw", "off", "--", sys.executable,
         str(RUN_SCRIPT), "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "hello from the command"
    command_pid = _child_of(child.pid)
    os.kill(command_pid, signal.SIGTERM)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 128 + signal.SIGTERM, err
    assert f"exited with code {128 + signal.SIGTERM}" in err


def _child_of(pid: int) -> int:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def test_the_live_view_looks_at_the_processes_before_loading_the_rest_of_gputop() -> None:
    """The first look (the start of the first %CPU's interval) comes before the model, the
    sampler and the sources are imported, so the interval covers their import."""
    code = ("import sys\n"
            "from gputop.sources import first_sample\n"
            "real = first_sample.take\n"
            "def take(*args, **kwargs):\n"
            "    print(sorted(m for m in sys.modules if m.startswith('gputop')))\n"
            "    return real(*args, **kwargs)\n"
            "first_sample.take = take\n"
            "from gputop.app import cli, live, options\n"
            "options.need_terminal = lambda *words: None\n"  # no terminal here
            "live.run_live = lambda **kw: print(len(kw['first_sample'].stats) > 1) or 0\n"
            "cli.main([])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    command_modules = [f"gputop.app.{name}" for name in ("export", "fleet", "live", "options",
                                                  "probe_path", "record", "replay", "report",
                                                  "run", "serve")]
    assert out.stdout.splitlines() == [
        str(["gputop", "gputop.app", "gputop.app.cli", *command_modules, "gputop.sources",
             "gputop.sources.first_sample"]), "True"]
