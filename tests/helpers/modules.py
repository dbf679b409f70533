"""Load a file as a module: the scripts under scripts/ and the stand-in pynvml tests run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_file(name: str, path: Path) -> ModuleType:
    """A fresh module `name` from `path`, registered in sys.modules (dataclasses need it)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
