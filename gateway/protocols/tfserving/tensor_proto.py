"""TensorFlow's TensorProto to and from numpy, by TensorFlow's rules.

In: `tensor_content` (the raw little-endian bytes) when set, else the `*_val` field of
the dtype, where the last value repeats to fill the shape and none means zeros, as
TensorFlow's own parser reads them. Out: the `*_val` field of the dtype, as TF Serving
writes a Predict's outputs (its clients read `float_val` and the rest).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from accel_base.datatypes import NUMPY_DTYPES
from gateway.protocols.tfserving.errors import invalid

# TensorFlow's DataType numbers (types.proto) <-> V2 datatypes.
DT_TO_V2 = {
    1: "FP32", 2: "FP64", 3: "INT32", 4: "UINT8", 5: "INT16", 6: "INT8", 7: "BYTES",
    9: "INT64", 10: "BOOL", 14: "BF16", 17: "UINT16", 19: "FP16", 22: "UINT32", 23: "UINT64",
}  # fmt: skip
V2_TO_DT = {v: k for k, v in DT_TO_V2.items()}
# Which `*_val` field holds each datatype's values (half_val: FP16 and BF16 bit patterns).
_FIELD = {
    "FP32": "float_val", "FP64": "double_val", "INT32": "int_val", "UINT8": "int_val",
    "INT16": "int_val", "INT8": "int_val", "UINT16": "int_val", "INT64": "int64_val",
    "BOOL": "bool_val", "BYTES": "string_val", "FP16": "half_val", "BF16": "half_val",
    "UINT32": "uint32_val", "UINT64": "uint64_val",
}  # fmt: skip


def datatype_of(dtype: int, name: str) -> str:
    datatype = DT_TO_V2.get(dtype)
    if datatype is None:
        raise invalid(f"input '{name}' has TensorFlow dtype {dtype}, which is not served "
                      "(complex, quantized, resource and variant tensors are not)")  # fmt: skip
    return datatype


MAX_RANK = 32


def to_array(proto: Any, name: str, max_bytes: int) -> tuple[np.ndarray, str]:
    """An input's TensorProto as an array and its V2 datatype; refused past `max_bytes`
    (a few `*_val` values may stand for a tensor of any size)."""
    datatype = datatype_of(proto.dtype, name)
    if proto.tensor_shape.unknown_rank:
        raise invalid(f"input '{name}' has an unknown rank; give its shape")
    shape = tuple(d.size for d in proto.tensor_shape.dim)
    if any(d < 0 for d in shape) or len(shape) > MAX_RANK:
        raise invalid(f"input '{name}' has shape {list(shape)}: give at most {MAX_RANK} "
                      "dimensions, none negative")  # fmt: skip
    count = math.prod(shape)  # (Python's integers: no wrap-around)
    itemsize = 8 if datatype == "BYTES" else NUMPY_DTYPES[datatype].itemsize
    if count * itemsize > max_bytes:
        raise invalid(f"input '{name}' of shape {list(shape)} would take {count * itemsize} "
                      f"bytes, over the server's limit of {max_bytes}")  # fmt: skip
    if proto.tensor_content and datatype != "BYTES":
        dtype = NUMPY_DTYPES[datatype].newbyteorder("<")
        if len(proto.tensor_content) != count * dtype.itemsize:
            raise invalid(f"input '{name}': tensor_content holds {len(proto.tensor_content)} "
                          f"bytes, but shape {list(shape)} of {datatype} needs "
                          f"{count * dtype.itemsize}")  # fmt: skip
        return np.frombuffer(proto.tensor_content, dtype=dtype).reshape(shape), datatype
    values = getattr(proto, _FIELD[datatype])[:count]  # (extra values: ignored, as by TF)
    if datatype == "BYTES":
        flat = np.empty(len(values), dtype=object)
        flat[:] = list(values)
    elif datatype in ("FP16", "BF16"):
        bits = (np.array(values, dtype=np.int64) & 0xFFFF).astype(np.uint16)  # low 16 bits
        flat = bits.view(np.float16) if datatype == "FP16" else bits
    elif datatype in ("INT8", "UINT8", "INT16", "UINT16"):
        # int_val holds them as int32: TensorFlow keeps the low bits, as a C cast does.
        flat = np.array(values, dtype=np.int64).astype(NUMPY_DTYPES[datatype])
    else:
        flat = np.array(values, dtype=NUMPY_DTYPES[datatype])
    if len(flat) == count:
        return flat.reshape(shape), datatype
    # As TensorFlow reads it: the last value repeats to fill the shape; none, zeros.
    filled = np.empty(count, dtype=flat.dtype)
    filled[: len(flat)] = flat
    filled[len(flat) :] = flat[-1] if len(flat) else (b"" if datatype == "BYTES" else 0)
    return filled.reshape(shape), datatype


def fill(proto: Any, array: np.ndarray, datatype: str) -> None:
    """Write an output into a TensorProto."""
    proto.dtype = V2_TO_DT[datatype]
    for size in array.shape:
        proto.tensor_shape.dim.add().size = size
    flat = array.reshape(-1)
    values = getattr(proto, _FIELD[datatype])
    if datatype == "BYTES":
        values.extend(bytes(v) for v in flat)
    elif datatype in ("FP16", "BF16"):  # their bit patterns, one to an int32
        values.extend(flat.view(np.uint16).tolist())
    else:
        values.extend(flat.tolist())
