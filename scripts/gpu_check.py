"""`make gpu-check`: on a machine with an NVIDIA GPU, hold gputop's GPU data against raw NVML.

Run from the repository root: `PYTHONPATH=. python3 scripts/gpu_check.py [--no-load]`.
It starts a small CUDA matmul load (torch) so processes, utilization and tensor activity
are non-trivial, prints raw NVML beside gputop's NVML source per device, then runs
`python3 -m gputop --once --json` and fails (exit 1, one line per problem) on any field a
real GPU gives that gputop left null. Needs nvidia-ml-py and psutil; torch for the load.
Never imports textual: the machine this runs on does not have it.

To add a check (e.g. "probe on CUDA"), write `def check_x(ctx: Context) -> list[str]`
returning one line per failure, and append it to CHECKS.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

DEADLINE_S = 170
LOAD_READY_TIMEOUT_S = 90
ONCE_TIMEOUT_S = 60
GIB = 1 << 30
ONCE_COMMAND = [sys.executable, "-m", "gputop", "--once", "--json"]

LOAD_CODE = r"""
import sys, time, torch
if not torch.cuda.is_available():
    print("no-cuda", flush=True); sys.exit(3)
x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
keep = torch.empty(int(1.5 * 2**30), dtype=torch.uint8, device="cuda")
y = x @ x; torch.cuda.synchronize()
print("ready", flush=True)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for _ in range(20):
        y = x @ x
    torch.cuda.synchronize()
"""

# Fields of gputop's GpuSample that raw NVML can be asked for directly.
COMPARED = (
    "name", "uuid", "util_percent", "memory_util_percent", "memory_used_bytes",
    "memory_total_bytes", "temperature_c", "power_w", "power_limit_w", "sm_clock_mhz",
    "memory_clock_mhz", "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s",
)


class Unavailable:
    """A raw NVML call that failed; prints as the error's name."""

    def __init__(self, why: str) -> None:
        self.why = why

    def __repr__(self) -> str:
        return f"<{self.why}>"


@dataclass
class Context:
    """What the checks share: raw NVML readings, gputop's samples, the load process."""

    nv: Any
    driver_version: str
    raw: list[dict[str, Any]] = field(default_factory=list)
    report: Any = None
    load: subprocess.Popen[str] | None = None
    load_gpu: int | None = None


