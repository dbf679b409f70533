"""Reads probed trainers' rings: which PIDs have one, and the newest steps of attached ones
(classified as they are read where the wiring hands in the verdict; the sampler's Derivation
summarizes them)."""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import fields
from itertools import pairwise
from operator import itemgetter
from typing import Any

from gputop.core.model import Activity, AttachState, StepRecord, TrainerConfig, Verdict
from gputop.core.printable import printable
from gputop.probe import ring as ring_format
from gputop.probe.activity import ACTIVITIES, META_ACTIVITY, META_SINCE
from gputop.probe.reader import RawRecord, RingError, RingReader
from gputop.sources.procfs import parse_stat, read_bytes
from gputop.sources.rings import RingDirectory, process_owner

WINDOW = 256
# A step's verdict from (duration, data, h2d, gpu, gpu_gap, host) ns (analysis.steps.verdict_of,
# handed in by wiring: sources do not import the analysis).
VerdictOf = Callable[[int, int | None, int | None, int | None, int | None, int | None], Verdict]
HOW_TO_START = "start it with `gputop run -- python train.py` or `python -m gputop.probe train.py`"
RING_APPEARS = ("the probe makes it at the first DataLoader pass, backward or optimizer step; "
                "try again once the model trains")
CONFIG_FIELDS = {
    "num_workers": int, "pin_memory": bool, "batch_size": int, "prefetch_factor": int,
    "persistent_workers": bool, "num_threads": int, "device": str, "rank": int,
    "world_size": int,
}


class RingAttachSource:
    """The AttachSource over ring files in /dev/shm (or $GPUTOP_RING_DIR).

    Only rings that pass the checks of `RingDirectory` are read (ours, or, for root, their
    process owner's). Attaching to a PID attaches to its whole job on this node: the probed
    processes below it (the ranks under a launcher such as torchrun, which has no ring
    itself) and, for a rank, its sibling ranks of the same world size. Ranks that start
    later join as they appear.
    """

    def __init__(self, directory: str | None = None, window: int = WINDOW,
                 verdict_of: VerdictOf | None = None) -> None:
        self.rings = RingDirectory(directory, watch=True)
        self.window = window
        self.verdict_of = verdict_of  # None: steps are left "unknown" for the Derivation
        self._targets: list[int] = []
        self._windows: dict[int, _RingWindow] = {}
        self._members: dict[int, list[int]] = {}
        self._judged: set[tuple[int, int]] = set()  # (pid, start ticks) already placed
        self._scanned = False  # probe_pids() listed the directory this tick

    def probe_pids(self) -> frozenset[int]:
        """Live PIDs whose ring passes the checks (a listing: it removes nothing)."""
        self.rings.scan()
        self._scanned = True  # sample() in the same tick reuses it
        return frozenset(self.rings.rings)

    def remove_dead_rings(self) -> None:
        """Unlink the rings of our own dead trainers that the last listing found (a process
        killed before its exit handler ran leaves its ring behind)."""
        self.rings.remove_leftovers()

    def attach(self, pid: int) -> None:
        """Read `pid`'s job from the next sample on (its ring may appear later, e.g. under
        `run`); a job whose processes have all exited makes way for it."""
        for target in [t for t in self._targets if t != pid and self._ended(t)]:
            self.detach(target)
        self.rings.look_inside(pid)
        if pid not in self._targets:
            self._targets.append(pid)
            self._members[pid] = []
        if pid not in self._windows:
            self._windows[pid] = _RingWindow(pid, self.rings, self.window, self.verdict_of)

    def detach(self, pid: int) -> None:
        """Stop reading the job `pid` belongs to (as its target or one of its ranks)."""
        target = next((t for t in self._targets if t == pid or pid in self._members[t]), None)
        if target is None:
            return
        self._targets.remove(target)
        dropped = [target, *self._members.pop(target)]
        for member in dropped:
            window = self._windows.pop(member, None)
            if window is not None:
                window.close()
        self._judged = {key for key in self._judged if key[0] not in dropped}  # may rejoin

    def _ended(self, target: int) -> bool:
        """Whether every process of `target`'s job has exited (as of the last sample)."""
        return not any(self._windows[pid].alive for pid in (target, *self._members[target]))

    def sample(self) -> tuple[AttachState, ...]:
        """One state per trainer: each target, then its job's other ranks by rank."""
        scanned, self._scanned = self._scanned, False
        if self._targets:
            if not scanned:
                self.rings.scan()
            self._find_job_members()
        states = []
        for target in self._targets:
            members = [self._windows[pid].sample(target) for pid in self._members[target]]
            own = self._windows[target].sample(target)
            if not members or own.steps or own.error is None:  # a ring-less launcher hides
                states.append(own)
            states += sorted(members, key=_rank_order)
        return tuple(states)

    def close(self) -> None:
        """Release every ring's file descriptor and the directory's watch."""
        for window in self._windows.values():
            window.close()
        self.rings.close()

    def _find_job_members(self) -> None:
        """Place every trusted ring not yet judged: a member of an attached job, or not."""
        listed = list(self.rings.rings)
        self._judged = {key for key in self._judged if key[0] in listed}
        for pid in listed:
            if pid in self._windows:
                continue
            ticks = self.rings.start_ticks(pid)
            if ticks is None or (pid, ticks) in self._judged:
                continue
            target, final = self._job_of(pid)
            if final:
                self._judged.add((pid, ticks))
            if target is not None:
                self._members[target].append(pid)
                self._windows[pid] = _RingWindow(pid, self.rings, self.window, self.verdict_of)

    def _job_of(self, pid: int) -> tuple[int | None, bool]:
        """The attached target whose job `pid` belongs to (or None), and whether that is
        final (a rank's world size or a target's may not be written yet)."""
        ancestors = _ancestors(pid)
        for target in self._targets:
            if target in ancestors:
                return target, True
        if not ancestors:
            return None, True
        siblings = [t for t in self._targets if _parent(t) == ancestors[0]]
        if not siblings:
            return None, True
        world = _meta_world_size(self.rings, pid)
        if world is None:
            return None, False
        undecided = False
        for target in siblings:
            ring = self._windows[target]
            if world > 1 and ring.config.world_size == world:
                return target, True
            undecided = undecided or not ring.meta_seen
        return None, not undecided


