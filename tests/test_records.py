"""gputop.core.model's records: dataclasses that compile less on import, and behave the same."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
from typing import Any

import pytest

from gputop.core import model

RECORDS = [cls for _, cls in inspect.getmembers(model, inspect.isclass)
           if dataclasses.is_dataclass(cls) and cls.__module__ == model.__name__]


def test_importing_the_model_has_dataclasses_compile_only_the_frozen_setters() -> None:
    """Counted where dataclasses compiles each generated method: __eq__, __hash__ and
    __repr__ are shared, so the import on the way to the first frame compiles half as much
    (and __init__ is records' own, see below)."""
    code = ("import collections, dataclasses\n"
            "made = collections.Counter()\n"
            "real = dataclasses._create_fn\n"
            "def counted(name, *args, **kwargs):\n"
            "    made[name] += 1\n"
            "    return real(name, *args, **kwargs)\n"
            "dataclasses._create_fn = counted\n"
            "import gputop.core.model\n"
            "print(sorted(made))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "['__delattr__', '__setattr__']"


def _twin(cls: type) -> type:
    """The same fields as a plain frozen, slotted dataclass: the behaviour to match."""
    return dataclasses.make_dataclass(
        cls.__name__,
        [(f.name, Any, dataclasses.field(compare=f.compare, hash=f.hash, repr=f.repr))
         for f in dataclasses.fields(cls)],
        frozen=True, slots=True)


@pytest.mark.parametrize("cls", RECORDS, ids=lambda cls: cls.__name__)
def test_a_record_compares_hashes_and_shows_as_its_dataclass_twin_does(cls: type) -> None:
    names = [f.name for f in dataclasses.fields(cls)]
    values = {name: (i, f"v{i}") for i, name in enumerate(names)}
    one, same = cls(**values), cls(**values)
    twin = _twin(cls)(**values)
    assert (one == same, hash(one) == hash(same), repr(one)) == (True, True, repr(twin))
    assert hash(one) == hash(twin)
    assert one != twin and one.__eq__(twin) is NotImplemented
    for name in names:
        other = dataclasses.replace(one, **{name: "changed"})
        twin_other = dataclasses.replace(twin, **{name: "changed"})
        assert (one == other) == (twin == twin_other), name
        assert (hash(one) == hash(other)) == (hash(twin) == hash(twin_other)), name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(one, names[0], 1)
    assert not hasattr(one, "__dict__")


def test_every_model_class_is_frozen() -> None:
    foreign = [cls.__name__ for cls in RECORDS if cls.__repr__.__module__ != "gputop.core.frozen"]
    assert foreign == []


@pytest.mark.parametrize("cls", RECORDS, ids=lambda cls: cls.__name__)
def test_a_record_is_built_as_its_dataclass_would_be(cls: type) -> None:
    """The same parameters and defaults, positional or by name, each field stored through
    its slot's setter: never the frozen __setattr__ by name that a frozen dataclass's
    __init__ calls for every field (twice the cost of building a record)."""
    fields = dataclasses.fields(cls)
    params = list(inspect.signature(cls).parameters.values())
    assert [p.name for p in params] == [f.name for f in fields]
    assert [p.default for p in params] == [
        inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        for f in fields]
    values = [(i, f"v{i}") for i in range(len(fields))]
    by_position, by_name = cls(*values), cls(**{f.name: v for f, v in
                                                zip(fields, values, strict=True)})
    assert [getattr(by_position, f.name) for f in fields] == values
    assert by_position == by_name
    required = [f.name for f in fields if f.default is dataclasses.MISSING]
    if required:
        with pytest.raises(TypeError, match=required[-1]):
            cls(*values[: len(required) - 1])
    with pytest.raises(TypeError):
        cls(*values, "one too many")
    assert "__setattr__" not in vars(cls)["__init__"].__code__.co_names


def test_factory_and_init_false_fields_are_built_as_dataclasses_build_them() -> None:
    """None of the model's records has one yet; a record that adds one behaves the same."""
    from gputop.core.frozen import frozen

    def shape(cls: type) -> type:
        cls.__annotations__ = {"x": "int", "items": "list[int]", "fixed": "int",
                               "made": "list[int]"}
        cls.items = dataclasses.field(default_factory=list)  # type: ignore[attr-defined]
        cls.fixed = dataclasses.field(default=7, init=False)  # type: ignore[attr-defined]
        cls.made = dataclasses.field(  # type: ignore[attr-defined]
            default_factory=lambda: [1], init=False)
        return cls

    rec: Any = frozen(shape(type("Rec", (), {})))
    twin: Any = dataclasses.dataclass(frozen=True, slots=True)(shape(type("Twin", (), {})))
    assert [(p.name, repr(p.default)) for p in inspect.signature(rec).parameters.values()] == [
        (p.name, repr(p.default)) for p in inspect.signature(twin).parameters.values()]
    one, two = rec(1), rec(1)
    assert (one.x, one.items, one.fixed, one.made) == (1, [], 7, [1])
    assert one.items is not two.items and one.made is not two.made  # a new one each time
    assert rec(1, [2]).items == twin(1, [2]).items == [2]
