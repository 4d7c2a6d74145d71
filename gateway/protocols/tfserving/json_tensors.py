"""TF Serving's JSON tensors (its REST API's `instances` / `inputs`, and `predictions` /
`outputs` back) to and from numpy, by the signature's datatypes.

- Row format (`instances`): a list, one element per row; with one input, each element is
  that input's row (or an object naming it), with several, an object of them all. Rows
  are stacked, so every row of an input must have the same shape.
- Columnar format (`inputs`): the whole tensor of each input, or the one input's itself.
- Strings are JSON strings or `{"b64": ...}` for bytes that are not text; an output whose
  name ends in `_bytes` is written as `{"b64": ...}`. NaN and Infinity are accepted and
  written as TF Serving writes them.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import struct
from typing import Any

import grpc
import numpy as np

from accel_base.datatypes import NUMPY_DTYPES
from accel_base.proto.tfserving.tensorflow.core.framework import types_pb2
from gateway.protocols.tfserving.errors import TfsError, invalid
from gateway.protocols.tfserving.tensor_proto import MAX_RANK, V2_TO_DT

Specs = dict[str, str]  # an input's or output's name -> its V2 datatype
_F32 = struct.Struct("<f")


def _shape_of(value: Any, name: str) -> tuple[int, ...]:
    """The shape of a nested list, refused when its rows differ in length."""
    shape = []
    level = value
    while isinstance(level, list):
        if len(shape) == MAX_RANK:
            raise invalid(f"input '{name}' nests deeper than {MAX_RANK} levels")
        shape.append(len(level))
        if not level:
            break
        level = level[0]
    _check_regular(value, tuple(shape), name)
    return tuple(shape)


def _check_regular(value: Any, shape: tuple[int, ...], name: str, level: int = 0) -> None:
    # TF Serving's words, then ours: input `name` is ragged, which a tensor cannot be.
    ragged = f" (input '{name}' is ragged: every row of a tensor must have the same shape)"
    if not shape:
        if isinstance(value, list):
            raise invalid(f"Encountered list at unexpected level: {level} expected < "
                          f"{level}{ragged}")  # fmt: skip
        return
    if not isinstance(value, list):
        expected = level + len(shape)
        raise invalid(f"JSON Value: {json.dumps(value)} found at incorrect level: {level + 1} "
                      f"in the JSON DOM. Expected at level: {expected}{ragged}")  # fmt: skip
    if len(value) != shape[0]:
        raise invalid(f"Encountered list at unexpected size: {len(value)} at level: {level} "
                      f"expected size: {shape[0]}{ragged}")  # fmt: skip
    for item in value:
        _check_regular(item, shape[1:], name, level + 1)


def _flatten(value: Any, depth: int) -> list[Any]:
    if depth == 0:
        return [value]
    flat: list[Any] = []
    for item in value:
        flat.extend(_flatten(item, depth - 1))
    return flat


def _string(item: Any, name: str) -> bytes:
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, dict) and set(item) == {"b64"} and isinstance(item["b64"], str):
        text = item["b64"]
        try:  # (padding may be left out, as TF Serving's decoder allows)
            return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
        except binascii.Error:
            raise invalid(f"Unable to base64 decode (input '{name}')") from None
    if isinstance(item, dict):
        raise invalid(f"JSON Value: {json.dumps(item)} not formatted correctly for base64 data "
                      f"(input '{name}': give {{\"b64\": \"<base64>\"}})")  # fmt: skip
    raise _type_error(item, "string", name)


def _json_kind(item: Any) -> str:
    if isinstance(item, bool):
        return "True" if item else "False"
    if isinstance(item, (int, float)):
        return "Number"
    if isinstance(item, str):
        return "String"
    if isinstance(item, dict):
        return "Object"
    return "Null" if item is None else "Array"


def _type_error(item: Any, expected: str, name: str) -> Exception:
    return invalid(f"JSON Value: {json.dumps(item)} Type: {_json_kind(item)} is not of expected "
                   f"type: {expected} (input '{name}')")  # fmt: skip


def _check_numbers(flat: list[Any], datatype: str, name: str) -> None:
    integral = datatype not in ("FP16", "FP32", "FP64", "BF16")
    expected = tf_type(datatype)[3:].lower()  # DT_FLOAT: float
    for item in flat:
        if datatype == "BOOL":
            wrong = not isinstance(item, bool)
        else:  # a number (an integer for an integral type), never a boolean
            wrong = isinstance(item, bool) or not isinstance(item, (int, float))
            wrong = wrong or (integral and isinstance(item, float))
        if wrong:
            raise _type_error(item, expected, name)


def to_array(value: Any, datatype: str, name: str) -> np.ndarray:
    """One tensor's JSON value as an array of the V2 datatype."""
    shape = _shape_of(value, name)
    flat = _flatten(value, len(shape))
    if datatype == "BYTES":
        array = np.empty(len(flat), dtype=object)
        array[:] = [_string(item, name) for item in flat]
        return array.reshape(shape)
    if datatype == "BF16":  # (as TF Serving: its JSON reader has no bfloat16)
        raise TfsError(grpc.StatusCode.UNIMPLEMENTED,
                       f"Conversion of JSON Value to type: bfloat16 (input '{name}')")  # fmt: skip
    _check_numbers(flat, datatype, name)
    dtype = NUMPY_DTYPES[datatype]
    try:
        array = np.array(flat, dtype=dtype)  # (numpy 2 refuses an integer out of range)
    except OverflowError:
        raise invalid(f"input '{name}': a value is out of range for {tf_type(datatype)}") from None
    return array.reshape(shape)


