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
from gputop.probe.activity import Activity
from gputop.probe.steps import BACKWARD, FORWARD, HOST, INPUT, NONE, OPTIMIZER, Recorder

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
    forward = _ModelForward(rec, torch.Tensor)
    activity = _watch_activity(rec, torch, forward)
    _hook_optimizers(rec, torch, _patch_backward(rec, torch, activity), forward)
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
        try:
            lid, batch = self._gputop
        except AttributeError:  # an iterator made before the patch, or one without __dict__
            lid, batch = loader_id(self), NONE
        rec.fetch_begin(lid)
        try:
            item = orig_next(self)
        except BaseException:
            rec.fetch_stop()
            raise
        rec.fetch_end(lid, batch)
        return item

    _replace(loader_cls, "__iter__", __iter__)
    _replace(iter_cls, "__next__", __next__)


def _patch_backward(rec: Recorder, torch: Any, activity: Activity) -> Callable[[], None]:
    """Time backward() as a phase (a backward also ends an evaluation: `activity`); returns
    how to put the original back."""
    orig = torch.autograd.backward

    def backward(*args: Any, **kwargs: Any) -> Any:
        if rec.times_own_training:  # the program's phase("backward"/"optimizer") say it
            return orig(*args, **kwargs)
        activity.backward()
        prev, rec.phase_now = rec.phase_now, BACKWARD
        t0 = perf_counter_ns()
        try:
            return orig(*args, **kwargs)
        finally:
            ns = perf_counter_ns() - t0
            rec.phase_now = prev
            rec.auto_phase(BACKWARD, ns)

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

    # when the step began; forward + backward time of the open step then; the phase before it
    started = [0, 0, HOST]
    acc = rec.acc
    seen: set[int] = set()
    handles: list[Any] = []

    def pre(opt: Any, args: Any, kwargs: Any) -> None:
        started[1] = acc[FORWARD] + acc[BACKWARD]
        started[2], rec.phase_now = rec.phase_now, OPTIMIZER
        started[0] = rec.optimizer_t0 = perf_counter_ns()

    def post(opt: Any, args: Any, kwargs: Any) -> None:
        if not rec.times_own_training:
            ns = perf_counter_ns() - started[0]
            inner = acc[FORWARD] + acc[BACKWARD] - started[1]  # a closure's, inside the step
            rec.phase_now = HOST if started[2] == INPUT else started[2]
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

    A step whose batch size no loader gave takes it from the first dimension of its outermost
    call's first tensor argument (positional, else keyword): nanoGPT's `model(X, Y)`.
    """

    def __init__(self, rec: Recorder, tensor: Any = object) -> None:
        self.rec = rec
        self.tensor = tensor  # torch.Tensor
        self.module_hooks = importlib.import_module("torch.nn.modules.module")
        self.depth = 0  # calls of found modules in progress (a found module inside another)
        self.t0 = 0
        self.params: set[int] = set()  # ids of the stepped parameters
        self.found: set[int] = set()  # ids of the modules hooked
        self.left = 0  # optimizer steps before the search ends
        self.finder: Any = None  # the global hook's handle while searching
        self.searching = False
        self.prev = HOST  # the training thread's phase before the outermost call

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
        handles = [self._pre_hook(module), self._post_hook(module)]
        _undo.extend(handle.remove for handle in handles)
        self.pre(module, args)  # torch listed this call's pre-hooks already; its post-hook runs

    def _steps(self, module: Any) -> bool:
        params = self.params
        try:
            return any(id(p) in params for p in module.parameters())
        except Exception:  # a module whose parameters() fails is not ours to judge
            return False

    def _pre_hook(self, module: Any) -> Any:
        """The forward pre-hook, given the call's keyword arguments too where torch can."""
        try:
            return module.register_forward_pre_hook(self.pre, with_kwargs=True)
        except TypeError:
            return module.register_forward_pre_hook(self.pre)

    def _post_hook(self, module: Any) -> Any:
        """The forward hook, run even when forward raises (torch 2.1+), so depth stays true."""
        try:
            return module.register_forward_hook(self.post, always_call=True)
        except TypeError:
            return module.register_forward_hook(self.post)

    def pre(self, module: Any, args: Any, kwargs: Any = None) -> None:
        if not self.depth:
            rec = self.rec
            prev = rec.phase_now
            self.prev = HOST if prev == INPUT else prev  # the input ends at the forward
            t = self.t0 = perf_counter_ns()
            if rec.forward_begin(t):  # no loader gave the step's batch size: its input does
                first = args[0] if args else self._first_tensor(kwargs)
                if isinstance(first, self.tensor):
                    self._batch_of(first)
            rec.phase_now = FORWARD
        self.depth += 1

    def _first_tensor(self, kwargs: Any) -> Any:
        """The first tensor among a call's keyword arguments, or None."""
        tensor = self.tensor
        return next((v for v in (kwargs or {}).values() if isinstance(v, tensor)), None)

    def _batch_of(self, first: Any) -> None:
        """The open step's batch size: the first dimension of its forward's first tensor."""
        try:
            size = first.shape[0] if first.ndim else None
        except Exception:  # a tensor without sizes (a nested one): the size stays unknown
            return
        if type(size) is int:  # not a symbolic size (a compiled model's tracing)
            self.rec.forward_batch(size)

    def post(self, module: Any, args: Any, output: Any) -> None:
        if self.depth:
            self.depth -= 1
            if not self.depth:
                self.rec.forward_done(perf_counter_ns() - self.t0)
                self.rec.phase_now = self.prev


