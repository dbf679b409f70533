"""MIG through the real nvidia-ml-py over the C NVML (tests/nvml_c): a GPU in MIG mode shows its
instances with the processes on each, and a trainer's GPU is its instance.

Each test plays a scenario in a child (gputop's NVML source, `gputop --once`, or the screen in
tmux) whose libnvidia-ml.so.1 is the C library, and real processes stand as the GPU's.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import tmux
from tests.nvml_c import build
from tests.nvml_c.build import MIB, FakeNvml, Run

fake_nvml = build.fake_nvml  # the session's C NVML, as a fixture of this module

pytestmark = pytest.mark.slow

GIB = 1 << 30
NOT_SUPPORTED, NO_PERMISSION = 3, 4
# Utilization is refused in MIG mode, so the tick moves on a call gputop keeps making.
TICK_ON = "nvmlDeviceGetTemperature"
BIG, SMALL = "3g.40gb", "1g.10gb"
BIG_LABEL, SMALL_LABEL = f"GPU 0 MIG {BIG} gi 1 ci 0", f"GPU 0 MIG {SMALL} gi 2 ci 0"


def mig_gpu(on_big: list[int], on_small: Sequence[int] = (), **device: Any) -> dict[str, Any]:
    """An A100 in MIG mode: a 3g.40gb instance (gi 1), no MIG device at index 1, and a 1g.10gb
    instance (gi 2); each with 1 GiB held by each PID on it."""
    return {
        "name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-a100",
        "mig": [
            {"gi": 1, "ci": 0, "profile": BIG, "uuid": "MIG-big", "memory_total": 40 * GIB,
             "memory_used": len(on_big) * GIB,
             "processes": [{"pid": pid, "memory": GIB} for pid in on_big]},
            None,
            {"gi": 2, "ci": 0, "profile": SMALL, "memory_total": 10 * GIB,
             "memory_used": len(on_small) * GIB,
             "processes": [{"pid": pid, "memory": GIB} for pid in on_small]},
        ],
        **device,
    }


def scenario(*devices: dict[str, Any]) -> dict[str, Any]:
    return {"tick_on": TICK_ON, "devices": list(devices)}


@pytest.fixture
def holders() -> Iterator[list[int]]:
    """Two real Python processes to stand as compute processes (gputop's trainers: Python
    processes NVML lists), ended after the test."""
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
             for _ in range(2)]
    yield [p.pid for p in procs]
    for p in procs:
        p.kill()
        p.wait()


def gpus(run: Run, tick: int = -1) -> list[dict[str, Any]]:
    report = run.out["reports"][tick]
    assert report["source"] == "nvml", report["note"]
    return list(report["gpus"])


def on_instances(gpu: dict[str, Any]) -> list[tuple[int, int | None, int | None]]:
    """(pid, GPU instance, compute instance) of each process on the GPU."""
    return [(p["pid"], p["gpu_instance_id"], p["compute_instance_id"]) for p in gpu["processes"]]


# ------------------------------------------------------------------ the source


def test_mig_instances_memory_util_and_processes_through_the_real_binding(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    plain = {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-off", "mig_mode": 0, "util": 40,
             "processes": [{"pid": 4300, "memory": 100 * MIB}]}
    consumer = {"name": "NVIDIA GeForce RTX 4090", "uuid": "GPU-rtx", "util": 12}
    run = fake_nvml.sample(scenario(mig_gpu([4242], [4243, 4244]), plain, consumer), tmp_path,
                           ticks=3)
    mig, off, rtx = gpus(run)
    assert mig["mig_enabled"] is True
    assert [(m["gpu_instance_id"], m["compute_instance_id"], m["profile"], m["uuid"],
             m["memory_used_bytes"], m["memory_total_bytes"]) for m in mig["mig_instances"]] == [
        (1, 0, BIG, "MIG-big", GIB, 40 * GIB), (2, 0, SMALL, mig["mig_instances"][1]["uuid"],
                                                 2 * GIB, 10 * GIB)]
    assert mig["mig_instances"][1]["uuid"].startswith("MIG-")
    # The driver gives no utilization per instance, nor for the GPU in MIG mode: n/a, never 0.
    assert [m["util_percent"] for m in mig["mig_instances"]] == [None, None]
    assert mig["util_percent"] is None
    assert on_instances(mig) == [(4242, 1, 0), (4243, 2, 0), (4244, 2, 0)]
    assert [p["memory_used_bytes"] for p in mig["processes"]] == [GIB] * 3
    # MIG mode off, and a GPU without MIG: no instances, the whole GPU's util and processes.
    assert (off["mig_enabled"], off["mig_instances"], off["util_percent"]) == (False, [], 40.0)
    assert on_instances(off) == [(4300, None, None)]
    assert (rtx["mig_enabled"], rtx["mig_instances"], rtx["util_percent"]) == (None, [], 12.0)
    # Refused per instance once, then not asked again; the instances are listed once, the
    # empty index skipped.
    assert run.log.count("nvmlDeviceGetUtilizationRates", 0) == 2
    assert run.log.count("nvmlDeviceGetMaxMigDeviceCount", 0) == 1
    assert [c.code for c in run.log.of("nvmlDeviceGetMigDeviceHandleByIndex", 0)][:3] == [0, 6, 0]
    assert run.log.count("nvmlDeviceGetMigDeviceHandleByIndex", 1) == 0


def test_mig_processes_on_an_old_driver_without_the_v3_call(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    run = fake_nvml.sample(scenario(mig_gpu([4242], [4243])), tmp_path,
                           defines=("OMIT_nvmlDeviceGetComputeRunningProcesses_v3",))
    assert on_instances(gpus(run)[0]) == [(4242, 1, 0), (4243, 2, 0)]


def test_a_refused_instance_query_leaves_the_rest(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    device = mig_gpu([4242], [4243])
    device["mig"][2]["errors"] = {"nvmlDeviceGetMemoryInfo_v2": 999}
    run = fake_nvml.sample(scenario(device), tmp_path, ticks=2)
    big, small = gpus(run)[0]["mig_instances"]
    assert (big["memory_used_bytes"], small["memory_used_bytes"]) == (GIB, None)
    assert on_instances(gpus(run)[0]) == [(4242, 1, 0), (4243, 2, 0)]
    assert gpus(run)[0]["lost"] is False


def check_instances_of_processes(run: Run) -> None:
    """What a scenario with PIDs 4242 on gi 1 ci 0 and 4243 on gi 2 ci 0 must give."""
    assert on_instances(gpus(run)[0]) == [(4242, 1, 0), (4243, 2, 0)]


def test_a_library_writing_the_instance_ids_into_the_wrong_fields_is_caught(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    """Meta-test: the check above fails when the C library swaps gpuInstanceId and
    computeInstanceId in nvmlProcessInfo_t, so gputop reads them from the real struct."""
    check_instances_of_processes(fake_nvml.sample(scenario(mig_gpu([4242], [4243])), tmp_path))
    wrong = fake_nvml.sample(scenario(mig_gpu([4242], [4243])), tmp_path / "wrong",
                             defines=("WRONG_MIG_PROCESS_IDS",))
    with pytest.raises(AssertionError):
        check_instances_of_processes(wrong)


# ------------------------------------------------------------------ gputop --once


def once(fake_nvml: FakeNvml, devices: dict[str, Any], folder: Path,
         *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "gputop", "--once", *args], capture_output=True, text=True,
        env=fake_nvml.env(scenario(devices), folder), timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done


def test_once_json_shows_the_instances_and_the_trainer_on_its_instance(
    fake_nvml: FakeNvml, tmp_path: Path, holders: list[int]
) -> None:
    trainer, _ = holders
    out = json.loads(once(fake_nvml, mig_gpu([trainer]), tmp_path, "--json").stdout)
    (gpu,) = out["gpus"]
    assert gpu["mig_enabled"] is True
    big, small = gpu["mig_instances"]
    assert (big["label"], small["label"]) == (BIG_LABEL, SMALL_LABEL)
    assert big["processes"] == [{"pid": trainer, "memory_used_bytes": GIB}]
    assert small["processes"] == []
    assert [m["util_percent"] for m in (big, small)] == [None, None]
    assert on_instances(gpu) == [(trainer, 1, 0)]
    # The trainer's GPU is its instance, in its process row and its trainer entry.
    (row,) = [p for p in out["processes"] if p["pid"] == trainer]
    assert row["role"] == "trainer" and row["gpu_devices"] == [BIG_LABEL]
    (group,) = [t for t in out["trainers"] if t["pid"] == trainer]
    assert group["gpu_devices"] == [BIG_LABEL]


def test_once_text_shows_a_line_per_instance_with_util_na(
    fake_nvml: FakeNvml, tmp_path: Path, holders: list[int]
) -> None:
    trainer, _ = holders
    lines = once(fake_nvml, mig_gpu([trainer]), tmp_path).stdout.splitlines()
    big = [line for line in lines if line.lstrip().startswith(f"MIG {BIG} gi 1 ci 0")]
    small = [line for line in lines if line.lstrip().startswith(f"MIG {SMALL} gi 2 ci 0")]
    assert len(big) == 1 and len(small) == 1, lines
    assert "util n/a" in big[0] and "util n/a" in small[0]
    assert big[0].endswith(f"PIDs {trainer}") and small[0].endswith("PIDs -")
    assert "1.0 GiB / 40.0 GiB" in big[0]
    gpu_row = lines.index(big[0]) - 1
    assert lines[gpu_row].lstrip().startswith("0  NVIDIA A100"), lines
    # The trainer's GPU is its instance.
    section = next(i for i, line in enumerate(lines) if line.startswith("TRAINERS"))
    end = next((i for i in range(section, len(lines)) if not lines[i].strip()), len(lines))
    (trainer_row,) = [i for i in range(section + 1, end)  # other trainers on the box: theirs
                      if lines[i].lstrip().startswith(f"{trainer} ")]
    assert lines[trainer_row + 1].strip() == f"on {BIG_LABEL}", lines


def advice_titles(out: dict[str, Any]) -> list[str]:
    return [a["title"] for a in out["advice"] if a["id"] == "gpu-shared"]


def test_trainers_on_different_instances_do_not_share_a_gpu(
    fake_nvml: FakeNvml, tmp_path: Path, holders: list[int]
) -> None:
    first, second = holders
    out = json.loads(once(fake_nvml, mig_gpu([first], [second]), tmp_path, "--json").stdout)
    assert advice_titles(out) == []
    places = {p["pid"]: p["gpu_devices"] for p in out["processes"] if p["pid"] in holders}
    assert places == {first: [BIG_LABEL], second: [SMALL_LABEL]}


def test_trainers_sharing_an_instance_are_told_which(
    fake_nvml: FakeNvml, tmp_path: Path, holders: list[int]
) -> None:
    out = json.loads(once(fake_nvml, mig_gpu(holders), tmp_path, "--json").stdout)
    (shared,) = [a for a in out["advice"] if a["id"] == "gpu-shared"]
    assert shared["title"] == f"{BIG_LABEL} is shared by 2 processes"
    assert shared["evidence"].startswith(f"{BIG_LABEL} (util n/a) holds memory of PIDs")


# ------------------------------------------------------------------ the screen


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_screen_shows_a_line_per_instance_under_its_gpu(
    fake_nvml: FakeNvml, tmp_path: Path, holders: list[int]
) -> None:
    trainer, _ = holders
    env = fake_nvml.env(scenario(mig_gpu([trainer])), tmp_path)
    names = ("GPUTOP_FAKE_NVML_SCENARIO", "GPUTOP_FAKE_NVML_LOG", "LD_LIBRARY_PATH",
             "PYTHONPATH")
    assigned = " ".join(f"{name}={shlex.quote(env[name])}" for name in names)
    with tmux.session(tmp_path, width=160, height=45) as name:
        tmux.spawn(name, f"env TERM=xterm-256color {assigned} {tmux.PYTHON} -m gputop")
        screen = tmux.wait_for(name, lambda s: f"MIG {SMALL}" in s and f"{trainer} " in s)
        lines = screen.splitlines()
        (gpu,) = [i for i, line in enumerate(lines) if "A100-SXM4-80GB" in line]
        big, small = lines[gpu + 1], lines[gpu + 2]
        assert f"MIG {BIG} gi 1 ci 0" in big and f"MIG {SMALL} gi 2 ci 0" in small, lines
        assert "util  n/a" in big and "util  n/a" in small
        assert "0%" not in big and "0%" not in small
        assert big.rstrip().endswith(f"pids {trainer}") and small.rstrip().endswith("pids -")
        assert "1.0G/40.0G" in big and "0B/10.0G" in small.replace(" ", ""), (big, small)
        assert "Traceback" not in screen and "EXIT=" not in screen


# ------------------------------------------------------------------ make gpu-check

GPU_CHECK = Path(__file__).parents[2] / "scripts" / "gpu_check.py"
GPU_CHECK_CHILD = """
import json, sys
from dataclasses import replace
sys.path.insert(0, {scripts!r})
import gpu_check
import pynvml as nv
nv.nvmlInit()
ctx = gpu_check.Context(nv, "580.65.06")
gpu_check.check_raw_vs_source(ctx)
good = gpu_check.check_mig(ctx)
gpus = ctx.report.gpus
ctx.report = replace(ctx.report, gpus=(replace(gpus[0], mig_instances=gpus[0].mig_instances[:1]),
                                       *gpus[1:]))
