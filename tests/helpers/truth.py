"""The truth table's harness: a trainer with hand timers in its loop, run under
`python -m gputop.probe`, and gputop's verdict on its window set against what the timers
measured over exactly the same steps.

The timers are the module TIMERS, which the trainer imports (`from truth_timers import ...`):
`with timed(part):` (part: input, host or compute) charges the time to the function the
`with` is in, `timed(part, fn)` to `fn` (a call timed at its call site: the loop decides
whether a get_batch is input or host); nested timers are exclusive (the outer one stops
while the inner one runs); `timed_iter(loader)` times each `next()` of a loop's loader as
input of the loop's function; `step_done()` goes right after `optimizer.step()`. At exit the
trainer writes every timed span, its step_done() calls and its per-step records (wall time
since the previous step_done, time per part and per function) as JSON to the file $TRUTH_OUT.

The module is installed in a `site-packages` folder of the run's own: the probe's stack
sampler takes such frames for a library's, so the timers never stand in for the function
they time. The truth is taken over gputop's window by time, not by count: each of the
window's steps (warm-up steps left out, as gputop leaves them) is the span [end - duration,
end] on the trainer's monotonic clock, which the timers read too, and the truth of a step is
its timers' time within that span (host = the rest, as gputop's host is). So a loop whose
loader opens a step per micro-batch (gradient accumulation) is compared step for step.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gputop.core.model import AttachState, StepRecord
from tests.helpers.probe import ROOT, trainer_env, watch_process
from tests.helpers.scheduling import favoured

PARTS = ("input", "host", "compute")
VERDICT_PART = {"data-bound": "input", "host-bound": "host", "compute-bound": "compute"}
SITE_KEY = {"input": "data", "host": "host"}  # gputop's name for a part's site
NOT_HERE = 3  # a trainer's exit code when it needs what this host lacks (it says what)
AGREE_POINTS = 10.0  # how far gputop's share may be from the truth's

TIMERS = '''
"""Hand timers for the truth table (see tests/helpers/truth.py)."""
import atexit, json, os, sys, time

_now = time.perf_counter_ns
_spans = []  # (part, site, start, end), exclusive of nested timers
_stack = []
_steps = []  # when each step_done() came
_sites = {}


def _site(code):
    site = _sites.get(code)
    if site is None:
        name = os.path.basename(code.co_filename)
        site = _sites[code] = f"{code.co_name} ({name}:{code.co_firstlineno})"
    return site


class timed:
    __slots__ = ("part", "site", "start")

    def __init__(self, part, fn=None):
        self.part = part
        self.site = _site(getattr(fn, "__code__", fn) or sys._getframe(1).f_code)

    def __enter__(self):
        t = _now()
        if _stack:
            outer = _stack[-1]
            _spans.append((outer.part, outer.site, outer.start, t))
        self.start = t
        _stack.append(self)

    def __exit__(self, *exc):
        t = _now()
        _stack.pop()
        _spans.append((self.part, self.site, self.start, t))
        if _stack:
            _stack[-1].start = t


class timed_iter:
    """A loader whose next() is timed as input of the function that loops over it."""

    def __init__(self, iterable):
        self.iterable = iterable
        self.timer = timed("input", sys._getframe(1).f_code)

    def __iter__(self):
        self.it = iter(self.iterable)
        return self

    def __next__(self):
        with self.timer:
            return next(self.it)

    def __len__(self):
        return len(self.iterable)


def step_done():
    _steps.append(_now())


def _records():
    out, spans, previous = [], sorted(_spans, key=lambda s: s[2]), None
    for end in _steps:
        if previous is not None:
            parts, functions = dict.fromkeys(("input", "host", "compute"), 0), {}
            for part, site, a, b in spans:
                ns = min(b, end) - max(a, previous)
                if ns > 0:
                    parts[part] += ns
                    functions[site] = functions.get(site, 0) + ns
            wall = end - previous
            parts["host"] = wall - parts["input"] - parts["compute"]
            out.append({"end_ns": end, "wall_ns": wall, "parts": parts, "functions": functions})
        previous = end
    return out


@atexit.register
def _write():
    path = os.environ.get("TRUTH_OUT")
    if path:
        with open(path, "w") as f:
            json.dump({"spans": _spans, "step_calls": len(_steps), "steps": _records()}, f)
'''


@dataclass(frozen=True)
class Row:
    """One trainer's line of the truth table (gputop's fields None where it could not run)."""

    trainer: str
    truth_part: str | None = None
    truth_percent: float | None = None
    truth_site: str | None = None  # the top function of the truth's part (input, host)
    truth_site_percent: float | None = None  # its share of the window's wall time
    # every function of the truth's part (input, host) and its share, most first
    truth_sites: tuple[tuple[str, float], ...] = ()
    verdict: str | None = None
    verdict_percent: float | None = None
    site: str | None = None  # gputop's site of its verdict's part
    site_percent: float | None = None
    steps: int = 0  # the window's steps both were taken over
    truth_steps: int = 0  # step_done() calls the trainer made
    not_run: str | None = None  # why the trainer cannot run here
    script: Path | None = None  # the trainer as it ran
    records: tuple[StepRecord, ...] = field(default=(), repr=False)  # gputop's, warm-up left out

    @property
    def gputop_part(self) -> str | None:
        return VERDICT_PART.get(self.verdict or "")

    @property
    def agrees(self) -> bool:
        """Verdict, share and (for input and host) the function and its share all agree."""
        if self.not_run or self.gputop_part != self.truth_part:
            return False
        if not _close(self.verdict_percent, self.truth_percent):
            return False
        if self.truth_part == "compute":
            return True
        return self.site == self.truth_site and _close(self.site_percent,
                                                       self.truth_site_percent)


def _close(measured: float | None, truth: float | None) -> bool:
    return measured is not None and truth is not None and abs(measured - truth) <= AGREE_POINTS


def install_timers(folder: Path) -> Path:
    """TIMERS as the module truth_timers in `folder`/site-packages; that folder."""
    packages = folder / "site-packages"
    packages.mkdir(parents=True, exist_ok=True)
    (packages / "truth_timers.py").write_text(TIMERS.lstrip())
    return packages


def run_trainer(name: str, source: str, folder: Path, timeout_s: float = 300.0) -> Row:
    """Run `source` (a trainer importing truth_timers) under the probe in `folder`, favoured
    as run_probed runs its trainers; its row of the table."""
    folder.mkdir(parents=True, exist_ok=True)
    packages = install_timers(folder)
    script = folder / f"truth_{name}.py"  # never a module name the trainer imports
    script.write_text(textwrap.dedent(source))
    out, err = folder / "truth.json", folder / "stderr.txt"
    env = trainer_env(folder, TRUTH_OUT=str(out))
    env["PYTHONPATH"] = f"{packages}:{env['PYTHONPATH']}"
    with err.open("wb") as stderr:
        # Favoured: other work on a shared box should stretch neither the timers nor the probe
        proc = subprocess.Popen([sys.executable, "-m", "gputop.probe", str(script)], env=env,
                                cwd=ROOT, start_new_session=True, preexec_fn=favoured(),
                                stdout=subprocess.DEVNULL, stderr=stderr)
        state = watch_process(proc, folder, timeout_s)
    said = err.read_text(errors="replace").strip()
    if proc.returncode == NOT_HERE:
        return Row(name, not_run=said.splitlines()[-1] if said else "not on this host")
    if proc.returncode != 0:
        raise RuntimeError(f"{name} exited {proc.returncode}: {said[-2000:]}")
    return compare(name, state, json.loads(out.read_text()), script)


def window_steps(state: AttachState) -> list[StepRecord]:
    """The steps gputop's summary is taken over: its window's, warm-up left out."""
    return [s for s in state.steps if not s.warmup and s.end_ns is not None]


def compare(name: str, state: AttachState, truth: dict[str, Any],
            script: Path | None = None) -> Row:
    """The row of a trainer from gputop's final state and its timers' JSON."""
    steps = window_steps(state)
    parts, sites, wall = truth_over(steps, truth["spans"])
    s = state.summary
    part = max(PARTS, key=parts.__getitem__) if wall else None  # ties: the first, as gputop's
    shares: tuple[tuple[str, float], ...] = ()
    if part in SITE_KEY:
        ranked = sorted(sites[part].items(), key=lambda item: (-item[1], item[0]))
        shares = tuple((site, 100.0 * ns / wall) for site, ns in ranked)
    site, site_percent = shares[0] if shares else (None, None)
    gputop_part = VERDICT_PART.get(s.verdict)
    key = SITE_KEY.get(gputop_part or "")
    return Row(
        trainer=name, truth_part=part,
        truth_percent=100.0 * parts[part] / wall if part else None,
        truth_site=site, truth_site_percent=site_percent, truth_sites=shares,
        verdict=s.verdict, verdict_percent=s.verdict_percent,
        site=getattr(s, f"{key}_site") if key else None,
        site_percent=getattr(s, f"{key}_site_percent") if key else None,
        steps=len(steps), truth_steps=truth["step_calls"], script=script,
        records=tuple(step for step in state.steps if not step.warmup))


def truth_over(steps: list[StepRecord], spans: list[list[Any]]
               ) -> tuple[dict[str, int], dict[str, Counter[str]], int]:
    """The timers' time per part and per (part, function) within the steps' spans, and the
    steps' wall time; host is the wall time no input or compute timer holds."""
    ordered = sorted((a, b, part, site) for part, site, a, b in spans)
    starts = [a for a, _, _, _ in ordered]
    parts = dict.fromkeys(PARTS, 0)
    sites: dict[str, Counter[str]] = {part: Counter() for part in PARTS}
    wall = 0
    for step in steps:
        assert step.end_ns is not None
        low, high = step.end_ns - step.duration_ns, step.end_ns
        wall += high - low
        # spans are disjoint: of those starting at or before `low`, only the last may reach it
        for a, b, part, site in ordered[max(0, bisect_right(starts, low) - 1):
                                        bisect_right(starts, high)]:
            ns = min(b, high) - max(a, low)
            if ns > 0:
                parts[part] += ns
                sites[part][site] += ns
    parts["host"] = wall - parts["input"] - parts["compute"]
    return parts, sites, wall

