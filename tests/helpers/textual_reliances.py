"""What gputop/tui/textual_adapter.py declares it relies on in Textual's private API, read
from its source as literals (a Textual that breaks the adapter's imports must still let the
tests name what broke)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

ADAPTER = Path(__file__).resolve().parents[2] / "gputop" / "tui" / "textual_adapter.py"
MUST_CHANGE = "gputop/tui/textual_adapter.py must change"


def declared(name: str) -> Any:
    """The literal the adapter assigns to `name` at module level."""
    for node in ast.parse(ADAPTER.read_text()).body:
        if (isinstance(node, ast.Assign)
                and any(isinstance(target, ast.Name) and target.id == name
                        for target in node.targets)):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{ADAPTER.name} declares no {name}")


def declared_paths() -> list[str]:
    """Every dotted path into Textual the adapter declares."""
    return [*(path for path, _ in declared("CALLABLES")), *declared("PROPERTIES"),
            *(cls for cls, _ in declared("ATTRIBUTES")),
            *(path for path, _ in declared("CODE_NAMES"))]


def is_private(name: str) -> bool:
    """Whether `name` is private by Python's convention (a dunder is not)."""
    return name.startswith("_") and not name.startswith("__")


def _members(path: str) -> list[str]:
    """The names in dotted `path` after its class (a class's name is capitalized)."""
    parts = path.split(".")
    classes = [at for at, part in enumerate(parts) if part.lstrip("_")[:1].isupper()]
    return parts[classes[0] + 1:] if classes else []


def declared_private_names() -> set[str]:
    """Every private method or attribute of a Textual object the adapter declares."""
    names = {member for path in declared_paths() for member in _members(path)}
    names |= {attribute for _, attribute in declared("ATTRIBUTES")}
    names |= {used for _, used in declared("CODE_NAMES")}
    return {name for name in names if is_private(name)}