print(json.dumps({{"good": good, "one_missing": gpu_check.check_mig(ctx)}}))
"""


def test_gpu_check_holds_the_mig_devices_against_raw_nvml(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    devices = scenario(mig_gpu([4242], [4243]), {"uuid": "GPU-1"})
    done = subprocess.run([sys.executable, str(GPU_CHECK), "--no-load"], capture_output=True,
                          text=True, env=fake_nvml.env(devices, tmp_path), timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "GPU 0 MIG devices" in done.stdout and "FAIL" not in done.stdout
    assert "GPU 1 MIG devices" not in done.stdout  # no MIG there: not checked
    child = fake_nvml.python(GPU_CHECK_CHILD.format(scripts=str(GPU_CHECK.parent)), devices,
                             tmp_path / "child")
    assert child.returncode == 0, child.stderr
    found = json.loads(child.stdout.splitlines()[-1])
    assert found["good"] == []
    (missing,) = found["one_missing"]
    assert missing.startswith("GPU 0: MIG devices") and "MIG-big" in missing


def test_unprivileged_the_instances_still_give_memory_and_processes(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    """The GPU's aggregate memory and process list need privileges in MIG mode; the MIG devices
    answer without them."""
    device = mig_gpu([4242], [4243], errors={
        "nvmlDeviceGetMemoryInfo_v2": NO_PERMISSION, "nvmlDeviceGetMemoryInfo": NO_PERMISSION,
        "nvmlDeviceGetComputeRunningProcesses_v3": NO_PERMISSION})
    run = fake_nvml.sample(scenario(device), tmp_path, ticks=2)
    (gpu,) = gpus(run)
    assert gpu["memory_used_bytes"] is None
    assert [m["memory_used_bytes"] for m in gpu["mig_instances"]] == [GIB, GIB]
    assert on_instances(gpu) == [(4242, 1, 0), (4243, 2, 0)] and gpu["processes_known"] is True
    # v2 memory on the instances: `used` leaves out what the driver reserves.
    assert run.log.count("nvmlDeviceGetMemoryInfo_v2", 0) > 2
