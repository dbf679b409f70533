"""docs/architecture.md names only paths that exist, and every layer folder it describes."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
TICKED = re.compile(r"`([^`\s]+)`")
ROW_FOLDER = re.compile(r"^\| `(gputop/[a-z_]+/)` \|")


def _named_paths() -> list[str]:
    """Every path the page names: `gputop/...` whole, and a table row's bare names under its
    folder (`model.py` in the core row is gputop/core/model.py)."""
    paths = []
    for line in DOC.read_text().splitlines():
        row = ROW_FOLDER.match(line)
        for token in TICKED.findall(line):
            if token.startswith("gputop/"):
                paths.append(token)
            elif row and re.fullmatch(r"[a-z_]+(/[a-z_]+)*(\.py|/)", token):
                paths.append(row.group(1) + token)
    return paths


def test_every_path_the_architecture_page_names_exists() -> None:
    named = _named_paths()
    assert len(named) > 40, "the page names the modules of every layer"
    missing = [p for p in named if not (ROOT / p).exists()]
    assert not missing, missing


def test_the_page_has_a_row_for_every_layer_folder() -> None:
    rows = {m.group(1) for line in DOC.read_text().splitlines() if (m := ROW_FOLDER.match(line))}
    folders = {f"gputop/{p.name}/" for p in (ROOT / "gputop").iterdir()
               if (p / "__init__.py").exists()}
    assert rows == folders
