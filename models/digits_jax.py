"""``digits_jax`` (platform jax_export): the digits classifier trained in JAX.

Trained with ``jax.grad`` and a hand-written full-batch momentum SGD (optax is not a dependency;
the update is the same two lines PyTorch's and Keras' SGD run), then written as a serialized
``jax.export.Exported``: one function from ``{"pixels": f32[batch, 64]}`` to
``{"probabilities": f32[batch, 10]}`` with the weights baked in as constants and the batch
dimension symbolic, so ``jax.export.deserialize`` runs it without any of this code.

This module imports JAX at the top; :mod:`models.build` imports it only when JAX is there.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import export as jax_export

from models import digits_training as dt
from models.accuracy import builder_accuracy
from models.config_text import model_config_text, write_config

NAME = "digits_jax"
PLATFORM = "jax_export"
ARTIFACT = "model.jax"
# Lowered for both, so the one artifact serves on a CPU or a CUDA GPU; lowering for CUDA needs
# no GPU (or CUDA jaxlib) at build time.
LOWERING_PLATFORMS = ("cpu", "cuda")

Params = dict[str, jax.Array]


def logits(params: Params, pixels: jax.Array) -> jax.Array:
    hidden = jax.nn.relu((pixels * dt.PIXEL_SCALE) @ params["w1"] + params["b1"])
    return hidden @ params["w2"] + params["b2"]


def _loss(params: Params, x: jax.Array, y: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy, the loss PyTorch's F.cross_entropy and Keras compute."""
    log_p = jax.nn.log_softmax(logits(params, x), axis=-1)
    return -jnp.mean(jnp.take_along_axis(log_p, y[:, None], axis=1))


def train() -> Params:
    """Full-batch momentum SGD from the shared initial weights (see
    :mod:`models.digits_training`)."""
    x_np, y_np = dt.training_data()
    # JAX runs in 32 bits unless x64 is enabled: pass int32 labels rather than have it warn.
    x, y = jnp.asarray(x_np), jnp.asarray(y_np.astype(np.int32))
    params = {k: jnp.asarray(v) for k, v in dt.initial_weights().items()}
    grad = jax.grad(_loss)

    def step(_: int, state: tuple[Params, Params]) -> tuple[Params, Params]:
        p, velocity = state
        velocity = jax.tree.map(lambda v, g: dt.MOMENTUM * v + g, velocity, grad(p, x, y))
        return jax.tree.map(lambda w, v: w - dt.LEARNING_RATE * v, p, velocity), velocity

    zeros = jax.tree.map(jnp.zeros_like, params)
    # One compiled loop over all steps rather than STEPS Python-level dispatches.
    run = jax.jit(lambda p: jax.lax.fori_loop(0, dt.STEPS, step, (p, zeros))[0])
    return run(params)


def export(params: Params) -> jax_export.Exported:
    """The serving function, exported with a symbolic batch dimension. A symbolic dimension has
    no upper bound: max_batch_size lives in the config only."""

    def serve(inputs: dict[str, jax.Array]) -> dict[str, jax.Array]:
        return {dt.OUTPUT: jax.nn.softmax(logits(params, inputs[dt.INPUT]), axis=-1)}

    (batch,) = jax_export.symbolic_shape("batch", constraints=["batch >= 1"])
    spec = {dt.INPUT: jax.ShapeDtypeStruct((batch, dt.N_PIXELS), jnp.float32)}
    return jax_export.export(jax.jit(serve), platforms=LOWERING_PLATFORMS)(spec)


def write(params: Params, repo: Path) -> Path:
    model_dir = Path(repo) / NAME
    path = model_dir / "1" / ARTIFACT
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(export(params).serialize())
    write_config(model_dir, model_config_text(NAME, dt.MAX_BATCH_SIZE, platform=PLATFORM))
    return model_dir


def load(model_dir: Path) -> jax_export.Exported:
    """Deserialize ``<model_dir>/1/model.jax``: needs JAX, not this module's functions."""
    return jax_export.deserialize(bytearray((Path(model_dir) / "1" / ARTIFACT).read_bytes()))


def predict(model_dir: Path, pixels: np.ndarray) -> np.ndarray:
    exported = load(model_dir)
    x = np.ascontiguousarray(pixels, dtype=np.float32)
    return dt.in_batches(lambda b: np.asarray(exported.call({dt.INPUT: b})[dt.OUTPUT]), x)


def build(repo: Path) -> dict[str, float]:
    """Train and write ``digits_jax``; returns its held-out accuracy, measured on the artifact
    as re-loaded from disk."""
    model_dir = write(train(), repo)
    return {NAME: builder_accuracy(model_dir)}
