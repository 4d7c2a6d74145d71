"""What every framework's digits classifier shares: data, initial weights, hyper-parameters.

The PyTorch, Keras and JAX variants are trained separately, each with its own autodiff, yet must
agree with each other on the held-out set. Independently initialised nets would not (they land
in different minima), so every framework starts from the same numpy-drawn weights and runs the
same deterministic full-batch gradient descent with momentum: no shuffling and no mini-batches,
so the only differences left are float rounding, which stays far below what changes a prediction.

Why not Adam: it divides each update by the gradient's own running magnitude, so once the
training loss is small, rounding noise on near-zero gradients turns into full-size steps in
random directions. Measured here, full-batch Adam left the frameworks at 99.6-99.8% top-1
agreement with probabilities up to 0.2 apart; momentum SGD keeps them within ~2e-4 and 100%.

The architecture, like :mod:`models.digits`: raw pixels (0..16) scaled by 1/16 inside the
model, Dense 64 + ReLU, Dense 10, softmax. Weights are stored as ``x @ w + b`` (Keras and JAX
layout; PyTorch's Linear takes the transpose).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from models import digits

INPUT = digits.INPUT  # "pixels": FP32 [batch, 64], raw values 0..16
OUTPUT = digits.OUTPUT  # "probabilities": FP32 [batch, 10]
N_PIXELS = digits.N_PIXELS
N_CLASSES = digits.N_CLASSES
HIDDEN = 64
MAX_BATCH_SIZE = 64
# 1/16 is exact in binary, so multiplying by it equals dividing by 16 in every framework.
PIXEL_SCALE = 1.0 / digits.PIXEL_MAX

SEED = 0
# Full-batch SGD with (heavy-ball, non-Nesterov) momentum: velocity = MOMENTUM * velocity +
# gradient, weights -= LEARNING_RATE * velocity. PyTorch's and Keras' SGD both compute exactly
# this for a constant learning rate. ~0.97 held-out accuracy after 300 steps.
STEPS = 300
LEARNING_RATE = 0.1
MOMENTUM = 0.9

Weights = dict[str, np.ndarray]  # w1 [64, 64], b1 [64], w2 [64, 10], b2 [10], all float32


def initial_weights(seed: int = SEED) -> Weights:
    """Glorot-uniform weights and zero biases, drawn once from a fixed numpy seed."""
    rng = np.random.default_rng(seed)

    def glorot(fan_in: int, fan_out: int) -> np.ndarray:
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-limit, limit, size=(fan_in, fan_out)).astype(np.float32)

    return {
        "w1": glorot(N_PIXELS, HIDDEN),
        "b1": np.zeros(HIDDEN, np.float32),
        "w2": glorot(HIDDEN, N_CLASSES),
        "b2": np.zeros(N_CLASSES, np.float32),
    }


def training_data() -> tuple[np.ndarray, np.ndarray]:
    """The training part of :func:`models.digits._split`: raw pixels float32 [N, 64], labels
    int64 [N]. The models scale the pixels themselves, in training and in serving alike."""
    x_train, _, y_train, _ = digits._split()
    return x_train.astype(np.float32), y_train.astype(np.int64)


def held_out() -> tuple[np.ndarray, np.ndarray]:
    """The held-out images and labels, the same ones :mod:`models.digits` is measured on."""
    return digits.held_out()


def accuracy(probabilities: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(np.argmax(probabilities, axis=1) == labels))


def agreement(a: np.ndarray, b: np.ndarray) -> float:
    """Share of rows where two models' probabilities have the same top-1 class."""
    return float(np.mean(np.argmax(a, axis=1) == np.argmax(b, axis=1)))


def in_batches(
    run: Callable[[np.ndarray], np.ndarray], x: np.ndarray, size: int = MAX_BATCH_SIZE
) -> np.ndarray:
    """``run`` over ``x`` in slices of at most ``size`` rows (the served models' max batch
    size), concatenated."""
    return np.concatenate([np.asarray(run(x[i : i + size])) for i in range(0, len(x), size)])
