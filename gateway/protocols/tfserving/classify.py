"""TF Serving's classify and regress methods, and MultiInference over both.

A classify or regress signature takes one input, `inputs`, the serialized tf.Examples
(examples.py), and answers `classes` and/or `scores` ([batch, classes]) or `outputs`
([batch] or [batch, 1]) of floats. The signature runs as any other: its repository
model `<model>:<signature>` (served.py), through the batcher. Its structure is checked
before it runs and its answer after, with TF Serving's words; its `method_name` only
when `--enable_signature_method_name_check` asks (TF2's saver writes "predict" into
every signature, so TF Serving leaves it unchecked by default).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np

from accel_base.proto.tfserving.tensorflow_serving.apis import (
    classification_pb2,
    regression_pb2,
)
from gateway.core.inference import Tensor
from gateway.core.interface import Core
from gateway.protocols.tfserving.errors import TfsError, invalid
from gateway.protocols.tfserving.examples import serialized_examples
from gateway.protocols.tfserving.json_tensors import float_text, tf_type
from gateway.protocols.tfserving.metadata import latest_version, method_name
from gateway.protocols.tfserving.served import (
    DEFAULT_SIGNATURE,
    Served,
    SignatureMissing,
    TfServing,
)

PREDICT = "tensorflow/serving/predict"
CLASSIFY = "tensorflow/serving/classify"
REGRESS = "tensorflow/serving/regress"
INPUTS, CLASSES, SCORES, OUTPUTS = "inputs", "classes", "scores", "outputs"


@dataclass(frozen=True)
class Spec:
    """A request's model spec: the name, the version or label, and the signature."""

    name: str
    version: int | None
    label: str
    signature: str  # "" for serving_default

    @property
    def signature_key(self) -> str:
        return self.signature or DEFAULT_SIGNATURE


def _described(served: Served) -> str:
    inputs = ", ".join(f"{n} ({d})" for n, d in served.inputs.items())
    outputs = ", ".join(f"{n} ({d})" for n, d in served.outputs.items())
    return f"inputs {{{inputs}}} outputs {{{outputs}}}"


def _check_classify(served: Served) -> list[str]:
    """The outputs a classify signature is asked for, or TF Serving's refusal."""
    if len(served.inputs) != 1:
        raise invalid("Expected one input Tensor.")
    if len(served.outputs) not in (1, 2):
        raise invalid(f"Expected one or two output Tensors, found {len(served.outputs)}")
    if INPUTS not in served.inputs:
        raise invalid(f"No classification inputs found in SignatureDef: {_described(served)}")
    asked = [o for o in (CLASSES, SCORES) if o in served.outputs]
    if not asked:
        raise invalid('Expected classification signature outputs to contain at least one of '
                      f'"classes" or "scores". Signature was: {_described(served)}')  # fmt: skip
    return asked


def _check_regress(served: Served) -> list[str]:
    if len(served.inputs) != 1:
        raise invalid("Expected one input Tensor.")
    if len(served.outputs) != 1:
        raise invalid("Expected one output Tensor.")
    if INPUTS not in served.inputs:
        raise invalid(f"No regression inputs found in SignatureDef: {_described(served)}")
    if OUTPUTS not in served.outputs:
        raise invalid(f"No regression outputs found in SignatureDef: {_described(served)}")
    return [OUTPUTS]


_CHECKS = {CLASSIFY: _check_classify, REGRESS: _check_regress}
_WHAT = {CLASSIFY: "classification", REGRESS: "regression"}
_NO_SIGNATURE = "No signature was found with the name"
_NOT_IN_GRAPH = "Requested signature not found in model graph"


def _shape(array: np.ndarray) -> str:
    return "[" + ",".join(str(d) for d in array.shape) + "]"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else bytes(value).decode("utf-8", "replace")


