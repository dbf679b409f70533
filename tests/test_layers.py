"""DESIGN.md's layer rules, proved on the source text and in fresh interpreters."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "gputop"
UI_LIBS = {"textual", "rich"}
NO_UI_LAYERS = ("core", "probe", "sources", "analysis", "advice", "recording", "frames")
LAYER_ORDER = ["core", "probe", "sources", "analysis", "advice", "recording", "frames", "export",
               "tui", "app"]  # the folders of gputop/, lowest first
LOOSE_MODULES = {"__init__": "core", "__main__": "app"}  # the only modules outside a folder


def _imports(path: Path) -> list[tuple[str, bool]]:
    """Every module a file imports, with whether it runs at import time (not inside a def:
    an import in a module-level `try` or `if` runs at import time too)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, at_import: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend((alias.name, at_import) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(path, node)
            found.append((module, at_import))
            package = PACKAGE.parent.joinpath(*module.split("."))
            found.extend((f"{module}.{alias.name}", at_import) for alias in node.names
                         if (package / alias.name).with_suffix(".py").exists()
                         or (package / alias.name).is_dir())
        inside_def = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, at_import and not inside_def)

    visit(tree, True)
    return found


def _absolute(path: Path, node: ast.ImportFrom) -> str:
    """The imported module's absolute name (relative imports resolved against `path`)."""
    if node.level == 0:
        return node.module or ""
    package = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)[: -node.level]
    return ".".join([*package, *([node.module] if node.module else [])])


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
        and path.relative_to(PACKAGE).as_posix() not in {"probe/torch.py", "app/demo_trainer.py"}
    ]
    assert not offenders, offenders


def _layer(module: str) -> str:
    """The layer of a module name inside gputop: its folder ("gputop.sources.x" -> "sources")."""
    parts = module.split(".")
    if len(parts) == 1:
        return "core"
    if (PACKAGE / parts[1]).is_dir():
        return parts[1]
    layer = LOOSE_MODULES.get(parts[1])
    assert layer is not None, f"gputop/{parts[1]}.py sits outside every layer's folder"
    return layer


def test_every_folder_is_a_layer_and_every_layer_a_folder() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(LAYER_ORDER)


def test_only_the_entry_points_sit_outside_a_folder() -> None:
    assert {p.stem for p in PACKAGE.glob("*.py")} == set(LOOSE_MODULES)


def test_every_module_has_a_layer() -> None:
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        assert _layer(module) in LAYER_ORDER, module


def test_imports_point_down_the_layer_order() -> None:
    """A module imports only its own layer or layers below it (LAYER_ORDER), wherever the
    import stands; sources never import analysis, and the probe imports only itself."""
    rank = {name: i for i, name in enumerate(LAYER_ORDER)}
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        own = _layer(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
        for name, _ in _imports(path):
            if name != "gputop" and not name.startswith("gputop."):
                continue
            theirs = _layer(name)
            if rank[theirs] > rank[own] or (own == "probe" and theirs != "probe" and
                                             name != "gputop"):
                offenders.append(f"{path.relative_to(PACKAGE)} ({own}) imports {name} ({theirs})")
    assert not offenders, offenders


def test_the_layer_check_sees_imports_in_functions_and_module_level_blocks(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("try:\n    import a\nexcept ImportError:\n    pass\n"
                      "if True:\n    import b\ndef f():\n    import c\n")
    assert _imports(module) == [("a", True), ("b", True), ("c", False)]


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
        "from gputop.app.wiring import build_sampler\n"
        "from gputop.export import snapshot, text\n"
        "s = build_sampler(demo='idle', membw='off'); s.sample(); s.close()"
    )
    assert not {m for m in loaded if m.split(".")[0] in UI_LIBS}


def test_record_path_never_loads_textual(tmp_path: Path) -> None:
    loaded = _modules_after(
        "from gputop.app.wiring import build_sampler, open_recorder\n"
        f"r = open_recorder({str(tmp_path / 'r.sqlite')!r})\n"
        "s = build_sampler(demo='idle', membw='off'); r.submit(s.sample()); s.close(); r.close()"
    )
    assert "gputop.recording.writer_thread" in loaded
    assert not {m for m in loaded if m.split(".")[0] in UI_LIBS}


def test_probe_import_loads_nothing_outside_the_standard_library() -> None:
    before = _modules_after("pass")
    loaded = _modules_after("import gputop.probe") - before
    stdlib = set(sys.stdlib_module_names)
    foreign = {m.split(".")[0] for m in loaded} - stdlib - {"gputop"}
    assert "gputop.probe" in loaded
    assert not foreign, foreign