def _row_inputs(instances: Any, specs: Specs) -> dict[str, np.ndarray]:
    if not isinstance(instances, list):
        raise invalid("Expecting 'instances' to be an list/array")
    if not instances:
        raise invalid("No values in 'instances' array")
    names = list(specs)
    objects = _is_object(instances[0])
    if not objects:
        if len(names) > 1:
            raise invalid("instances is a plain list, but expecting list of objects as multiple "
                          "input tensors required as per tensorinfo_map "
                          f"({', '.join(names)})")  # fmt: skip
        for position, row in enumerate(instances):
            if _is_object(row):
                raise invalid(f"Expecting value/list but got object at item {position} of "
                              "input list")  # fmt: skip
        name = names[0]
        return {name: to_array(instances, specs[name], name)}
    columns: dict[str, list[Any]] = {name: [] for name in names}
    for position, row in enumerate(instances):
        if not _is_object(row):
            raise invalid(f"Expecting object but got list at item {position} of input list")
        unknown = sorted(set(row) - set(names))
        if unknown:
            raise invalid(f"Failed to process element: {position} key: {unknown[0]} of "
                          "'instances' list. Error: INVALID_ARGUMENT: JSON object: does not "
                          f"have named input: {unknown[0]}")  # fmt: skip
        if len(row) != len(names):
            raise invalid(f"Failed to process element: {position} of 'instances' list. JSON "
                          f"object: keys must be equal to: {','.join(sorted(names))}")  # fmt: skip
        for name in names:
            columns[name].append(row[name])
    return {name: to_array(column, specs[name], name) for name, column in columns.items()}


def _is_object(value: Any) -> bool:
    """An object of named inputs (a `{"b64": ...}` one is a value)."""
    return isinstance(value, dict) and not (len(value) == 1 and "b64" in value)


def _column_inputs(inputs: Any, specs: Specs) -> dict[str, np.ndarray]:
    names = list(specs)
    if _is_object(inputs):  # (other keys are left alone, as TF Serving leaves them)
        for name in names:
            if name not in inputs:
                raise invalid(f"Missing named input: {name} in 'inputs' object.")
        return {name: to_array(inputs[name], specs[name], name) for name in names}
    if len(names) != 1:
        raise invalid("inputs is a plain value/list, but expecting an object as multiple input "
                      f"tensors required as per tensorinfo_map ({', '.join(names)})")  # fmt: skip
    return {names[0]: to_array(inputs, specs[names[0]], names[0])}


def request_inputs(body: Any, specs: Specs) -> tuple[dict[str, np.ndarray], bool]:
    """The inputs of a `:predict` body, and whether it was in row format."""
    if not isinstance(body, dict):
        raise invalid(f"JSON Value: {json.dumps(body)[:256]} Is not object")
    if "instances" in body and "inputs" in body:
        raise invalid("Not formatted correctly expecting only one of 'inputs' or 'instances' "
                      "keys to exist (row format or columnar: send one)")  # fmt: skip
    if "instances" in body:
        return _row_inputs(body["instances"], specs), True
    if "inputs" in body:
        return _column_inputs(body["inputs"], specs), False
    raise invalid("Missing 'inputs' or 'instances' key")


