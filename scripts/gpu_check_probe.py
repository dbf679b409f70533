"""`make gpu-check`, probe part: a small CUDA trainer under `python -m gputop.probe` (≤ 2 min).

Checks that steps carry GPU times (gpu_ns, gpu_gap_ns) and sensible verdicts for a
data-starved and a compute-heavy run, and measures the slowdown with vs without the probe
from alternating runs of the same script. No textual. Exit 0 when every check passes.
The tests dry-run its trainer on the CPU (GPU_CHECK_DEVICE=cpu). Its trainer's other
modes serve scripts/gpu_check_advice.py, which follows the GPU advice.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gputop.core.model import AttachState  # noqa: E402
from gputop.frames.derive import Derivation  # noqa: E402
from gputop.sources.attach import RingAttachSource  # noqa: E402

TRAINER = r'''
import json, os, sys, time
from contextlib import nullcontext
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

mode, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
device = os.environ.get("GPU_CHECK_DEVICE", "cuda")  # "cpu": the tests' dry run
cuda = device == "cuda"
# Per mode: seconds each sample waits (storage-like), floats per sample, the model's width,
# passes a step, square matmuls a step (GPU time the host need not wait for), workers,
# batch size, pin_memory. A fifth argument sets the workers (the number an advice named).
MODES = {
    "starved": (0.0005, 1024, 256, 1, 0, 2, 256, cuda),
    "heavy": (0.0, 1024, 4096, 4, 0, 2, 256, cuda),
    "pageable": (0.0, 2**18 if cuda else 2**16, 16, 1, 1, 6, 32, False),  # 32 MiB batches
    "pinned": (0.0, 2**18 if cuda else 2**16, 16, 1, 1, 6, 32, True),
    "waiting": (0.003, 1024, 256, 1, 2, 1, 64, cuda),  # one worker: a batch per ~0.2 s
    "saturating": (0.0, 1024, 256, 1, 8, 2, 256, cuda),
}
wait_s, floats, width, passes, matmuls, workers, batch, pin = MODES[mode]
workers = int(sys.argv[4]) if len(sys.argv) > 4 else workers
copies = mode in ("pageable", "pinned")  # timed as the probe's h2d phase
if copies and "gputop.probe" in sys.modules:
    from gputop import probe
    h2d = lambda: probe.phase("h2d")
else:
    h2d = nullcontext

class Samples(Dataset):
    def __len__(self):
        return 10**6
    def __getitem__(self, i):
        if wait_s:
            time.sleep(wait_s)
        if floats > 1024:
            return torch.full((floats,), float(i % 7)), i % 10
        return torch.randn(1024), i % 10

def barrier():
    # The jobs of one run (GPU_CHECK_BARRIER: a folder, and how many) start timing together.
    where, count = os.environ["GPU_CHECK_BARRIER"].split(",")
    open(os.path.join(where, str(os.getpid())), "w").close()
    while len(os.listdir(where)) < int(count):
        time.sleep(0.01)

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(floats, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                      nn.Linear(width, 10)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
side = torch.randn(4096 if cuda else 128, 4096 if cuda else 128, device=device)
if cuda and mode == "waiting":  # a trainer holding most of the card: a big model or cache
    held = torch.empty(int(0.9 * torch.cuda.mem_get_info()[0]), dtype=torch.uint8,
                       device=device)
loader = DataLoader(Samples(), batch_size=batch, num_workers=workers, pin_memory=pin)
t0 = None
for i, (x, y) in enumerate(loader):
    if i == 10:
        if "GPU_CHECK_BARRIER" in os.environ:
            barrier()
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
    if i == steps:
        break
    if i == 1 and os.environ.get("GPU_CHECK_CLAIM_DEVICE"):  # the dry run says it is CUDA
        from gputop import probe
        probe.annotate(device=os.environ["GPU_CHECK_CLAIM_DEVICE"])
    with h2d():
        if cuda:
            x, y = x.to(device, non_blocking=pin), y.to(device, non_blocking=pin)
        elif copies:
            x = x.clone()  # on the CPU, what .to(device) does from pageable memory
    for _ in range(matmuls):
        side = torch.tanh(side @ side)
    for _ in range(passes):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
if cuda:
    torch.cuda.synchronize()
loop_s = time.perf_counter() - t0
json.dump({"loop_s": loop_s, "samples_per_s": (steps - 10) * batch / loop_s}, open(out, "w"))
'''


def run(
    script: Path, mode: str, steps: int, ring_dir: Path, probed: bool
) -> tuple[dict[str, float], AttachState | None]:
    """One trainer run; with the probe, also what the attach source read from its ring."""
    out = ring_dir / f"{mode}-{probed}-{time.monotonic_ns()}.json"
    env = {**os.environ, "GPUTOP_RING_DIR": str(ring_dir),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    head = [sys.executable, "-m", "gputop.probe"] if probed else [sys.executable]
    proc = subprocess.Popen([*head, str(script), mode, str(steps), str(out)], env=env)
    source = RingAttachSource(directory=str(ring_dir))
    source.attach(proc.pid)
    while proc.poll() is None:
        source.sample()
        time.sleep(0.05)
    states = source.sample()
    source.close()
    state = Derivation().attached(states, time.monotonic_ns())[0][0] if probed else None
    if proc.returncode != 0:
        raise SystemExit(f"trainer {mode} (probe={probed}) exited {proc.returncode}")
    return json.loads(out.read_text()), state


def check(name: str, ok: bool, detail: str) -> bool:
    print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}", flush=True)
    return ok


def main() -> int:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        ring_dir = Path(tmp)
        script = ring_dir / "cuda_trainer.py"
        script.write_text(TRAINER)
        for mode, expected in (("starved", "data-bound"), ("heavy", "compute-bound")):
            _, state = run(script, mode, 150, ring_dir, probed=True)
            if state is None:
                raise SystemExit(f"trainer {mode}: the attach source read nothing")
            steps = [s for s in state.steps if not s.warmup]
            timed = [s for s in steps if s.gpu_ns is not None and s.gpu_gap_ns is not None]
            results.append(check(f"{mode}: GPU times", len(timed) >= 0.8 * max(1, len(steps)),
                                 f"{len(timed)}/{len(steps)} steps have gpu_ns and gpu_gap_ns"))
            s = state.summary
            results.append(check(
                f"{mode}: verdict", s.verdict == expected,
                f"{s.verdict} (expected {expected}), input {s.input_bound_percent}% band "
                f"{s.band}, device {state.config.device}, dropped {state.dropped_records}"))
            if timed:
                host = sorted(t.data_ns or 0 for t in timed)[len(timed) // 2]
                gap = sorted(t.gpu_gap_ns or 0 for t in timed)[len(timed) // 2]
                gpu = sorted(t.gpu_ns or 0 for t in timed)[len(timed) // 2]
                print(f"      median host wait {host / 1e6:.2f} ms, GPU gap {gap / 1e6:.2f} ms,"
                      f" GPU busy {gpu / 1e6:.2f} ms")
        plain: list[float] = []
        probed: list[float] = []
        for i in range(8):  # plain, probed, probed, plain, twice: drift hits both alike
            with_probe = i % 4 in (1, 2)
            own, _ = run(script, "heavy", 210, ring_dir, probed=with_probe)
            (probed if with_probe else plain).append(own["loop_s"])
        ratio = sum(probed) / sum(plain)
        results.append(check("slowdown", ratio <= 1.02,
                             f"x{ratio:.4f} with the probe (loop seconds without "
                             f"{[round(t, 3) for t in plain]}, with "
                             f"{[round(t, 3) for t in probed]})"))
    return 0 if all(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