def _rank_order(state: AttachState) -> tuple[int, int]:
    rank = state.config.rank
    return (rank if rank is not None else 1 << 30, state.pid)


def _parent(pid: int) -> int | None:
    """The parent PID, or None when the process is gone."""
    stat = parse_stat(read_bytes(f"/proc/{pid}/stat") or b"")
    return stat.ppid if stat is not None else None


def _ancestors(pid: int, limit: int = 16) -> list[int]:
    """`pid`'s parent, grandparent, ... up to (not including) init."""
    chain: list[int] = []
    parent = _parent(pid)
    while parent and parent != 1 and len(chain) < limit:
        chain.append(parent)
        parent = _parent(parent)
    return chain


def _meta_world_size(rings: RingDirectory, pid: int) -> int | None:
    """The world size `pid`'s trusted ring annotated (from WORLD_SIZE), or None."""
    try:
        reader = rings.open(pid)
    except RingError:
        return None
    try:
        value = reader.read_meta().get("world_size")
    except RingError:
        return None
    finally:
        reader.close()
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _RingWindow:
    """One attached trainer's ring across ticks: its reader and the window of its newest
    steps (loaders that do not train left out)."""

    def __init__(self, pid: int, rings: RingDirectory, window: int,
                 verdict_of: VerdictOf | None = None) -> None:
        self.pid = pid
        self.rings = rings
        self.verdict_of = verdict_of
        self.reader: RingReader | None = None
        # the newest records' steps and, side by side, the loader of each (0: none)
        self.steps: deque[StepRecord] = deque(maxlen=window)
        self.loaders: deque[int] = deque(maxlen=window)
        self.held: dict[int, int] = {}  # loader -> its steps in the window
        self.train_loaders: set[int] = set()
        self.alive = True
        self.error: str | None = None
        self.config = TrainerConfig()
        self.meta_seen = False
        self._meta: dict[str, object] | None = None  # the metadata `config` was built from
        self.activity: tuple[Activity, float] | None = None  # activity_of() the metadata

    def sample(self, job: int) -> AttachState:
        """The window now, as a member of the job attached by PID `job`."""
        if self.alive:
            self._read()
        train = self.train_loaders
        if not train or all(not loader or loader in train for loader in self.held):
            steps = tuple(self.steps)  # every step trains (most loops): no step to look at
        else:
            steps = tuple(s for loader, s in zip(self.loaders, self.steps, strict=True)
                          if not loader or loader in train)
        dropped = self.reader.dropped if self.reader is not None else 0
        activity, activity_s = self.activity or (None, None)
        return AttachState(self.pid, self.config, dropped, steps, alive=self.alive,
                           error=self.error, job=job, activity=activity, activity_s=activity_s)

    def _read(self) -> None:
        ticks = self.rings.start_ticks(self.pid)  # no /proc read while its ring's process runs
        try:
            if self.reader is None:
                if ticks is None:
                    self.alive, self.error = False, f"no process with PID {self.pid}"
                    return
                self.reader = self.rings.open(self.pid)  # checked against the live process
            # Of more records than the window holds, the older would leave it at once; a
            # loader that does not train (a long evaluation's) leaves its records out of it,
            # so the training steps before them are read back to fill it.
            records = self.reader.read_new(newest=self.steps.maxlen, kept=_kept_in_window)
            meta = self.reader.read_meta()  # the same object until the trainer writes anew
            sites = meta.get(ring_format.META_SITES)  # after the records: it names their sites
            for raw in records:
                self._add(raw, sites if isinstance(sites, dict) else None)
            if meta is not self._meta:
                self.config = config_from_meta(meta)
                self._meta = meta
            self.meta_seen = self.reader.meta_written  # an empty area may be filled soon
            self.error = probe_status(meta)  # what a probe that closed no step yet saw
            self.activity = activity_of(meta, time.monotonic_ns())
        except RingError as exc:  # shown in the pane: why there is no ring to read
            self.error = str(exc)
        if self.reader is not None and ticks != self.reader.header.start_ticks:
            self.alive = False  # the file stays readable through our descriptor: all read
            self.close()

    def _add(self, raw: RawRecord, sites: dict[str, object] | None = None) -> None:
        if raw.flags & ring_format.F_OTHER:
            return
        loader, loaders, held = raw.loader, self.loaders, self.held
        if len(loaders) == loaders.maxlen:  # the oldest step leaves the window
            left = loaders[0]
            held[left] -= 1
            if not held[left]:
                del held[left]
        self.steps.append(to_step(raw, self.verdict_of, sites))
        loaders.append(loader)
        held[loader] = held.get(loader, 0) + 1
        trains = raw.flags & ring_format.F_OPTIMIZER and loader
        if trains and loader not in self.train_loaders:
            self._add_train_loader(loader)

    def _add_train_loader(self, loader: int) -> None:
        """Note a loader whose steps train, forgetting those with no step left in the window
        (a loader per epoch would pile up for as long as the trainer runs)."""
        self.train_loaders = {kept for kept in self.train_loaders if kept in self.held}
        self.train_loaders.add(loader)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None


