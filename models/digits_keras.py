"""``digits_savedmodel`` (platform tensorflow_savedmodel): the digits classifier in Keras.

Keras 3 on the TensorFlow backend, trained with a GradientTape loop and Keras' momentum SGD on
the full training set each step, from the shared initial weights. It is written as a SavedModel
directory whose ``serving_default`` signature takes ``pixels`` (f32[None, 64]) and returns
``{"probabilities": f32[None, 10]}``: the names the server reads from the signature.

The Keras model is wrapped in a plain ``tf.Module`` rather than saved with ``model.export``: the
signature's input and output names are then exactly the ones written here.

This module imports TensorFlow at the top; :mod:`models.build` imports it only when it is there.
"""

from __future__ import annotations

import os

# TensorFlow's C++ side logs INFO chatter (which CPU instructions it could use) unless told
# otherwise before the import. Only INFO: its warnings and errors still show. An explicit
# setting wins.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from models import digits_training as dt
from models.accuracy import builder_accuracy
from models.config_text import model_config_text, write_config

NAME = "digits_savedmodel"
PLATFORM = "tensorflow_savedmodel"
ARTIFACT = "model.savedmodel"
SIGNATURE = "serving_default"


def logits_model() -> keras.Model:
    """Rescaling, Dense 64 ReLU, Dense 10 (logits), holding the shared initial weights."""
    weights = dt.initial_weights()
    pixels = keras.Input((dt.N_PIXELS,), name=dt.INPUT)
    hidden = keras.layers.Dense(dt.HIDDEN, activation="relu", name="hidden")
    out = keras.layers.Dense(dt.N_CLASSES, name="logits")
    logits = out(hidden(keras.layers.Rescaling(dt.PIXEL_SCALE)(pixels)))
    hidden.set_weights([weights["w1"], weights["b1"]])
    out.set_weights([weights["w2"], weights["b2"]])
    return keras.Model(pixels, logits, name="digits_logits")


def train() -> keras.Model:
    """Full-batch momentum SGD on the logits; returns the classifier (logits model + softmax)."""
    keras.utils.set_random_seed(dt.SEED)  # nothing here draws random numbers; belt and braces
    x_np, y_np = dt.training_data()
    x, y = tf.constant(x_np), tf.constant(y_np)
    model = logits_model()
    optimizer = keras.optimizers.SGD(learning_rate=dt.LEARNING_RATE, momentum=dt.MOMENTUM)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step() -> None:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

    for _ in range(dt.STEPS):
        step()
    return keras.Sequential([model, keras.layers.Softmax()], name="digits")


class Serving(tf.Module):
    """What the SavedModel holds: the classifier's variables and one named signature."""

    def __init__(self, classifier: keras.Model) -> None:
        super().__init__()
        self.classifier = classifier

    @tf.function(input_signature=[tf.TensorSpec([None, dt.N_PIXELS], tf.float32, name=dt.INPUT)])
    def serve(self, pixels: tf.Tensor) -> dict[str, tf.Tensor]:
        return {dt.OUTPUT: self.classifier(pixels, training=False)}


def write(classifier: keras.Model, repo: Path) -> Path:
    model_dir = Path(repo) / NAME
    module = Serving(classifier)
    tf.saved_model.save(
        module, str(model_dir / "1" / ARTIFACT), signatures={SIGNATURE: module.serve}
    )
    write_config(model_dir, model_config_text(NAME, dt.MAX_BATCH_SIZE, platform=PLATFORM))
    return model_dir


def load_signature(model_dir: Path):  # -> a ConcreteFunction taking pixels= keyword
    """``serving_default`` of the SavedModel re-loaded with ``tf.saved_model.load``."""
    loaded = tf.saved_model.load(str(Path(model_dir) / "1" / ARTIFACT))
    return loaded.signatures[SIGNATURE]


def predict(model_dir: Path, pixels: np.ndarray) -> np.ndarray:
    signature = load_signature(model_dir)
    x = np.ascontiguousarray(pixels, dtype=np.float32)
    return dt.in_batches(lambda b: signature(**{dt.INPUT: tf.constant(b)})[dt.OUTPUT].numpy(), x)


def build(repo: Path) -> dict[str, float]:
    """Train and write ``digits_savedmodel``; returns its held-out accuracy, measured on the
    SavedModel as re-loaded from disk."""
    model_dir = write(train(), repo)
    return {NAME: builder_accuracy(model_dir)}
