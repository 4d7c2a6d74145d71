"""The example repository's Python-backend models (Triton's `model.py` layout): their
sources live beside this module in models/python/<name>/, and are copied as they are."""

from __future__ import annotations

import shutil
from pathlib import Path

SOURCES = Path(__file__).resolve().parent / "python"
DESCRIPTIONS = {
    "py_identity": "Python backend, FP32 identity, dynamic batching (execute gets a list)",
    "py_strings": "Python backend, BYTES upper-cased and measured; config from the model",
    "py_bls": "Python backend calling `simple` through the gateway (async_exec)",
}


def build(dest: Path, names: tuple[str, ...] = tuple(DESCRIPTIONS)) -> list[str]:
    for name in names:
        target = dest / name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(SOURCES / name, target, ignore=shutil.ignore_patterns("__pycache__"))
    return list(names)
