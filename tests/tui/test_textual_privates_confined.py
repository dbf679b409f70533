"""Textual's private API is touched in gputop/tui/textual_adapter.py alone, and only where
the adapter declares it: no other module imports a private Textual module or touches a
private name the adapter hides, and the adapter touches none it does not declare."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.helpers.textual_reliances import (
    ADAPTER,
    declared_paths,
    declared_private_names,
    is_private,
)

PACKAGE = ADAPTER.parents[2] / "gputop"
BY_NAME = {"getattr", "setattr", "hasattr", "delattr"}


def private_textual_imports(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Each import of a private Textual module or name: its line and what it imports."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in imported:
            parts = name.split(".")
            if parts[0] == "textual" and any(is_private(part) for part in parts):
                yield node.lineno, name


def private_names_touched(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Each private name read, set or overridden: an attribute, a `getattr`-like call's
    string, a method."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            yield node.lineno, node.attr
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in BY_NAME and len(node.args) > 1
              and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and is_private(node.args[1].value)):
            yield node.lineno, node.args[1].value
        elif isinstance(node, ast.ClassDef):
            yield from ((method.lineno, method.name) for method in node.body
                        if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and is_private(method.name))


def _tree(path: Path) -> ast.AST:
    return ast.parse(path.read_text(), filename=str(path))


def _offences(path: Path, hidden: set[str]) -> list[str]:
    """What `path` does that only the adapter may do."""
    where = path.relative_to(PACKAGE.parent)
    tree = _tree(path)
    return [*(f"{where}:{line} imports {name}" for line, name in private_textual_imports(tree)),
            *(f"{where}:{line} touches {name}" for line, name in private_names_touched(tree)
              if name in hidden)]


def test_no_module_but_the_adapter_touches_textuals_private_api() -> None:
    hidden = declared_private_names()
    offences = [offence for path in sorted(PACKAGE.rglob("*.py")) if path != ADAPTER
                for offence in _offences(path, hidden)]
    assert not offences, (
        "Textual's private API is for gputop/tui/textual_adapter.py alone (add what is "
        "needed there, declared):\n" + "\n".join(offences))


def test_the_adapter_declares_every_private_import_it_makes() -> None:
    paths = declared_paths()
    undeclared = [f"line {line}: {name}" for line, name in private_textual_imports(_tree(ADAPTER))
                  if not any(path == name or path.startswith(f"{name}.") for path in paths)]
    assert not undeclared, f"the adapter imports undeclared private Textual names: {undeclared}"


def test_the_adapter_declares_every_private_name_it_touches() -> None:
    declared = declared_private_names()
    undeclared = [f"line {line}: {name}" for line, name in private_names_touched(_tree(ADAPTER))
                  if name not in declared]
    assert not undeclared, f"the adapter touches undeclared private names: {undeclared}"


def test_the_scan_finds_what_paint_and_the_driver_once_did() -> None:
    """Their code before the adapter, as the scan reads it."""
    before = ast.parse(
        "from textual._compositor import CompositorUpdate\n"
        "from textual.drivers._writer_thread import WriterThread\n"
        "visible = screen._compositor.visible_widgets\n"
        "started = self._writer_thread\n"
        "deadline = getattr(parser, '_timeout_time', None)\n"
        "class Driver(LinuxDriver):\n"
        "    def _get_terminal_size(self): ...\n")
    hidden = declared_private_names()
    assert [name for _, name in private_textual_imports(before)] == [
        "textual._compositor.CompositorUpdate", "textual.drivers._writer_thread.WriterThread"]
    assert sorted(name for _, name in private_names_touched(before) if name in hidden) == [
        "_compositor", "_get_terminal_size", "_timeout_time", "_writer_thread"]


def test_the_scan_finds_what_the_app_once_did() -> None:
    """The app's code before the adapter, as the scan reads it."""
    before = ast.parse(
        "closing = self._closing\n"
        "showing = bool(self._screen_stack)\n"
        "self._handle_exception(error)\n"
        "self._bindings.bind('g', 'sort')\n")
    hidden = declared_private_names()
    assert sorted(name for _, name in private_names_touched(before) if name in hidden) == [
        "_bindings", "_closing", "_handle_exception", "_screen_stack"]
