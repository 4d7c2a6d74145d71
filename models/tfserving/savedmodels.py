"""SavedModels laid out as TF Serving serves them: `<base_path>/<version>/saved_model.pb`.

- `digits` (`build_digits`): the Keras digits classifier (models/digits_keras.py).
  Version 1's `serving_default` takes `pixels` (f32[None, 64]) and returns one output,
  `probabilities` (f32[None, 10]), whose name TF Serving's REST answers drop. Version 2
  returns `probabilities` and `digit` (i64[None]), and has a second signature, `logits`
  ({"logits": f32[None, 10]}).
- `strings` (`build_strings`): `serving_default` takes `text` (string[None]) and returns
  `upper` (string[None]) and `length` (i64[None]); a second signature, `reverse`, returns
  `reversed` (string[None]).
- `examples` (`build_examples`): the digits classifier on serialized tf.Examples, with
  classify and regress signatures.
- `counting` (`build_counting`): counts its runs, with warm-up records (`write_warmup`).

`model_config_file` writes a TF Serving model config file (text format) naming them.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from pathlib import Path

import tensorflow as tf

from models import digits_keras
from models import digits_training as dt


class _Digits(tf.Module):
    def __init__(self, classifier, version: int) -> None:
        super().__init__()
        self.classifier = classifier
        self.version = version

    @tf.function(input_signature=[tf.TensorSpec([None, dt.N_PIXELS], tf.float32, name=dt.INPUT)])
    def serve(self, pixels):
        probabilities = self.classifier(pixels, training=False)
        if self.version == 1:
            return {dt.OUTPUT: probabilities}
        return {dt.OUTPUT: probabilities, "digit": tf.argmax(probabilities, axis=1)}

    @tf.function(input_signature=[tf.TensorSpec([None, dt.N_PIXELS], tf.float32, name=dt.INPUT)])
    def logits(self, pixels):
        return {"logits": self.classifier.layers[0](pixels, training=False)}


def build_digits(base_path: Path, versions: tuple[int, ...] = (1, 2)) -> Path:
    """The digits classifier at `base_path/<version>` for each of `versions` (1 or 2)."""
    classifier = digits_keras.train()
    for version in versions:
        module = _Digits(classifier, version)
        signatures = {"serving_default": module.serve}
        if version >= 2:
            signatures["logits"] = module.logits
        tf.saved_model.save(module, str(base_path / str(version)), signatures=signatures)
    return base_path


class _Strings(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def serve(self, text):
        return {
            "upper": tf.strings.upper(text, encoding="utf-8"),
            "length": tf.strings.length(text, "UTF8_CHAR"),
        }

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def reverse(self, text):
        return {"reversed": tf.strings.reduce_join(
            tf.strings.unicode_split(text, "UTF-8")[:, ::-1], axis=1)}  # fmt: skip


def build_strings(base_path: Path, version: int = 1) -> Path:
    module = _Strings()
    signatures = {"serving_default": module.serve, "reverse": module.reverse}
    tf.saved_model.save(module, str(base_path / str(version)), signatures=signatures)
    return base_path


def model_config_file(path: Path, models: dict[str, Path], policies: dict[str, str] | None = None,
                      labels: dict[str, dict[str, int]] | None = None) -> Path:  # fmt: skip
    """A TF Serving model config file (ModelServerConfig in text format): each model's
    base path, its version policy as text (e.g. "all {}", "specific { versions: 1 }"),
    and its version labels."""
    entries = []
    for name, base_path in models.items():
        lines = [f'    name: "{name}"', f'    base_path: "{base_path}"',
                 '    model_platform: "tensorflow"']  # fmt: skip
        policy = (policies or {}).get(name)
        if policy:
            lines.append(f"    model_version_policy {{ {policy} }}")
        for label, version in (labels or {}).get(name, {}).items():
            lines.append(f'    version_labels {{ key: "{label}" value: {version} }}')
        entries.append("  config {\n" + "\n".join(lines) + "\n  }")
    path.write_text("model_config_list {\n" + "\n".join(entries) + "\n}\n")
    return path


def build_examples(base_path: Path, version: int = 1) -> Path:
    """The digits classifier on serialized tf.Examples (feature `pixels`, 64 floats), as
    TF Serving's classify and regress methods take them: a TF1-style SavedModel, since
    only its builder writes those methods into a signature. Signatures:

    - `serving_default` (predict): `pixels` (f32[None, 64]) -> `probabilities`;
    - `classify` (classify): `inputs` -> `classes` ("0".."9", string[None, 10]), `scores`;
    - `classify_scores` (classify): `inputs` -> `scores` alone;
    - `regress` (regress): `inputs` -> `outputs`, the expected digit (f32[None]), the sum
      of each digit times its probability;
    - `regress_column` (regress): the same as f32[None, 1].
    """
    logits = digits_keras.train().layers[0]
    w1, b1 = logits.get_layer("hidden").get_weights()
    w2, b2 = logits.get_layer("logits").get_weights()
    v1 = tf.compat.v1
    signature = v1.saved_model.signature_def_utils

    def probabilities(pixels):
        hidden = tf.nn.relu(tf.matmul(pixels * dt.PIXEL_SCALE, w1) + b1)
        return tf.nn.softmax(tf.matmul(hidden, w2) + b2)

    with tf.Graph().as_default() as graph:
        examples = v1.placeholder(tf.string, [None], name="tf_example")
        features = {dt.INPUT: tf.io.FixedLenFeature([dt.N_PIXELS], tf.float32)}
        scores = probabilities(tf.io.parse_example(examples, features)[dt.INPUT])
        labels = tf.constant([[str(d) for d in range(dt.N_CLASSES)]])
        classes = tf.tile(labels, [tf.shape(scores)[0], 1])
        expected = tf.reduce_sum(scores * tf.range(float(dt.N_CLASSES)), axis=1)
        pixels = v1.placeholder(tf.float32, [None, dt.N_PIXELS], name=dt.INPUT)
        predict = signature.predict_signature_def(
            {dt.INPUT: pixels}, {dt.OUTPUT: probabilities(pixels)}
        )
        signatures = {
            "serving_default": predict,
            "classify": signature.classification_signature_def(examples, classes, scores),
            "classify_scores": signature.classification_signature_def(examples, None, scores),
            "regress": signature.regression_signature_def(examples, expected),
            "regress_column": signature.regression_signature_def(examples, expected[:, None]),
        }
        builder = v1.saved_model.Builder(str(base_path / str(version)))
        with v1.Session(graph=graph) as session:
            builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map=signatures)
        builder.save()
    return base_path


def build_undeclared_shapes(base_path: Path, version: int = 1) -> Path:
    """`y = x / 2 + 3` as a TF1 graph (`x`: f32[None, 1]) whose signature declares its
    tensors without their shapes, as some TF1 exporters wrote them (TF Serving's own
    test model `saved_model_half_plus_three` is one): TensorFlow's TF2 loader refuses it,
    TF Serving serves it."""
    v1 = tf.compat.v1
    with tf.Graph().as_default() as graph:
        x = v1.placeholder(tf.float32, [None, 1], name="x")
        half = tf.Variable(0.5, name="half")
        y = tf.add(x * half, 3.0, name="y")
        inputs, outputs = v1.saved_model.build_tensor_info(x), v1.saved_model.build_tensor_info(y)
        for info in (inputs, outputs):
            info.tensor_shape.Clear()  # declared as a scalar: not what the graph holds
        predict = v1.saved_model.signature_def_utils.build_signature_def(
            {"x": inputs}, {"y": outputs}, "tensorflow/serving/predict"
        )
        builder = v1.saved_model.Builder(str(base_path / str(version)))
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            signatures = {"serving_default": predict}
            builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map=signatures)
        builder.save()
    return base_path


class _Counting(tf.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = tf.Variable(0, dtype=tf.int64)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def serve(self, x):
        calls = self.calls.assign_add(1)
        return {"y": x * 2.0, "calls": tf.fill(tf.shape(x), calls)}


def build_counting(base_path: Path, version: int = 1, warmup: int = 0,
                   warmup_input: str = "x") -> Path:  # fmt: skip
    """`counting`: `serving_default` takes `x` (f32[None]) and returns `y` (2x) and
    `calls`, how many times the signature has run in its process, this run counted, on
    each row: it shows whether warm-up records ran before the first request. With
    `warmup`, that many PredictLog records (x = [1.0], under the input name
    `warmup_input`) in the version's assets.extra/tf_serving_warmup_requests."""
    module = _Counting()
    directory = base_path / str(version)
    tf.saved_model.save(module, str(directory), signatures={"serving_default": module.serve})
    if warmup:
        write_warmup(directory, [{warmup_input: tf.make_tensor_proto([1.0], tf.float32)}] * warmup)
    return base_path


def write_warmup(version_dir: Path, requests: list[dict]) -> Path:
    """TF Serving's warm-up file: a TFRecord of PredictionLog, one PredictLog of the
    default signature per request ({input name: TensorFlow's TensorProto})."""
    from accel_base.proto.tfserving.tensorflow.core.framework import tensor_pb2
    from accel_base.proto.tfserving.tensorflow_serving.apis import prediction_log_pb2

    path = version_dir / "assets.extra" / "tf_serving_warmup_requests"
    path.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for inputs in requests:
            log = prediction_log_pb2.PredictionLog()
            log.predict_log.request.model_spec.name = "model"
            for name, proto in inputs.items():
                log.predict_log.request.inputs[name].CopyFrom(
                    tensor_pb2.TensorProto.FromString(proto.SerializeToString())
                )
            writer.write(log.SerializeToString())
    return path
