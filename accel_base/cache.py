"""Where accel-gateway keeps what it builds (example models, compiled libraries)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """`$XDG_CACHE_HOME/accel-gateway`, or `~/.cache/accel-gateway`."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "accel-gateway"