def _kept_in_window(raw: RawRecord) -> bool:
    """Whether a record's step enters the window (_RingWindow._add): not another loader's."""
    return not raw.flags & ring_format.F_OTHER


def to_step(raw: RawRecord, verdict_of: VerdictOf | None = None,
            sites: dict[str, object] | None = None) -> StepRecord:
    """A ring record as a StepRecord, its fields taken by name (-1 becomes None), classified
    by `verdict_of` where given (else "unknown", for the sampler's Derivation); its sampled
    sites named from the metadata's table `sites` (an id it lacks: None)."""
    flags, duration = raw.flags, raw.duration_ns
    measured = _raw_measured(raw)
    measured = tuple(map(_UNMEASURED.get, measured, measured))  # -1 (the reader's floor): None
    host = _UNMEASURED.get(raw.host_ns, raw.host_ns)
    if verdict_of is None:
        verdict = "unknown"
    else:
        data, h2d, gpu, gpu_gap = _verdict_fields(measured)
        verdict = verdict_of(duration, data, h2d, gpu, gpu_gap, host)
    values: tuple[Any, ...] = (
        raw.step, duration, *measured, raw.epoch, bool(flags & ring_format.F_WARMUP), verdict,
        raw.start_ns + duration, bool(flags & ring_format.F_IMPLICIT),
        bool(flags & ring_format.F_INPUT_OUTSIDE_MODEL),
        host, _UNMEASURED.get(raw.sync_ns, raw.sync_ns),
        bool(flags & ring_format.F_AT_BACKWARD), raw.samples,
        site_name(sites, raw.host_site), raw.host_site_samples,
        site_name(sites, raw.data_site), raw.data_site_samples,
        raw.part_samples & ring_format.PART_MASK, raw.part_samples >> 32)
    return StepRecord(*values)


def site_name(sites: dict[str, object] | None, site: int) -> str | None:
    """A sampled site's "function (file:line)" from the metadata's table (printable,
    bounded), or None: no site, or one the table does not hold."""
    text = sites.get(str(site)) if sites and site != ring_format.NO_SITE else None
    return printable(text[:200]) if isinstance(text, str) else None


# The measured fields by name: where they sit in a RawRecord; StepRecord's fields in order,
# so to_step passes them by position (a dict of them by name cost more than the record).
_RAW_MEASURED = slice(RawRecord._fields.index(ring_format.MEASURED_FIELDS[0]),
                      RawRecord._fields.index(ring_format.MEASURED_FIELDS[-1]) + 1)
