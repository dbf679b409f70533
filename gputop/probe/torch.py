"""The torch integration: DataLoader iterators, backward, optimizer steps, CUDA events.

Used only after the program itself imported torch (torch is imported inside install(),
so even importing this module costs nothing). Every patch forwards to the original and
records around it; none changes arguments, results or the order of work.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

from gputop.probe import loader_facts, loader_id
from gputop.probe.recorder import BACKWARD, NONE, Recorder

_installed: list[Recorder] = []
_undo: list[Callable[[], None]] = []


def install(rec: Recorder) -> None:
    """Patch torch once per process; later calls do nothing."""
    if _installed:
        return
    import torch

    _installed.append(rec)
    _patch_loaders(rec, torch)
    _hook_optimizers(rec, torch, _patch_backward(rec, torch))
    rec.annotate({"num_threads": torch.get_num_threads()}, start=False)


def uninstall() -> None:
    """Put torch back as it was (for benchmarks that compare with and without)."""
    while _undo:
        _undo.pop()()
    _installed.clear()


def _replace(owner: Any, name: str, new: Any) -> None:
    """Set owner.name = new, remembering how to undo it."""
    old = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    setattr(owner, name, new)
    _undo.append(lambda: setattr(owner, name, old))


def _patch_loaders(rec: Recorder, torch: Any) -> None:
    _dl = importlib.import_module("torch.utils.data.dataloader")
    loader_cls = _dl.DataLoader
    iter_cls = _dl._BaseDataLoaderIter
    orig_iter = loader_cls.__iter__
    orig_next = iter_cls.__next__

    def __iter__(self: Any) -> Any:
        it = orig_iter(self)
        lid = loader_id(self)
        facts = loader_facts(self)
        facts["num_threads"] = torch.get_num_threads()
        with contextlib.suppress(AttributeError):  # an iterator without a __dict__
            it._gputop = (lid, self.batch_size if isinstance(self.batch_size, int) else NONE)
        rec.iteration_begin(lid, facts)
        _maybe_time_gpu(rec, torch)
        return it

    def __next__(self: Any) -> Any:
        if rec.fetching:  # inside probe.watch(), which times this very next()
            return orig_next(self)
        rec.fetch_begin()
        try:
            item = orig_next(self)
        except BaseException:
            rec.fetch_stop()
            raise
        try:
            lid, batch = self._gputop
        except AttributeError:  # an iterator made before the patch, or one without __dict__
            lid, batch = loader_id(self), NONE
        rec.fetch_end(lid, batch)
        return item

    _replace(loader_cls, "__iter__", __iter__)
    _replace(iter_cls, "__next__", __next__)


def _patch_backward(rec: Recorder, torch: Any) -> Callable[[], None]:
    """Time backward() as a phase; returns how to put the original back."""
    orig = torch.autograd.backward

    def backward(*args: Any, **kwargs: Any) -> Any:
        if rec.times_own_training:  # the program's phase("backward"/"optimizer") say it
            return orig(*args, **kwargs)
        t0 = perf_counter_ns()
        try:
            return orig(*args, **kwargs)
        finally:
            rec.auto_phase(BACKWARD, perf_counter_ns() - t0)

    backward.__wrapped__ = orig  # type: ignore[attr-defined]
    backward.__doc__ = orig.__doc__
    _replace(torch.autograd, "backward", backward)

    def restore() -> None:
        if torch.autograd.backward is backward:
            torch.autograd.backward = orig

    return restore


def _hook_optimizers(rec: Recorder, torch: Any, restore_backward: Callable[[], None]) -> None:
    """Time optimizer steps and note each optimizer's device.

    A program that times its own backward or optimizer phase needs neither timing: once
    its first optimizer step is noted, the pre-hook and the backward wrapper step aside.
    (The post-hook stays, doing two checks: torch iterates its hooks while calling them,
    so it cannot remove itself.)
    """
    hooks = importlib.import_module("torch.optim.optimizer")

    started = [0]
    seen: set[int] = set()
    handles: list[Any] = []

    def pre(opt: Any, args: Any, kwargs: Any) -> None:
        started[0] = perf_counter_ns()

    def post(opt: Any, args: Any, kwargs: Any) -> None:
        if not rec.times_own_training:
            rec.auto_optimizer_done(perf_counter_ns() - started[0])
        if id(opt) not in seen:
            seen.add(id(opt))
            _note_device(rec, opt)
            _maybe_time_gpu(rec, torch)
            if rec.times_own_training:
                handles[0].remove()  # the pre-hook: its dict is not being iterated now
                restore_backward()

    handles += (hooks.register_optimizer_step_pre_hook(pre),
                hooks.register_optimizer_step_post_hook(post))
    _undo.extend(handle.remove for handle in handles)


def _note_device(rec: Recorder, opt: Any) -> None:
    """The device of the optimizer's first parameter."""
    try:
        device = str(opt.param_groups[0]["params"][0].device)
    except (AttributeError, IndexError, KeyError, TypeError):
        return
    rec.annotate({"device": device})


def _maybe_time_gpu(rec: Recorder, torch: Any) -> None:
    """Start GPU timing once the program itself has initialized CUDA (never before)."""
    if rec.gpu is not None or os.environ.get("GPUTOP_PROBE_GPU") == "0":
        return
    try:
        if not torch.cuda.is_initialized():
            return
    except Exception:
        return
    from gputop.probe.gpu_timing import GpuTimer

    rec.gpu = GpuTimer(lambda: torch.cuda.Event(enable_timing=True))
