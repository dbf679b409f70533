"""`make gpu-check`, advice part: each GPU rule followed on a real CUDA trainer (about 1.5 min).

For each rule, the trainer of scripts/gpu_check_probe.py runs the way that makes the rule
fire and the way its action says, taking turns (before, after, after, before: drift hits
both alike), each run under the probe with gputop's own sampler and advisor watching it
(NVML, /proc and the ring; no textual). PASS when the rule fired during every run before,
in no run after, and the trainer's own samples/s rose at least 10 % (the median of the
after/before ratios of the runs taken side by side). Exit 0 when every check passes.

- pin-memory-off: 32 MiB batches copied from pageable memory, then pin_memory=True with
  .to(device, non_blocking=True).
- gpu-starved: a trainer holding most of the card whose one worker loads a batch per
  ~0.2 s; followed as its action says for an attached trainer: with the num_workers the
  trainer's own input advice names.
- gpu-shared: two GPU-bound jobs on the card at once, then one after the other; the gain
  checked is each job's samples/s; the jobs' samples/s together (the work done, which
  one after the other cannot raise where one job alone fills the card) is printed beside.

The tests dry-run it on the CPU (GPU_CHECK_DEVICE=cpu): there no GPU rule can fire and no
gain can show; pin-memory-off fires where the trainer says it trains on CUDA.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gputop.advice import Advisor  # noqa: E402
from gputop.core.model import Advice, Frame  # noqa: E402
from gputop.frames.sampler import Sampler  # noqa: E402
from gputop.sources.attach import RingAttachSource  # noqa: E402
from gputop.sources.gpu import open_gpu_source  # noqa: E402
from gputop.sources.host import ProcHostSource  # noqa: E402
from gputop.sources.processes import ProcProcessSource  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
from gpu_check_probe import TRAINER, check  # noqa: E402

ORDER = ("before", "after", "after", "before")
TICK_S = 0.25
RUN_TIMEOUT_S = 90.0  # a bound on one run, not a speed check
MIN_GAIN = 1.1
FALLBACK_WORKERS = 8  # when the trainer's input advice names no number
STEPPING = 5


@dataclass
class Run:
    """One run: each job's own samples/s, and the advice gputop showed meanwhile."""

    samples_per_s: list[float]
    advice: dict[str, Advice] = field(default_factory=dict)


@dataclass(frozen=True)
class Follow:
    """One rule followed: the jobs run at once before and after (mode, workers or None)."""

    rule: str
    change: str
    before: tuple[tuple[str, int | None], ...]
    after: Callable[[Run], tuple[tuple[str, int | None], ...]]
    steps: int


