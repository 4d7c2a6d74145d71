"""``digits``: a small MLP trained on scikit-learn's bundled 8x8 digits, exported to ONNX.

The graph takes raw pixel values (0..16) and does the scaling itself, so clients can send the
data set's values unchanged. Its config.pbtxt deliberately lists no inputs or outputs: the
server is expected to complete them from the ONNX file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from models.config_text import model_config_text, write_config
from models.onnx_graphs import BATCH, make_model, model_file, save_model, tensor

NAME = "digits"
MAX_BATCH_SIZE = 64
INPUT = "pixels"
OUTPUT = "probabilities"
N_PIXELS = 64
N_CLASSES = 10
PIXEL_MAX = 16.0  # load_digits pixel values are integers in 0..16
HIDDEN = 64
SEED = 0
# Adam stops on its own tolerance at ~340 epochs with this seed; the cap only bounds the cost.
MAX_ITER = 500


def _split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The fixed, stratified 75/25 split: X_train, X_test, y_train, y_test."""
    from sklearn.datasets import load_digits  # bundled with scikit-learn; nothing downloaded
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    return train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)


def held_out() -> tuple[np.ndarray, np.ndarray]:
    """Held-out images (float32, N x 64, raw 0..16 values) and labels (int64, N)."""
    _, x_test, _, y_test = _split()
    return x_test.astype(np.float32), y_test.astype(np.int64)


def write_held_out(path: Path) -> Path:
    """The held-out images and labels as an .npz for `accel-gateway compare --data`
    (arrays `pixels` and `labels`)."""
    x, y = held_out()
    np.savez(path, **{INPUT: x, "labels": y})
    return path


def _train():  # -> sklearn.neural_network.MLPClassifier (sklearn imported lazily)
    from sklearn.neural_network import MLPClassifier
    from threadpoolctl import threadpool_limits  # a dependency of scikit-learn

    x_train, _, y_train, _ = _split()
    clf = MLPClassifier(hidden_layer_sizes=(HIDDEN,), random_state=SEED, max_iter=MAX_ITER)
    # One BLAS thread: the matrices are tiny (200 x 64 mini-batches), so more threads only
    # add their hand-offs (2 s on one thread, 9 s on two, 30 s and more on a busy machine),
    # and the weights no longer depend on the machine's core count.
    with threadpool_limits(limits=1):
        clf.fit(x_train / PIXEL_MAX, y_train)
    # The export below hard-codes this architecture; fail loudly if sklearn's defaults change.
    assert clf.activation == "relu" and clf.out_activation_ == "softmax"
    assert list(clf.classes_) == list(range(N_CLASSES))
    return clf


def _graph(coefs: list[np.ndarray], intercepts: list[np.ndarray]):
    def init(name: str, value: np.ndarray | float) -> TensorProto:
        return numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)

    nodes = [
        helper.make_node("Mul", [INPUT, "scale"], ["scaled"]),
        helper.make_node("Gemm", ["scaled", "w1", "b1"], ["hidden_pre"]),
        helper.make_node("Relu", ["hidden_pre"], ["hidden"]),
        helper.make_node("Gemm", ["hidden", "w2", "b2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], [OUTPUT], axis=-1),
    ]
    initializers = [
        init("scale", 1.0 / PIXEL_MAX),
        init("w1", coefs[0]),
        init("b1", intercepts[0]),
        init("w2", coefs[1]),
        init("b2", intercepts[1]),
    ]
    return helper.make_graph(
        nodes,
        NAME,
        [tensor(INPUT, TensorProto.FLOAT, [BATCH, N_PIXELS])],
        [tensor(OUTPUT, TensorProto.FLOAT, [BATCH, N_CLASSES])],
        initializer=initializers,
    )


def reference_accuracy(model_path: Path) -> float:
    """Accuracy of the ONNX model at ``model_path`` on the held-out set, run in onnxruntime."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(model_file(model_path)), providers=["CPUExecutionProvider"])
    x, y = held_out()
    (probabilities,) = session.run([OUTPUT], {INPUT: x})
    return float(np.mean(np.argmax(probabilities, axis=1) == y))


def build(repo: Path) -> float:
    """Train, write ``<repo>/digits`` and return the exported model's held-out accuracy."""
    clf = _train()
    model_dir = repo / NAME
    doc = "MLP (64 relu) on sklearn digits; input raw pixels 0..16, output softmax"
    path = save_model(make_model(_graph(clf.coefs_, clf.intercepts_), doc=doc), model_dir)
    write_config(model_dir, model_config_text(NAME, MAX_BATCH_SIZE))
    # Measured on the exported graph, not the sklearn object, so the export itself is checked.
    return reference_accuracy(path)
