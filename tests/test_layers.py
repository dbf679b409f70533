"""DESIGN.md's layer rules, proved on the source text and in fresh interpreters."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "gputop"
UI_LIBS = {"textual", "rich"}
NO_UI_LAYERS = ("sources", "analysis", "advice", "probe")
LAYER_ORDER = ["model", "sources", "analysis", "advice", "sampler", "export", "tui", "cli"]


def _imports(path: Path) -> list[tuple[str, bool]]:
    """Every module a file imports, with whether the import is at module level."""
    tree = ast.parse(path.read_text(), filename=str(path))
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) in top_level) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, id(node) in top_level))
    return found


def _files(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", [*NO_UI_LAYERS, "export"])
def test_lower_layers_never_import_textual_or_rich(layer: str) -> None:
    offenders = [
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in _files(layer)
        for name, _ in _imports(path)
        if name.split(".")[0] in UI_LIBS
    ]
    assert not offenders, offenders


def test_probe_imports_only_the_standard_library_at_module_level() -> None:
    stdlib = set(sys.stdlib_module_names)
    offenders = [
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in _files("probe")
        for name, top in _imports(path)
        if top and name.split(".")[0] not in stdlib and not name.startswith("gputop.probe")
    ]
    assert _files("probe"), "the probe package is missing"
    assert not offenders, offenders


def test_only_the_probe_torch_module_imports_torch() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in PACKAGE.rglob("*.py")
        for name, _ in _imports(path)
        if name.split(".")[0] == "torch"
        and path.relative_to(PACKAGE).as_posix() not in {"probe/torch.py", "demo_trainer.py"}
    ]
    assert not offenders, offenders


def test_imports_point_down() -> None:
    """sources/analysis/advice never import the sampler, export, tui or cli."""
    upper = {"gputop.sampler", "gputop.export", "gputop.tui", "gputop.cli", "gputop.wiring"}
    offenders = [
        f"{path.relative_to(PACKAGE)} imports {name}"
        for layer in ("sources", "analysis", "advice", "probe")
        for path in _files(layer)
        for name, _ in _imports(path)
        if any(name == u or name.startswith(u + ".") for u in upper)
    ]
    assert not offenders, offenders


def test_only_the_nvml_module_imports_pynvml() -> None:
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        for name, _ in _imports(path)
        if name == "pynvml" and path.name != "nvml.py"
    ]
    assert not offenders, offenders


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"],
        capture_output=True, text=True, check=True,
    )
    return set(out.stdout.split())


def test_once_path_never_loads_textual() -> None:
    loaded = _modules_after(
        "from gputop.wiring import build_sampler\n"
        "from gputop.export import snapshot, text\n"
        "s = build_sampler(demo='idle', membw='off'); s.sample(); s.close()"
    )
    assert not {m for m in loaded if m.split(".")[0] in UI_LIBS}


def test_probe_import_loads_nothing_outside_the_standard_library() -> None:
    before = _modules_after("pass")
    loaded = _modules_after("import gputop.probe") - before
    stdlib = set(sys.stdlib_module_names)
    foreign = {m.split(".")[0] for m in loaded} - stdlib - {"gputop"}
    assert "gputop.probe" in loaded
    assert not foreign, foreign