assert RawRecord._fields[_RAW_MEASURED] == ring_format.MEASURED_FIELDS
_raw_measured = itemgetter(_RAW_MEASURED)
_UNMEASURED: dict[int, None] = {ring_format.NONE: None}
_verdict_fields = itemgetter(*map(ring_format.MEASURED_FIELDS.index,
                                  ("data_ns", "h2d_ns", "gpu_ns", "gpu_gap_ns")))
assert tuple(f.name for f in fields(StepRecord))[:len(ring_format.MEASURED_FIELDS) + 18] == (
    "step", "duration_ns", *ring_format.MEASURED_FIELDS, "epoch", "warmup", "verdict", "end_ns",
    "implicit", "input_outside_model", "host_ns", "sync_ns", "at_backward",
    *ring_format.SAMPLED_FIELDS, "host_samples", "data_samples")


def probe_status(meta: dict[str, object]) -> str | None:
    """The probe's word on why no step closed yet (printable, bounded), or None."""
    status = meta.get(ring_format.META_STATUS)
    return printable(status[:200]) if isinstance(status, str) else None


def activity_of(meta: dict[str, object], now_ns: int) -> tuple[Activity, float] | None:
    """What the probe says the trainer does outside its steps (evaluating, saving) and for
    how many seconds by `now_ns` (CLOCK_MONOTONIC, the probe's clock); None while it trains."""
    activity, since = meta.get(META_ACTIVITY), meta.get(META_SINCE)
    if activity not in ACTIVITIES or not isinstance(since, int) or isinstance(since, bool):
        return None
    return activity, max(0.0, (now_ns - since) / 1e9)  # type: ignore[return-value]


def config_from_meta(meta: dict[str, object]) -> TrainerConfig:
    """The annotate() facts as a TrainerConfig; wrongly typed values are dropped, others kept.

    Keys and strings are the trainer's own words: cut to length and escaped.
    """
    known: dict[str, object] = {}
    extra = []
    for key, value in meta.items():
        if key in _NOT_CONFIG:
            continue
        kind = CONFIG_FIELDS.get(key)
        if kind is None:
            if isinstance(value, (str, int, float, bool)) or value is None:
                extra.append((printable(str(key)[:64]), printable(str(value)[:200])))
        elif isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
            known[key] = printable(value[:200]) if isinstance(value, str) else value
    return TrainerConfig(**known, extra=tuple(sorted(extra)))  # type: ignore[arg-type]


_NOT_CONFIG = frozenset((ring_format.META_STATUS, ring_format.META_SAMPLER, META_ACTIVITY,
                         META_SINCE))  # the probe's own


def check_attachable(pid: int, directory: str | None = None,
                     accept_pending: bool = False) -> str | None:
    """Why `--attach PID` must fail (one line), or None when PID has a ring we trust (or is
    a launcher whose children do). `accept_pending`: a process running under the probe with
    no ring yet is attachable too (its ring, or its children's, may appear: a parent of
    spawned trainers), its state saying why it shows no steps."""
    if ring_format.start_ticks(pid) is None:
        return f"no process with PID {pid}"
    owner, me = process_owner(pid), os.getuid()
    if me != 0 and owner is not None and owner != me:
        return f"PID {pid} belongs to another user (uid {owner}); only root attaches to it"
    rings = RingDirectory(directory)
    rings.look_inside(pid)  # a container's trainer whose ring is in its private /dev/shm
    rings.scan()
    rings.close()  # what it found stays; the private /dev/shm's fd is let go
    if pid in rings.rings:
        return None
    if pid in rings.refusals:
        return rings.refusals[pid]
    if _has_probed_descendant(pid, rings):
        return None  # a launcher (torchrun, a shell): its ranks are attached
    if _runs_under_probe(pid):
        return (None if accept_pending
                else f"PID {pid} runs under the probe but has no ring yet; {RING_APPEARS}")
    return f"PID {pid} has no probe ring; {HOW_TO_START}"


def _runs_under_probe(pid: int) -> bool:
    """Whether `pid` was started under the probe (`gputop run` or `python -m gputop.probe`)."""
    environ = (read_bytes(f"/proc/{pid}/environ") or b"").split(b"\0")
    if b"GPUTOP_PROBE=1" in environ:
        return True
    argv = (read_bytes(f"/proc/{pid}/cmdline") or b"").split(b"\0")
    return any(pair == (b"-m", b"gputop.probe") for pair in pairwise(argv))


def _has_probed_descendant(pid: int, rings: RingDirectory) -> bool:
    """Whether a process below `pid` has a ring that passed the checks of the last scan."""
    return any(pid in _ancestors(ring_pid) for ring_pid in rings.rings)
