"""Predictions and held-out accuracy of any digits model, from its artifact alone.

Whatever built it (scikit-learn, PyTorch, Keras, JAX), a digits model directory is re-loaded
here with its own runtime: onnxruntime for ``model.onnx``, torch.jit.load / torch.export.load
for ``model.pt`` / ``model.pt2``, tf.saved_model.load for ``model.savedmodel/``,
jax.export.deserialize for ``model.jax``. The builders report exactly this figure, so a test
or a benchmark can check that the gateway serves what was built.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models import digits_training as dt


def _predict_onnx(path: Path, pixels: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dt.in_batches(lambda batch: session.run([dt.OUTPUT], {dt.INPUT: batch})[0], pixels)


def predict(model_dir: Path, pixels: np.ndarray) -> np.ndarray:
    """Probabilities (float32 [N, 10]) of version 1 of ``model_dir`` for raw ``pixels``, run in
    batches of at most the served max_batch_size. Each framework is imported only if needed."""
    version_dir = Path(model_dir) / "1"
    x = np.ascontiguousarray(pixels, dtype=np.float32)
    if (version_dir / "model.onnx").is_file():
        return _predict_onnx(version_dir / "model.onnx", x)
    if (version_dir / "model.pt").is_file() or (version_dir / "model.pt2").is_file():
        from models import digits_torch

        return digits_torch.predict(model_dir, x)
    if (version_dir / "model.savedmodel").is_dir():
        from models import digits_keras

        return digits_keras.predict(model_dir, x)
    if (version_dir / "model.jax").is_file():
        from models import digits_jax

        return digits_jax.predict(model_dir, x)
    raise FileNotFoundError(f"{version_dir}: no digits artifact (model.onnx, .pt, .pt2, ...)")


def builder_accuracy(model_dir: Path) -> float:
    """Held-out accuracy of the model in ``model_dir``: what the builder logged for it."""
    x, y = dt.held_out()
    return dt.accuracy(predict(model_dir, x), y)
