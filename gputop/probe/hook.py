"""Installs the torch integration once the program imports torch, and not before."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

from gputop.probe.steps import Recorder, warn


def watch_for_torch(rec: Recorder) -> None:
    """Patch torch now if it is loaded, else right after the program's `import torch`."""
    if "torch" in sys.modules:
        _install(rec)
        return
    sys.meta_path.insert(0, _TorchFinder(rec))


def _install(rec: Recorder) -> None:
    try:
        from gputop.probe import torch as probe_torch

        probe_torch.install(rec)
    except Exception as exc:  # a torch we do not understand must not stop the program
        warn(f"cannot hook torch ({type(exc).__name__}: {exc}); step timing from torch is off")


class _TorchFinder:
    """A meta-path finder that wraps torch's loader so the hook runs after torch executes."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.busy = False

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name != "torch" or self.busy:
            return None
        self.busy = True
        try:
            from importlib.util import find_spec

            spec = find_spec(name)
        finally:
            self.busy = False
        if spec is None or spec.loader is None:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec.loader = _AfterExec(spec.loader, lambda: _install(self.rec))  # type: ignore[assignment]
        return spec


class _AfterExec:
    """Delegates to torch's real loader and runs a callback once the module has executed."""

    def __init__(self, loader: Any, after: Any) -> None:
        self._loader = loader
        self._after = after

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._after()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)
