"""One formatting vocabulary: numbers worded by core.fmt alone, the GPU banner worded once."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from gputop.core import fmt
from gputop.core.model import Frame
from gputop.export.text import render as render_text
from gputop.tui.splash import render as render_splash
from gputop.tui.views.header import header_lines
from tests.helpers.tui import frames

PACKAGE = Path(fmt.__file__).parents[1]


def _simulated() -> Frame:
    return frames("idle", count=2)[-1]


def _cpu_only() -> Frame:
    f = _simulated()
    return replace(f, gpu=replace(f.gpu, source="none", gpus=(), note="no driver here"))


@pytest.mark.parametrize("make", [_simulated, _cpu_only], ids=["simulated", "cpu-only"])
def test_banner_reads_the_same_in_text_splash_and_tui(make):
    f = make()
    banner = fmt.gpu_banner(f.gpu)
    assert banner is not None
    header = "".join(text for line in header_lines(f, 200) for text, _ in line)
    assert banner in render_text(f).splitlines()
    assert banner in render_splash(f, 200, 40)
    assert banner in header


def test_no_banner_for_real_gpus():
    f = _simulated()
    assert fmt.gpu_banner(replace(f.gpu, source="nvml")) is None


def _defined(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def test_no_formatting_function_is_defined_twice():
    assert not _defined(PACKAGE / "core" / "fmt.py") & _defined(PACKAGE / "tui" / "cells.py")


def test_only_core_fmt_is_called_fmt():
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == "fmt":
                        assert (node.module, alias.name) == ("gputop.core", "fmt"), path


def test_banner_words_live_only_in_fmt():
    for path in [*(PACKAGE / "export").rglob("*.py"), *(PACKAGE / "tui").rglob("*.py")]:
        text = path.read_text()
        assert "not real hardware" not in text and "CPU-only mode" not in text, path
