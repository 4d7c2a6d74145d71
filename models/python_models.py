"""The example repository's Python-backend models (Triton's `model.py` layout) and the
ensemble around `digits` built from two of them: their sources live beside this module
in models/python/<name>/, and are copied as they are."""

from __future__ import annotations

import shutil
from pathlib import Path

SOURCES = Path(__file__).resolve().parent / "python"
DESCRIPTIONS = {
    "py_identity": "Python backend, FP32 identity, dynamic batching (execute gets a list)",
    "py_strings": "Python backend, BYTES upper-cased and measured; config from the model",
    "py_bls": "Python backend calling `simple` through the gateway (async_exec)",
    "py_repeat": "Python backend, decoupled: COUNT responses per request over the gRPC stream",
    "digits_preprocess": "Python backend, an 8x8 grey image as the pixels `digits` takes",
    "digits_postprocess": "Python backend, `digits` probabilities as a label and confidence",
    "digits_pipeline": "ensemble: digits_preprocess -> digits -> digits_postprocess",
}


def build(dest: Path, names: tuple[str, ...] = tuple(DESCRIPTIONS)) -> list[str]:
    for name in names:
        target = dest / name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(SOURCES / name, target, ignore=shutil.ignore_patterns("__pycache__"))
        (target / "1").mkdir(exist_ok=True)  # an ensemble's empty version, as Triton wants
    return list(names)
