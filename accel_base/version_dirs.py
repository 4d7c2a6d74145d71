"""A model directory's version directories: each named by its number, with or without
leading zeros (TF Serving's base paths have `00000123/`)."""

from __future__ import annotations

from pathlib import Path


def available_versions(model_dir: Path) -> list[int]:
    return sorted({int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()})


def version_dir(model_dir: Path, version: int) -> Path:
    """Where a version's files are: `<model_dir>/<version>`, or the directory whose name
    is that number with leading zeros (TF Serving's base paths have `00000123/`)."""
    plain = model_dir / str(version)
    if plain.is_dir():
        return plain
    for path in model_dir.iterdir():
        if path.name.isdigit() and int(path.name) == version and path.is_dir():
            return path
    return plain
