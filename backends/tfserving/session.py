"""A TF1 SavedModel's signature run in a TF1 session, as TF Serving runs it.

TensorFlow's TF2 loader (`tf.saved_model.load`) prunes each signature of a TF1 graph
into a function and sets the signature's declared shapes on its tensors; a graph whose
tensors disagree with what its signatures declare (TF Serving's own test model
`saved_model_half_plus_three` is one) fails there, although TF Serving, which feeds a
session by tensor names, serves it. The SavedModel backend falls back to this: the
MetaGraph tagged `serve` loaded into a session of its own, the signature's inputs fed
and outputs fetched by their tensor names. It offers what the backend uses of a TF2
signature: `structured_input_signature`, `structured_outputs`, `variables`, and a call
with the inputs by alias that answers tensors by alias.
"""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf

SERVE_TAG = "serve"


def _spec(tensor: tf.Tensor, alias: str) -> tf.TensorSpec:
    """A signature tensor as the graph has it: its shape there, not the one its
    signature declares (which is what disagreed)."""
    return tf.TensorSpec(tensor.shape, tensor.dtype, alias)


class SessionSignature:
    """One signature of a TF1 SavedModel, in a session of its own."""

    def __init__(self, directory: Path, signature_name: str, device: str) -> None:
        """`device`: TensorFlow's name of the device the model was placed on (a graph
        of its own does not take the caller's device scope)."""
        self._graph = tf.Graph()
        self._session = tf.compat.v1.Session(graph=self._graph)
        try:
            self._read(directory, signature_name, device)
        except BaseException:
            self._session.close()
            raise

    def _read(self, directory: Path, signature_name: str, device: str) -> None:
        with self._graph.as_default(), tf.device(device):
            meta_graph = tf.compat.v1.saved_model.loader.load(
                self._session, [SERVE_TAG], str(directory), clear_devices=True
            )
        signatures = meta_graph.signature_def
        if signature_name not in signatures:
            names = ", ".join(sorted(signatures)) or "none"
            raise KeyError(f"the SavedModel has no signature '{signature_name}'; it has: {names}")
        signature = signatures[signature_name]
        self._feeds = {alias: info.name for alias, info in signature.inputs.items()}
        self._fetches = {alias: info.name for alias, info in signature.outputs.items()}
        tensor = self._graph.get_tensor_by_name
        inputs = {alias: _spec(tensor(name), alias) for alias, name in self._feeds.items()}
        self.structured_input_signature = ((), inputs)
        self.structured_outputs = {a: _spec(tensor(n), a) for a, n in self._fetches.items()}
        self.variables = self._graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)

    def __call__(self, **inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        feed = {self._feeds[alias]: value.numpy() for alias, value in inputs.items()}
        results = self._session.run(self._fetches, feed_dict=feed)
        return {alias: tf.constant(value) for alias, value in results.items()}

    def close(self) -> None:
        self._session.close()