def run_jobs(script: Path, jobs: Sequence[tuple[str, int | None]], steps: int,
             tmp: Path) -> Run:
    """The jobs at once, each under the probe, their timed steps started together; gputop's
    sampler, attached to the first, samples every TICK_S until all have ended, keeping the
    advice shown once the first is stepping."""
    ring_dir = Path(tempfile.mkdtemp(dir=tmp))
    barrier = Path(tempfile.mkdtemp(dir=tmp))
    env = {**os.environ, "GPUTOP_RING_DIR": str(ring_dir),
           "GPU_CHECK_BARRIER": f"{barrier},{len(jobs)}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    outs = [ring_dir / f"job{i}.json" for i in range(len(jobs))]
    procs = [subprocess.Popen([sys.executable, "-m", "gputop.probe", str(script), mode,
                               str(steps), str(out), *([] if n is None else [str(n)])], env=env)
             for (mode, n), out in zip(jobs, outs, strict=True)]
    sampler = Sampler(gpu=open_gpu_source(), host=ProcHostSource(),
                      processes=ProcProcessSource(),
                      attach=RingAttachSource(directory=str(ring_dir)),
                      advisor=Advisor(on_after=1), interval_s=TICK_S)
    sampler.attach(procs[0].pid)
    seen: dict[str, Advice] = {}
    deadline = time.monotonic() + RUN_TIMEOUT_S
    try:
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            frame = sampler.sample()
            if stepping(frame):
                for found in frame.advice:
                    seen.setdefault(found.id, found)
            time.sleep(TICK_S)
    finally:
        sampler.close()
        for p in procs:
            p.kill()
            p.wait(timeout=30)
    failed = [(mode, p.returncode) for (mode, _), p in zip(jobs, procs, strict=True)
              if p.returncode != 0]
    if failed:
        raise SystemExit(f"trainer runs failed or timed out: {failed}")
    return Run([json.loads(o.read_text())["samples_per_s"] for o in outs], seen)


def stepping(frame: Frame) -> bool:
    """The attached trainer has taken STEPPING steps: advice from its start-up (memory held
    while the workers start, the GPU idle meanwhile) is not about its steps."""
    return bool(frame.attached) and frame.attached[0].summary.steps >= STEPPING


def follow(script: Path, plan: Follow, tmp: Path) -> list[bool]:
    """The rule's runs in ORDER; PASS/FAIL lines for firing, going away and the gain."""
    runs: dict[str, list[Run]] = {"before": [], "after": []}
    after_jobs = None
    for which in ORDER:
        if which == "after" and after_jobs is None:
            after_jobs = plan.after(runs["before"][0])
        jobs = plan.before if which == "before" else after_jobs
        assert jobs is not None
        runs[which].append(run_jobs(script, jobs, plan.steps, tmp))
    before, after = runs["before"], runs["after"]
    fired = [plan.rule in r.advice for r in before]
    shown = [plan.rule in r.advice for r in after]
    pairs = [median(a.samples_per_s) / median(b.samples_per_s)
             for a, b in zip(after, before, strict=True)]
    ratio = median(pairs)
    first = next((r.advice[plan.rule] for r in before if plan.rule in r.advice), None)
    print(f"      {plan.rule}: {plan.change}; samples/s a job before "
          f"{[[round(v) for v in r.samples_per_s] for r in before]}, after "
          f"{[[round(v) for v in r.samples_per_s] for r in after]}; "
          f"evidence: {first.evidence if first else 'never shown'}", flush=True)
    if len(plan.before) > 1:  # what following does to the jobs' work together: not checked
        together = median(median(a.samples_per_s) / sum(b.samples_per_s)
                          for a, b in zip(after, before, strict=True))
        print(f"      {plan.rule}: the jobs' samples/s together, one after the other vs at "
              f"once: x{together:.2f}", flush=True)
    return [
        check(f"{plan.rule}: fires", all(fired), f"in {sum(fired)} of {len(fired)} runs before"),
        check(f"{plan.rule}: gone once followed", not any(shown),
              f"in {sum(shown)} of {len(shown)} runs after"),
        check(f"{plan.rule}: followed pays", ratio >= MIN_GAIN,
              f"x{ratio:.2f} samples/s a job (paired ratios {[round(p, 2) for p in pairs]})"),
    ]


def suggested_workers(run: Run) -> tuple[tuple[str, int | None], ...]:
    """The waiting trainer with the num_workers its own input advice named."""
    numbers = [int(m.group(1)) for a in run.advice.values()
               if (m := re.search(r"num_workers=(\d+)", a.action))]
    workers = numbers[0] if numbers else FALLBACK_WORKERS
    print(f"      gpu-starved: input advice shown {sorted(run.advice)}; following it with "
          f"num_workers={workers}" + ("" if numbers else " (no number named)"), flush=True)
    return (("waiting", workers),)


def plans(steps_scale: float) -> list[Follow]:
    """The rules and how each is followed; steps scaled down for the CPU dry run."""
    def steps(n: int) -> int:
        return 10 + max(2, round(n * steps_scale))
    return [
        Follow("pin-memory-off", "pin_memory=True, .to(non_blocking=True)",
               (("pageable", None),), lambda _: (("pinned", None),), steps(200)),
        Follow("gpu-starved", "the num_workers the input advice names",
               (("waiting", None),), suggested_workers, steps(30)),
        Follow("gpu-shared", "one job after the other instead of two at once",
               (("saturating", None), ("saturating", None)),
               lambda _: (("saturating", None),), steps(200)),
    ]


def main(steps_scale: float = 1.0) -> int:
    results: list[bool] = []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "cuda_trainer.py"
        script.write_text(TRAINER)
        for plan in plans(steps_scale):
            results += follow(script, plan, Path(tmp))
    return 0 if all(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
