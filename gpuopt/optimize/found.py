"""Whether a path names a ``gpuopt optimize`` result (``optimize.json``): a stat or two, and no
imports, because ``gpuopt report`` asks it of every input before it reads anything."""

from __future__ import annotations

from pathlib import Path

OPTIMIZE_FILE = "optimize.json"


def optimize_file(path: Path) -> Path | None:
    """The ``optimize.json`` that ``path`` names (the file, or a directory holding it and no
    ``profile.json``), else None."""
    if path.is_dir():
        p = path / OPTIMIZE_FILE
        return p if p.is_file() and not (path / "profile.json").exists() else None
    return path if path.name == OPTIMIZE_FILE else None
