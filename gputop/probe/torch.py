"""The torch integration: DataLoader iterators, backward, optimizer steps, the forward of
the model the optimizers step, CUDA events.

Used only after the program itself imported torch (torch is imported inside install(),
so even importing this module costs nothing). Every patch forwards to the original and
records around it; none changes arguments, results or the order of work.

A program that steps no optimizer (it updates its parameters by hand) gets its steps from
backward(): see steps.py, F_AT_BACKWARD.

Phases nest as the program runs them: an optimizer step that runs a closure (LBFGS,
Lightning's training step) holds that closure's forward and backward, and they count as
forward and backward; the optimizer phase is the step's time without them.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

from gputop.probe import loader_facts, loader_id
from gputop.probe.steps import BACKWARD, FORWARD, NONE, Recorder

SEARCH_STEPS = 2  # optimizer steps after a new optimizer's first during which modules are found

_installed: list[Recorder] = []
_undo: list[Callable[[], None]] = []


def install(rec: Recorder) -> None:
    """Patch torch once per process; later calls do nothing."""
    if _installed:
        return
    import torch

    _installed.append(rec)
    _patch_loaders(rec, torch)
    _hook_optimizers(rec, torch, _patch_backward(rec, torch), _ModelForward(rec))
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


def _hook_optimizers(rec: Recorder, torch: Any, restore_backward: Callable[[], None],
                     forward: _ModelForward) -> None:
    """Time optimizer steps (without the forward and backward of a closure they run), note
    each optimizer's device, and find the model it steps.

    A program that times its own backward or optimizer phase needs neither timing: once
    its first optimizer step is noted, the pre-hook and the backward wrapper step aside.
    (The post-hook stays, doing two checks: torch iterates its hooks while calling them,
    so it cannot remove itself.)
    """
    hooks = importlib.import_module("torch.optim.optimizer")

    started = [0, 0]  # when the step began; forward + backward time of the open step then
    acc = rec.acc
    seen: set[int] = set()
    handles: list[Any] = []

    def pre(opt: Any, args: Any, kwargs: Any) -> None:
        started[1] = acc[FORWARD] + acc[BACKWARD]
        started[0] = perf_counter_ns()

    def post(opt: Any, args: Any, kwargs: Any) -> None:
        if not rec.times_own_training:
            ns = perf_counter_ns() - started[0]
            inner = acc[FORWARD] + acc[BACKWARD] - started[1]  # a closure's, inside the step
            rec.auto_optimizer_done(ns - inner if 0 < inner < ns else ns)
        if forward.searching:
            forward.stepped()
        if id(opt) not in seen:
            seen.add(id(opt))
            rec.backward_closes = False  # steps close at optimizer steps from now on
            _note_device(rec, opt)
            _maybe_time_gpu(rec, torch)
            if rec.times_own_training:
                handles[0].remove()  # the pre-hook: its dict is not being iterated now
                restore_backward()
            elif not rec.manual:
                forward.search(opt)

    handles += (hooks.register_optimizer_step_pre_hook(pre),
                hooks.register_optimizer_step_post_hook(post))
    _undo.extend(handle.remove for handle in handles)


class _ModelForward:
    """Times the forward of the model the optimizers step: the outermost calls of the modules
    that hold their parameters (a DDP wrapper, a compiled model, or the model itself).

    They are found by a global forward pre-hook that lives from a new optimizer's first step
    for SEARCH_STEPS more steps (whole steps of module calls), then goes: every module call
    takes torch's slower hooked path while it lives. Only the modules found keep hooks.
    """

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.module_hooks = importlib.import_module("torch.nn.modules.module")
        self.depth = 0  # calls of found modules in progress (a found module inside another)
        self.t0 = 0
        self.params: set[int] = set()  # ids of the stepped parameters
        self.found: set[int] = set()  # ids of the modules hooked
        self.left = 0  # optimizer steps before the search ends
        self.finder: Any = None  # the global hook's handle while searching
        self.searching = False

    def search(self, opt: Any) -> None:
        """`opt` stepped for the first time: look for the modules holding its parameters."""
        try:
            for group in opt.param_groups:
                self.params.update(id(p) for p in group["params"])
        except (AttributeError, KeyError, TypeError):
            return
        self.left = SEARCH_STEPS
        if self.finder is None:
            self.finder = self.module_hooks.register_module_forward_pre_hook(self._find)
            _undo.append(self._stop)
        self.searching = True

    def stepped(self) -> None:
        """An optimizer step ended while searching; the search ends after SEARCH_STEPS."""
        self.left -= 1
        if self.left <= 0:
            self._stop()

    def _stop(self) -> None:
        self.searching = False
        if self.finder is not None:
            self.finder.remove()
            self.finder = None

    def _find(self, module: Any, args: Any) -> None:
        """The global pre-hook: hook `module` when it is outermost and holds stepped params."""
        if self.depth or id(module) in self.found or not self._steps(module):
            return
        self.found.add(id(module))
        handles = [module.register_forward_pre_hook(self.pre), self._post_hook(module)]
        _undo.extend(handle.remove for handle in handles)
        self.pre(module, args)  # torch listed this call's pre-hooks already; its post-hook runs

    def _steps(self, module: Any) -> bool:
        params = self.params
        try:
            return any(id(p) in params for p in module.parameters())
        except Exception:  # a module whose parameters() fails is not ours to judge
            return False

    def _post_hook(self, module: Any) -> Any:
        """The forward hook, run even when forward raises (torch 2.1+), so depth stays true."""
        try:
            return module.register_forward_hook(self.post, always_call=True)
        except TypeError:
            return module.register_forward_hook(self.post)

    def pre(self, module: Any, args: Any) -> None:
        if not self.depth:
            t = self.t0 = perf_counter_ns()
            self.rec.forward_begin(t)
        self.depth += 1

    def post(self, module: Any, args: Any, output: Any) -> None:
        if self.depth:
            self.depth -= 1
            if not self.depth:
                self.rec.forward_done(perf_counter_ns() - self.t0)


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
