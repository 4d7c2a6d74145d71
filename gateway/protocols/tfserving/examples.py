"""tf.Examples for TF Serving's classify and regress methods: a request's `Input` as the
serialized examples its signature takes, and REST's JSON `examples` and `context` as an
`Input`.

With a context, each example is fed as the context's bytes followed by the example's, as
TF Serving feeds it: parsed as one Example, a feature in both is the example's (the
later entry of a protobuf map wins). A JSON feature's first value fixes its kind (an
integer or a bool: int64; a decimal, NaN or Infinity: float; a string or {"b64": ...}:
bytes) and every later value must be of that kind, with TF Serving's words when not.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Any

from accel_base.proto.tfserving.tensorflow.core.example import example_pb2
from accel_base.proto.tfserving.tensorflow_serving.apis import input_pb2
from backends.tfserving.warmup import example_bytes
from gateway.protocols.tfserving.errors import invalid

_INT64 = (-(2**63), 2**63 - 1)
_DEBUG_CHARS = 256  # of the request shown in an error, as TF Serving cuts it
_JSON_TYPES = {type(None): "Null", list: "Array", dict: "Object", str: "String", int: "Number",
               float: "Number"}  # fmt: skip


def serialized_examples(given: Any, max_bytes: int) -> list[bytes]:
    """The examples of a tensorflow.serving.Input, each as the bytes its signature parses
    (backends/tfserving/warmup.py makes them: a warm-up record's are made the same way).
    The context is copied into each example: past `max_bytes` in all, refused before
    anything is copied (a small request must not make a large one)."""
    kind = given.WhichOneof("kind")
    if kind == "example_list_with_context":
        listed = given.example_list_with_context
        size = listed.context.ByteSize() * len(listed.examples)
        size += sum(e.ByteSize() for e in listed.examples)
        if size > max_bytes:
            raise invalid(f"the examples come to {size} bytes with the context in each, over "
                          f"the {max_bytes}-byte limit; send fewer examples or a smaller "
                          "context")  # fmt: skip
    examples = example_bytes(given)
    if not examples:
        raise invalid("Input is empty.")
    return examples


def shown(body: Any) -> str:
    """A request's JSON in an error, cut as TF Serving cuts it."""
    try:
        text = json.dumps(body)
    except RecursionError:
        return "(a document nested too deep to show)"
    return text if len(text) <= _DEBUG_CHARS else text[:_DEBUG_CHARS] + "..."


def _json_type(value: Any) -> str:
    """The type's name as TF Serving's errors say it (rapidjson's)."""
    if isinstance(value, bool):
        return "True" if value else "False"
    return _JSON_TYPES.get(type(value), "Object")


def _kind(value: Any, feature: str) -> str:
    """int64, uint64 (which no feature holds), float or bytes; else TF Serving's refusal."""
    if isinstance(value, int):  # a bool too: 1 or 0
        if _INT64[0] <= value <= _INT64[1]:
            return "int64"
        if 0 < value < 2**64:
            return "uint64"
        return "float"  # past uint64 too: a double, as rapidjson reads it
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "bytes"
    if isinstance(value, dict) and list(value) == ["b64"] and isinstance(value["b64"], str):
        return "bytes"
    raise invalid(f"Feature: {feature} has element with unexpected JSON type: "
                  f"{_json_type(value)}")  # fmt: skip


def _float(value: float | int) -> float:
    try:
        return float(value)
    except OverflowError:  # an integer of hundreds of digits
        return math.inf if value > 0 else -math.inf


def _bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    text = value["b64"]
    try:  # (padding may be left out, as TF Serving's decoder allows)
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise invalid("Unable to base64 decode") from None


def _add_feature(example: Any, name: str, value: Any) -> None:
    values = value if isinstance(value, list) else [value]
    feature = example.features.feature[name]
    feature.Clear()  # a key given twice: the last one, as TF Serving's
    if not values:
        return  # a feature of no kind, still named
    kind = _kind(values[0], name)
    for item in values[1:]:
        found = _kind(item, name)
        if found != kind and not (found == "uint64" and kind == "int64"):
            raise invalid(f"Unexpected element type in feature: {name} expecting type: {kind}")
    if kind == "uint64" or (kind == "int64" and any(_kind(v, name) == "uint64" for v in values)):
        raise invalid(f"Feature: {name} has uint64_t element. Only int64_t is supported.")
    if kind == "int64":
        feature.int64_list.value.extend(int(v) for v in values)
    elif kind == "float":
        feature.float_list.value.extend(_float(v) for v in values)
    else:
        feature.bytes_list.value.extend(_bytes(v) for v in values)


def _example(value: Any) -> Any:
    if not isinstance(value, dict):
        raise invalid(f"Example must be JSON object but got JSON {_json_type(value)}")
    example = example_pb2.Example()
    for name, feature in value.items():
        _add_feature(example, name, feature)
    return example


def input_from_json(body: Any) -> Any:
    """REST's `:classify` / `:regress` body (parsed) as a tensorflow.serving.Input."""
    given = input_pb2.Input()
    context = None
    if "context" in body:  # read first, as TF Serving reads it
        context = _example(body["context"])
    if "examples" not in body:
        raise invalid(f"JSON Value: {shown(body)} When method is classify, key 'examples' "
                      "is expected and was not found")  # fmt: skip
    examples = body["examples"]
    if not isinstance(examples, list):
        raise invalid(f"JSON Value: {shown(body)} Expecting 'examples' value to be an "
                      "list/array")  # fmt: skip
    if not examples:
        raise invalid(f"JSON Value: {shown(body)} 'examples' value is an empty array")
    if context is not None:
        listed = given.example_list_with_context
        listed.context.CopyFrom(context)
    else:
        listed = given.example_list
    for value in examples:
        listed.examples.append(_example(value))
    return given
