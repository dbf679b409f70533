"""Every piece of Textual's private API that gputop/tui/textual_adapter.py declares it relies
on is still there in the installed Textual, as the adapter uses it: an upgrade that moves
one fails here, naming it, instead of somewhere in a frame or a key press."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator
from types import CodeType, FunctionType

import pytest
from textual.app import App

from tests.helpers.textual_reliances import MUST_CHANGE, declared
from tests.helpers.tui import sync


def resolve(path: str) -> object:
    """The object at dotted `path` in the installed Textual; fails naming the first part of
    the path that is gone."""
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:end]))
        except ModuleNotFoundError:
            continue
        break
    else:
        pytest.fail(f"{parts[0]} is not installed: {MUST_CHANGE}")
    for depth in range(end + 1, len(parts) + 1):
        try:
            found = getattr(found, parts[depth - 1])
        except AttributeError:
            pytest.fail(f"{'.'.join(parts[:depth])} no longer exists: {MUST_CHANGE}")
    return found


def _code_names(code: CodeType) -> Iterator[str]:
    """The global and attribute names `code` uses, its nested functions' included."""
    yield from code.co_names
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            yield from _code_names(constant)


@pytest.mark.parametrize(("path", "parameters"), declared("CALLABLES"),
                         ids=[path for path, _ in declared("CALLABLES")])
def test_each_callable_is_there_with_its_parameters(
        path: str, parameters: tuple[str, ...] | None) -> None:
    found = resolve(path)
    assert callable(found), f"{path} is no longer callable: {MUST_CHANGE}"
    if parameters is None:
        return
    now = tuple(inspect.signature(found).parameters)
    assert now == tuple(parameters), (
        f"{path} now takes ({', '.join(now)}), not ({', '.join(parameters)}): {MUST_CHANGE}")


@pytest.mark.parametrize("path", declared("PROPERTIES"))
def test_each_property_is_there(path: str) -> None:
    assert isinstance(resolve(path), property), f"{path} is no longer a property: {MUST_CHANGE}"


@pytest.mark.parametrize(("path", "name"), declared("CODE_NAMES"),
                         ids=[f"{path}-{name}" for path, name in declared("CODE_NAMES")])
def test_each_function_still_uses_what_the_adapter_counts_on(path: str, name: str) -> None:
    function = resolve(path)
    assert isinstance(function, FunctionType), f"{path} is no longer a function: {MUST_CHANGE}"
    assert name in set(_code_names(function.__code__)), (
        f"{path} no longer uses {name}: {MUST_CHANGE}")


@pytest.fixture(scope="module")
def live() -> dict[str, object]:
    """A bare app's objects, by the dotted path of their Textual class, once it has run."""
    app: App[None] = App()
    objects: dict[str, object] = {"textual.app.App": app}

    async def run() -> None:
        async with app.run_test():
            objects["textual.screen.Screen"] = app.screen

    sync(run)()
    return objects


@pytest.mark.parametrize(("path", "attribute"), declared("ATTRIBUTES"),
                         ids=[f"{path}-{attribute}" for path, attribute in declared("ATTRIBUTES")])
def test_each_attribute_is_on_a_live_object(
        live: dict[str, object], path: str, attribute: str) -> None:
    cls = resolve(path)
    assert isinstance(cls, type), f"{path} is no longer a class: {MUST_CHANGE}"
    instance = live[path] if path in live else cls()
    assert isinstance(instance, cls)
    assert hasattr(instance, attribute), (
        f"{path} objects no longer have {attribute}: {MUST_CHANGE}")


@sync
async def test_visible_widgets_stay_one_dict_until_the_screen_is_arranged_again() -> None:
    """gputop's paint judges each pane once per arrangement, by the dict's identity."""
    from gputop.tui.textual_adapter import visible_widgets

    app: App[None] = App()
    async with app.run_test(size=(80, 24)) as pilot:
        before = visible_widgets(app.screen)
        assert visible_widgets(app.screen) is before, (
            f"the compositor's visible_widgets is built anew on each read: {MUST_CHANGE}")
        await pilot.resize_terminal(100, 30)
        await pilot.pause()
        assert visible_widgets(app.screen) is not before, (
            f"the compositor's visible_widgets outlives a new arrangement: {MUST_CHANGE}")
