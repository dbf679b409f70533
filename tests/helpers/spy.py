"""Spies for tests that count or record the calls a function gets, typed as the function."""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def spy(real: Callable[P, R], seen: Callable[P, object]) -> Callable[P, R]:
    """`real`, calling `seen` with the same arguments first (to count or record the call);
    install it with `monkeypatch.setattr`."""

    def spied(*args: P.args, **kwargs: P.kwargs) -> R:
        seen(*args, **kwargs)
        return real(*args, **kwargs)

    return spied
