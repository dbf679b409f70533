"""`make test` runs most tests side by side and those marked `alone` one at a time: a test
that measures speed (samples/s before and after following advice) or loads the host on
purpose (CPU hogs, memory hogs) must be marked, or a test beside it moves what it measures
and the one beside it runs on a host loaded by it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# What makes a module judge speed or load the host: the helpers that do it.
LOADS_OR_TIMES = re.compile(r"\b(interleaved|busy_host|sysbench_hog)\(")


def _marked_alone(tree: ast.Module) -> bool:
    """Whether the module's own `pytestmark` holds pytest.mark.alone."""
    for node in tree.body:
        if (isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)):
            return "mark.alone" in ast.unparse(node.value)
    return False


def test_every_module_that_times_or_loads_the_host_runs_alone() -> None:
    unmarked = []
    for path in sorted(TESTS.rglob("test_*.py")):
        if path == Path(__file__).resolve():
            continue  # quotes the helpers' names
        text = path.read_text()
        if LOADS_OR_TIMES.search(text) and not _marked_alone(ast.parse(text)):
            unmarked.append(str(path.relative_to(TESTS)))
    assert unmarked == [], f"mark these `pytestmark = pytest.mark.alone`: {unmarked}"


def test_the_guard_sees_a_module_that_times_without_the_mark() -> None:
    timed = "from tests.helpers.follow import interleaved\nruns = interleaved(a, b, 60)\n"
    marked = "import pytest\npytestmark = [pytest.mark.slow, pytest.mark.alone]\n" + timed
    assert LOADS_OR_TIMES.search(timed) and not _marked_alone(ast.parse(timed))
    assert _marked_alone(ast.parse(marked))
    assert not _marked_alone(ast.parse("import pytest\npytestmark = pytest.mark.slow\n"))