def _watch_activity(rec: Recorder, torch: Any, forward: _ModelForward) -> Activity:
    """Note evaluation (the stepped model's forwards that do not train) and torch.save in
    the metadata; see activity.py. The backward wrapper tells it of each backward (a program
    that times its own phases ends an evaluation at its next training forward instead)."""
    activity = Activity(rec, torch.is_grad_enabled)
    forward.pre = activity.forward_pre(forward.pre)  # type: ignore[method-assign]
    _replace(torch, "save", activity.saving(torch.save))
    return activity


def _note_device(rec: Recorder, opt: Any) -> None:
    """The device of the optimizer's first parameter."""
    try:
        device = str(opt.param_groups[0]["params"][0].device)
    except (AttributeError, IndexError, KeyError, TypeError):
        return
    if device == "cpu":
        rec.sync_known = True  # CPU ops run in the calling thread: nothing waits on a device
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
    _time_syncs(rec, torch)


def _time_syncs(rec: Recorder, torch: Any) -> None:
    """Time the program's waits on the device in its host time and input (sync_ns): calls of
    torch.cuda.synchronize, and .item(), .cpu(), .tolist() of CUDA tensors. Waits inside the
    model's phases are those phases' time."""

    def timed(wait: Callable[..., Any]) -> Callable[..., Any]:
        def synchronize(*args: Any, **kwargs: Any) -> Any:
            if not rec.open or rec.phase_now not in (HOST, INPUT):
                return wait(*args, **kwargs)
            t0 = perf_counter_ns()
            try:
                return wait(*args, **kwargs)
            finally:
                rec.sync += perf_counter_ns() - t0

        return synchronize

    def timed_method(wait: Callable[..., Any]) -> Callable[..., Any]:
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not rec.open or rec.phase_now not in (HOST, INPUT) or not self.is_cuda:
                return wait(self, *args, **kwargs)
            t0 = perf_counter_ns()
            try:
                return wait(self, *args, **kwargs)
            finally:
                rec.sync += perf_counter_ns() - t0

        return method

    _replace(torch.cuda, "synchronize", timed(torch.cuda.synchronize))
    for name in ("item", "cpu", "tolist"):
        _undo.append(_wrap_method(torch.Tensor, name, timed_method))
    rec.sync_known = True


def _wrap_method(cls: type, name: str, wrap: Callable[[Any], Any]) -> Callable[[], None]:
    """Replace cls.name (maybe inherited) by wrap(it); returns how to put it back."""
    own, old = name in cls.__dict__, getattr(cls, name)
    setattr(cls, name, wrap(old))

    def restore() -> None:
        if own:
            setattr(cls, name, old)
        else:
            delattr(cls, name)

    return restore