def ask(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call raw NVML, turning any failure into an Unavailable that names it."""
    try:
        return fn(*args, **kwargs)
    except Exception as err:
        return Unavailable(type(err).__name__)


def text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def raw_device(nv: Any, index: int) -> dict[str, Any]:
    """Everything raw NVML says about one device, in gputop's field names and units."""
    h = nv.nvmlDeviceGetHandleByIndex(index)
    util = ask(nv.nvmlDeviceGetUtilizationRates, h)
    memory = ask(nv.nvmlDeviceGetMemoryInfo, h, version=nv.nvmlMemory_v2)
    if isinstance(memory, Unavailable):
        memory = ask(nv.nvmlDeviceGetMemoryInfo, h)
    power = ask(nv.nvmlDeviceGetPowerUsage, h)
    limit = ask(nv.nvmlDeviceGetEnforcedPowerLimit, h)
    rx = ask(nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_RX_BYTES)
    tx = ask(nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_TX_BYTES)
    counters = ask(nv.nvmlDeviceGetFieldValues, h,
                   [nv.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, nv.NVML_FI_DEV_PCIE_COUNT_TX_BYTES])
    procs = ask(nv.nvmlDeviceGetComputeRunningProcesses, h)
    gpm = ask(nv.nvmlGpmQueryDeviceSupport, h)

    def part(obj: Any, attr: str, scale: float = 1) -> Any:
        return obj if isinstance(obj, Unavailable) else getattr(obj, attr) * scale

    def scaled(value: Any, scale: float) -> Any:
        return value if isinstance(value, Unavailable) else value * scale

    return {
        "name": text(ask(nv.nvmlDeviceGetName, h)),
        "uuid": text(ask(nv.nvmlDeviceGetUUID, h)),
        "util_percent": part(util, "gpu"),
        "memory_util_percent": part(util, "memory"),
        "memory_used_bytes": part(memory, "used"),
        "memory_total_bytes": part(memory, "total"),
        "temperature_c": ask(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
        "power_w": scaled(power, 1e-3),
        "power_limit_w": scaled(limit, 1e-3),
        "sm_clock_mhz": ask(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
        "memory_clock_mhz": ask(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
        "pcie_rx_bytes_per_s": scaled(rx, 1024),
        "pcie_tx_bytes_per_s": scaled(tx, 1024),
        "processes": procs if isinstance(procs, Unavailable)
        else [(p.pid, p.usedGpuMemory) for p in procs],
        "gpm_supported": gpm if isinstance(gpm, Unavailable) else bool(gpm.isSupportedDevice),
        # Which PCIe path gputop takes: byte counters (nvmlReturn 0) before GPM and throughput.
        "pcie_counters": counters if isinstance(counters, Unavailable)
        else [(int(v.nvmlReturn), int(v.value.ullVal)) for v in counters],
    }


def start_load(seconds: float) -> subprocess.Popen[str] | None:
    """A child doing fp16 matmuls on GPU 0 until killed, or None (said why) if it cannot."""
    env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES="0")
    load = subprocess.Popen(
        [sys.executable, "-c", LOAD_CODE, str(seconds)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    assert load.stdout is not None
    readable, _, _ = select.select([load.stdout], [], [], LOAD_READY_TIMEOUT_S)
    line = load.stdout.readline().strip() if readable else "not ready in time"
    if line == "ready":
        return load
    load.kill()
    _, err = load.communicate()
    tail = (err or line or "no output").strip().splitlines()[-1:]
    print(f"WARNING: no CUDA load ({' '.join(tail)}); process checks are skipped")
    return None


# ---------------------------------------------------------------- checks


def check_raw_vs_source(ctx: Context) -> list[str]:
    """gputop's NVML source gives every field raw NVML gives, and the same identities."""
    from gputop.sources.nvml import NvmlSource, open_nvml

    source = open_nvml()
    if not isinstance(source, NvmlSource):
        return [f"gputop NVML source did not open: {source.sample().note}"]
    source.sample()
    time.sleep(1.0)  # GPM metrics need two samples; util and PCIe settle
    started = time.perf_counter()
    ctx.report = source.sample()
    cost_ms = (time.perf_counter() - started) * 1e3
    print(f"gputop's NVML source sampled {len(ctx.report.gpus)} device(s) in {cost_ms:.1f} ms")
    ctx.raw = [raw_device(ctx.nv, i) for i in range(len(ctx.report.gpus))]
    source.close()
    failures = []
    if ctx.report.driver_version != ctx.driver_version:
        failures.append(f"driver version {ctx.report.driver_version} != {ctx.driver_version}")
    for raw, gpu in zip(ctx.raw, ctx.report.gpus, strict=True):
        print_side_by_side(raw, gpu)
        failures += [f"GPU {gpu.index}: {p}" for p in compare(raw, gpu, ctx)]
    return failures


def print_side_by_side(raw: dict[str, Any], gpu: Any) -> None:
    rows = [(name, raw[name], getattr(gpu, name)) for name in COMPARED]
    rows.append((
        "processes (pid, mem)", raw["processes"],
        [(p.pid, p.memory_used_bytes, p.sm_util_percent) for p in gpu.processes],
    ))
    rows.append(("PCIe rx/tx counters (ret, B)", raw["pcie_counters"], ""))
    rows.append((
        "GPM supported | occ, tensor", raw["gpm_supported"],
        (gpu.sm_occupancy_percent, gpu.tensor_active_percent),
    ))
    print(f"\n--- GPU {gpu.index} ---")
    print(f"{'field':28} {'raw NVML':>40}   gputop")
    for name, theirs, ours in rows:
        print(f"{name:28} {theirs!s:>40}   {ours}")


def compare(raw: dict[str, Any], gpu: Any, ctx: Context) -> list[str]:
    problems = []
    if gpu.lost:
        problems.append("gputop marked the device lost")
    for name in COMPARED:
        if not isinstance(raw[name], Unavailable) and getattr(gpu, name) is None:
            problems.append(f"{name} is None but raw NVML gives {raw[name]}")
    for name in ("name", "uuid", "memory_total_bytes"):
        if not isinstance(raw[name], Unavailable) and getattr(gpu, name) != raw[name]:
            problems.append(f"{name}: gputop {getattr(gpu, name)!r} != raw {raw[name]!r}")
    used, raw_used = gpu.memory_used_bytes, raw["memory_used_bytes"]
    if isinstance(raw_used, int) and used is not None and abs(used - raw_used) > GIB:
        problems.append(f"memory used {used} far from raw {raw['memory_used_bytes']}")
    if raw["gpm_supported"] is True and gpu.sm_occupancy_percent is None:
        problems.append("GPM is supported but gputop has no SM occupancy")
    if isinstance(raw["processes"], list) and ctx.load is not None:
        problems += compare_load(raw, gpu, ctx)
    return problems


def compare_load(raw: dict[str, Any], gpu: Any, ctx: Context) -> list[str]:
    """The load's process shows on its GPU with its memory, and the GPU looks busy."""
    assert ctx.load is not None
    raw_memory = dict(raw["processes"])
    if ctx.load.pid not in raw_memory:
        return []
    ctx.load_gpu = gpu.index
    ours = {p.pid: p for p in gpu.processes}
    if ctx.load.pid not in ours:
        return [f"load pid {ctx.load.pid} not among gputop's processes {sorted(ours)}"]
    problems = []
    if raw_memory[ctx.load.pid] is not None and ours[ctx.load.pid].memory_used_bytes is None:
        problems.append("load process memory is None but raw NVML gives it")
    if not gpu.util_percent and not gpu.mig_enabled:  # MIG mode: drivers give no util
        problems.append(f"util_percent {gpu.util_percent} while the matmul load runs")
    if raw["gpm_supported"] is True and not gpu.tensor_active_percent:
        problems.append(f"tensor_active_percent {gpu.tensor_active_percent} under fp16 matmuls")
    return problems


def check_once_json(ctx: Context) -> list[str]:
    """`python3 -m gputop --once --json` reports the real GPUs with no field left null."""
    try:
        done = subprocess.run(
            ONCE_COMMAND,
            capture_output=True, text=True, timeout=ONCE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return [f"gputop --once --json took over {ONCE_TIMEOUT_S} s"]
    if done.returncode != 0:
        return [f"gputop --once --json exited {done.returncode}: {done.stderr.strip()[-500:]}"]
    try:
        doc = json.loads(done.stdout)
    except json.JSONDecodeError as err:
        return [f"gputop --once --json printed no JSON ({err})"]
    failures = []
    for key, want in (("schema", "gputop.snapshot/1"), ("gpu_source", "nvml")):
        if doc.get(key) != want:
            failures.append(f"JSON {key} is {doc.get(key)!r}, expected {want!r}")
    gpus = doc.get("gpus") or []
    if len(gpus) != len(ctx.raw):
        failures.append(f"JSON has {len(gpus)} GPUs, NVML {len(ctx.raw)}")
    for raw, gpu in zip(ctx.raw, gpus, strict=False):
        failures += [f"JSON gpus[{gpu.get('index')}]: {p}" for p in json_gpu_problems(raw, gpu)]
    failures += json_load_problems(doc, ctx)
    return failures


def json_gpu_problems(raw: dict[str, Any], gpu: dict[str, Any]) -> list[str]:
    problems = [
        f"{name} is null (raw NVML: {raw[name]})"
        for name in ("index", *COMPARED)
        if gpu.get(name) is None and not isinstance(raw.get(name, 0), Unavailable)
    ]
    if raw["gpm_supported"] is True:
        problems += [
            f"{name} is null though the GPU supports GPM"
            for name in ("sm_occupancy_percent", "tensor_active_percent")
            if gpu.get(name) is None
        ]
    if not isinstance(gpu.get("processes"), list):
        problems.append("processes is not a list")
    return problems


def json_load_problems(doc: dict[str, Any], ctx: Context) -> list[str]:
    if ctx.load is None or ctx.load_gpu is None:
        return []
    pid = ctx.load.pid
    problems = []
    gpu: dict[str, Any] = next(
        (g for g in doc.get("gpus", []) if g.get("index") == ctx.load_gpu), {}
    )
    listed = {p.get("pid"): p for p in gpu.get("processes", [])}
    if pid not in listed:
        problems.append(f"JSON gpus[{ctx.load_gpu}].processes lacks the load pid {pid}")
    elif listed[pid].get("memory_used_bytes") is None:
        problems.append(f"JSON gpus[{ctx.load_gpu}].processes[pid={pid}].memory_used_bytes null")
    row = next((p for p in doc.get("processes", []) if p.get("pid") == pid), None)
    if row is None:
        problems.append(f"JSON processes[] lacks the load pid {pid}")
    elif row.get("gpu_memory_bytes") is None:
        problems.append(f"JSON processes[pid={pid}].gpu_memory_bytes is null")
    return problems


def raw_migs(nv: Any, handle: Any) -> list[tuple[Any, ...]]:
    """Raw NVML's MIG devices of a GPU in MIG mode: (uuid, gi, ci, memory total) each."""
    found = []
    count = ask(nv.nvmlDeviceGetMaxMigDeviceCount, handle)
    for index in range(0 if isinstance(count, Unavailable) else count):
        mig = ask(nv.nvmlDeviceGetMigDeviceHandleByIndex, handle, index)
        if isinstance(mig, Unavailable):
            continue  # no MIG device at this index
        memory = ask(nv.nvmlDeviceGetMemoryInfo, mig)
        found.append((text(ask(nv.nvmlDeviceGetUUID, mig)),
                      ask(nv.nvmlDeviceGetGpuInstanceId, mig),
                      ask(nv.nvmlDeviceGetComputeInstanceId, mig),
                      memory if isinstance(memory, Unavailable) else memory.total))
    return found


def check_mig(ctx: Context) -> list[str]:
    """On a GPU in MIG mode, gputop lists the MIG devices raw NVML lists (none: skipped)."""
    failures = []
    checked = 0
    for gpu in ctx.report.gpus if ctx.report is not None else ():
        handle = ctx.nv.nvmlDeviceGetHandleByIndex(gpu.index)
        mode = ask(ctx.nv.nvmlDeviceGetMigMode, handle)
        if isinstance(mode, Unavailable) or mode[0] != ctx.nv.NVML_DEVICE_MIG_ENABLE:
            continue
        checked += 1
        raw = raw_migs(ctx.nv, handle)
        ours = [(m.uuid, m.gpu_instance_id, m.compute_instance_id, m.memory_total_bytes)
                for m in gpu.mig_instances]
        print(f"GPU {gpu.index} MIG devices (uuid, gi, ci, memory):\n  raw NVML {raw}\n"
              f"  gputop   {ours}")
        if gpu.mig_enabled is not True:
            failures.append(f"GPU {gpu.index}: MIG mode is on, gputop says {gpu.mig_enabled}")
        if sorted(map(repr, raw)) != sorted(map(repr, ours)):
            failures.append(f"GPU {gpu.index}: MIG devices {ours} != raw {raw}")
    if not checked:
        print("no GPU in MIG mode: nothing to check")
    return failures


Check = Callable[[Context], list[str]]
# Append new parts here (e.g. check_probe_on_cuda); each runs with the load still going.
CHECKS: list[Check] = [check_raw_vs_source, check_once_json, check_mig]


def _out_of_time(signum: int, frame: Any) -> None:
    print(f"\ngpu-check: FAILED: did not finish within {DEADLINE_S} s", flush=True)
    os._exit(1)  # the load child stops on its own timer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--no-load", action="store_true", help="do not start the CUDA load")
    args = parser.parse_args(argv)
    started = time.monotonic()
    signal.signal(signal.SIGALRM, _out_of_time)
    signal.alarm(DEADLINE_S)
    import pynvml as nv

    try:
        nv.nvmlInit()
    except nv.NVMLError as err:
        print(f"gpu-check: FAILED: NVML does not start here ({err}); this check needs a GPU")
        return 1
    ctx = Context(nv, text(nv.nvmlSystemGetDriverVersion()))
    print(f"driver {ctx.driver_version}, {nv.nvmlDeviceGetCount()} device(s), "
          f"nvidia-ml-py {getattr(nv, '__version__', '?')}")
    ctx.load = None if args.no_load else start_load(DEADLINE_S)
    failures: list[str] = []
    try:
        for check in CHECKS:
            print(f"\n=== {check.__name__}: {(check.__doc__ or '').strip()}")
            found = check(ctx)
            failures += [f"{check.__name__}: {f}" for f in found]
            print("ok" if not found else "\n".join(f"FAIL {f}" for f in found))
    finally:
        if ctx.load is not None:
            ctx.load.kill()
            ctx.load.wait()
        nv.nvmlShutdown()
    if "textual" in sys.modules:
        failures.append("gpu_check imported textual (the GPU machine does not have it)")
    elapsed = time.monotonic() - started
    if failures:
        print(f"\ngpu-check: FAILED ({len(failures)} problems, {elapsed:.0f} s)")
        print("\n".join(f"  - {f}" for f in failures))
        return 1
    print(f"\ngpu-check: OK ({len(CHECKS)} checks, {elapsed:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