def _classifications(answer: dict[str, Tensor], count: int) -> Any:
    """ClassificationResult: per example, a class per column, in the tensor's order (a
    label "" without `classes`, a score 0 without `scores`)."""
    for key, datatype in ((CLASSES, "BYTES"), (SCORES, "FP32")):
        tensor = answer.get(key)
        if tensor is None:
            continue
        if tensor.data.ndim != 2:
            raise invalid("Expected Tensor shape: [batch_size num_classes] but got "
                          f"{_shape(tensor.data)}")  # fmt: skip
        if tensor.datatype != datatype:
            raise invalid(f"Expected {key} Tensor of {tf_type(datatype)}. "
                          f"Got: {tf_type(tensor.datatype)}")  # fmt: skip
        if tensor.data.shape[0] != count:
            raise invalid(f"Expected {key} output batch size of {count}. "
                          f"Got: {tensor.data.shape[0]}")  # fmt: skip
    classes, scores = answer.get(CLASSES), answer.get(SCORES)
    if classes is not None and scores is not None and classes.data.shape[1] != scores.data.shape[1]:
        raise invalid("Tensors class and score should match in dim_size(1). Got "
                      f"{classes.data.shape[1]} vs. {scores.data.shape[1]}")  # fmt: skip
    width = (classes if classes is not None else scores).data.shape[1]  # type: ignore[union-attr]
    labels = [[_text(b) for b in row] for row in classes.data] if classes is not None else None
    values = scores.data.astype(np.float32).tolist() if scores is not None else None
    result = classification_pb2.ClassificationResult()
    for i in range(count):
        row = result.classifications.add()
        for j in range(width):
            one = row.classes.add()
            if labels is not None:
                one.label = labels[i][j]
            if values is not None:
                one.score = values[i][j]
    return result


def _regressions(answer: dict[str, Tensor], count: int) -> Any:
    tensor = answer[OUTPUTS]
    data = tensor.data
    if not (data.ndim == 1 or (data.ndim == 2 and data.shape[1] == 1)):
        raise invalid("Expected output Tensor shape to be either [batch_size] or "
                      f"[batch_size, 1] but got {_shape(data)}")  # fmt: skip
    if data.shape[0] != count:
        raise invalid(f"Input batch size did not match output batch size: {count} vs. "
                      f"{data.shape[0]}")  # fmt: skip
    if tensor.datatype != "FP32":
        raise invalid(f"Expected output Tensor of DT_FLOAT.  Got: {tf_type(tensor.datatype)}")
    result = regression_pb2.RegressionResult()
    for value in data.reshape(-1).tolist():
        result.regressions.add().value = value
    return result


def _spec_of(model_spec: Any, version: int | None) -> Any:
    """A response's ModelSpec: the name, the signature run and the version loaded."""
    spec = type(model_spec)()
    spec.name = model_spec.name
    spec.signature_name = model_spec.signature_name or DEFAULT_SIGNATURE
    if version is not None:
        spec.version.value = version
    return spec


