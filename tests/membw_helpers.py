"""Helpers for the memory-bandwidth tests: small /sys and /proc trees written per test."""

from __future__ import annotations

from pathlib import Path


def sys_with_llc(root: Path, size: str | None) -> Path:
    """A /sys tree whose cpu0 has a level-3 unified cache of `size` (none when None)."""
    if size is not None:
        index = root / "devices/system/cpu/cpu0/cache/index3"
        index.mkdir(parents=True)
        (index / "level").write_text("3\n")
        (index / "type").write_text("Unified\n")
        (index / "size").write_text(f"{size}\n")
    else:
        root.mkdir(parents=True)
    return root