def float_text(value: float, single: bool) -> str:
    """As TF Serving writes a float: `%g`, or all the digits when `%g` does not read back
    as the same value, with `.0` on a whole number; NaN and Infinity bare."""
    if value != value:
        return "NaN"
    if value in (math.inf, -math.inf):
        return "Infinity" if value > 0 else "-Infinity"
    text = f"{value:g}"
    try:
        same = (_F32.unpack(_F32.pack(float(text)))[0] if single else float(text)) == value
    except OverflowError:
        same = False
    if not same:
        text = f"{value:.9g}" if single else f"{value:.17g}"
    return text if "." in text or "e" in text else text + ".0"


def _element_texts(array: np.ndarray, datatype: str, name: str) -> list[str]:
    flat = array.reshape(-1)
    if datatype == "BYTES":
        if name.endswith("_bytes"):
            return [f'{{"b64": "{base64.b64encode(bytes(b)).decode()}"}}' for b in flat]
        return [json.dumps(bytes(b).decode("utf-8", "replace")) for b in flat]
    if datatype in ("FP32", "FP16", "BF16"):
        if datatype == "BF16":  # its bit patterns, as the batch carries them
            flat = (flat.astype(np.uint32) << 16).view(np.float32)
        return [float_text(v, True) for v in flat.astype(np.float32).tolist()]
    if datatype == "FP64":
        return [float_text(v, False) for v in flat.tolist()]
    if datatype == "BOOL":
        return ["true" if v else "false" for v in flat.tolist()]
    return [str(v) for v in flat.tolist()]


def _items(texts: list[str], shape: tuple[int, ...]) -> list[str]:
    """The JSON of each item along the first dimension of a tensor of element `texts`."""
    if len(shape) == 1:
        return texts
    step = len(texts) // shape[0] if shape[0] else 0
    return [_nest(texts[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


def _nest(texts: list[str], shape: tuple[int, ...]) -> str:
    return texts[0] if not shape else "[" + ", ".join(_items(texts, shape)) + "]"


def tensor_text(array: np.ndarray, datatype: str, name: str) -> str:
    """One output as TF Serving's JSON."""
    return _nest(_element_texts(array, datatype, name), array.shape)


def _rows(array: np.ndarray, datatype: str, name: str) -> list[str]:
    return _items(_element_texts(array, datatype, name), array.shape)


def response_text(outputs: dict[str, tuple[np.ndarray, str]], row: bool) -> str:
    """The JSON answer: `predictions` in row format, `outputs` in columnar; a lone output
    without its name."""
    if not row:
        if len(outputs) == 1:
            ((name, (array, datatype)),) = outputs.items()
            return f'{{"outputs": {tensor_text(array, datatype, name)}}}'
        named = (f"{json.dumps(n)}: {tensor_text(a, d, n)}" for n, (a, d) in outputs.items())
        return '{"outputs": {' + ", ".join(named) + "}}"
    batch = None
    for name, (array, _) in outputs.items():
        if array.ndim == 0:
            raise invalid(f"Tensor name: {name} has no shape information ")
        if batch is not None and array.shape[0] != batch:
            raise invalid(f"Tensor name: {name} has inconsistent batch size: {array.shape[0]} "
                          f"expecting: {batch}")  # fmt: skip
        batch = array.shape[0]
    if len(outputs) == 1:
        ((name, (array, datatype)),) = outputs.items()
        return '{"predictions": [' + ", ".join(_rows(array, datatype, name)) + "]}"
    columns = {json.dumps(n): _rows(a, d, n) for n, (a, d) in outputs.items()}
    rows = ("{" + ", ".join(f"{n}: {c[i]}" for n, c in columns.items()) + "}"
            for i in range(batch or 0))  # fmt: skip
    return '{"predictions": [' + ", ".join(rows) + "]}"


def tf_type(datatype: str) -> str:
    """The TensorFlow DataType name of a V2 datatype (DT_FLOAT for FP32)."""
    return types_pb2.DataType.Name(V2_TO_DT[datatype])