@dataclass(frozen=True)
class Methods:
    """Classify and regress over TF Serving's models; `max_bytes` bounds the examples a
    request makes (its context is copied into each)."""

    core: Core
    tfs: TfServing
    max_bytes: int

    async def _served(self, spec: Spec, method: str, missing: str) -> tuple[Served, list[str]]:
        try:
            served = await self.tfs.served(self.core, spec.name, spec.version, spec.label,
                                           spec.signature_key)  # fmt: skip
        except SignatureMissing:
            raise invalid(f"{missing}: {spec.signature_key}") from None
        if self.tfs.method_check:
            found = await method_name(self.core, self.tfs, served, spec.signature_key)
            if found != method:
                raise invalid(f"Expected {_WHAT[method]} signature method_name to be {method}. "
                              f"Was: {found}")  # fmt: skip
        return served, _CHECKS[method](served)

    async def check_predict(self, served: Served, signature: str) -> None:
        """As TF Serving's Predict with --enable_signature_method_name_check: a signature
        of one of the three methods."""
        if not self.tfs.method_check:
            return
        found = await method_name(self.core, self.tfs, served, signature)
        if found not in (PREDICT, CLASSIFY, REGRESS):
            raise TfsError(grpc.StatusCode.INTERNAL,
                           "Expected prediction signature method_name to be one of "
                           f"{{{PREDICT}, {CLASSIFY}, {REGRESS}}}. Was: {found}")  # fmt: skip

    async def _result(self, served: Served, method: str, outputs: list[str],
                      examples: list[bytes]) -> tuple[Any, int]:  # fmt: skip
        data = np.empty(len(examples), dtype=object)
        data[:] = examples
        answer = await served.run(self.core, [Tensor(INPUTS, "BYTES", data)], outputs)
        produced = {t.name: t for t in answer.outputs}
        if method == CLASSIFY:
            result = _classifications(produced, len(examples))
        else:
            result = _regressions(produced, len(examples))
        return result, int(answer.model_version)

    async def run(self, spec: Spec, method: str, given: Any) -> tuple[Any, int]:
        """The signature's ClassificationResult or RegressionResult on the examples of
        `given` (a tensorflow.serving.Input), and the version run."""
        served, outputs = await self._served(spec, method, _NO_SIGNATURE)
        examples = serialized_examples(given, self.max_bytes)
        return await self._result(served, method, outputs, examples)

    async def classify(self, request: Any, spec: Spec) -> Any:
        result, version = await self.run(spec, CLASSIFY, request.input)
        response = classification_pb2.ClassificationResponse(result=result)
        response.model_spec.CopyFrom(_spec_of(request.model_spec, version))
        return response

    async def regress(self, request: Any, spec: Spec) -> Any:
        result, version = await self.run(spec, REGRESS, request.input)
        response = regression_pb2.RegressionResponse(result=result)
        response.model_spec.CopyFrom(_spec_of(request.model_spec, version))
        return response

    async def _version(self, first: Spec, signature: str) -> int:
        """The one version every task runs on: the first task's, or the latest (of
        those that have its signature when the model's own is not ready)."""
        _, version = self.tfs.labelled(first.name, first.version, first.label)
        if version is not None:
            return version
        try:
            return await latest_version(self.core, self.tfs, first.name)
        except TfsError:
            having = self.tfs.signatures.get(first.name, {}).get(signature)
            if not having:
                raise
            return max(having)

    async def multi_inference(self, tasks: list[tuple[Any, str]], first: Spec,
                              given: Any) -> list[tuple[Any, str, Any]]:  # fmt: skip
        """Each task (its model spec, its method) on the examples of `given` and the
        same version of one model, in the tasks' order: (model spec, method, result).
        Every task is checked, in order, before any runs."""
        version = await self._version(first, first.signature_key)
        seen: set[str] = set()
        checked = []
        for model_spec, method in tasks:
            if not model_spec.name:
                raise invalid("Found ModelSpec with an empty model name.")
            if model_spec.name != first.name:
                raise invalid("All ModelSpecs in a MultiInferenceRequest must access the same "
                              "model name.")  # fmt: skip
            signature = model_spec.signature_name or DEFAULT_SIGNATURE
            if signature in seen:
                raise invalid(f"Duplicate evaluation of signature: {signature}")
            seen.add(signature)
            if signature != DEFAULT_SIGNATURE and signature not in self.tfs.signatures.get(
                first.name, {}
            ):
                raise invalid(f"Requested signature not found in model graph: {signature}")
            if method not in _CHECKS:
                unsupported = f"Unsupported signature method_name: {method}"
                raise TfsError(grpc.StatusCode.UNIMPLEMENTED, unsupported)
            spec = Spec(first.name, version, "", signature)
            served, outputs = await self._served(spec, method, _NOT_IN_GRAPH)
            checked.append((model_spec, method, served, outputs))
        examples = serialized_examples(given, self.max_bytes)
        async with asyncio.TaskGroup() as group:  # one failing cancels the others
            runs = [group.create_task(self._result(served, method, outputs, examples))
                    for _, method, served, outputs in checked]  # fmt: skip
        return [(_spec_of(s, v), method, r)
                for (s, method, _, _), (r, v) in zip(checked, (t.result() for t in runs),
                                                     strict=True)]  # fmt: skip


def classify_json(result: Any) -> str:
    """REST's `:classify` answer: per example, [label, score] pairs."""
    rows = (
        "[" + ", ".join(f"[{json.dumps(c.label)}, {float_text(c.score, True)}]"
                        for c in classifications.classes) + "]"
        for classifications in result.classifications
    )  # fmt: skip
    return '{"results": [' + ", ".join(rows) + "]}"


def regress_json(result: Any) -> str:
    values = (float_text(r.value, True) for r in result.regressions)
    return '{"results": [' + ", ".join(values) + "]}"
