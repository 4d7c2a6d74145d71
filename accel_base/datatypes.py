"""V2 datatypes: their numpy form, their config names, and the BYTES wire format.

BF16 has no numpy dtype; it travels as raw 2-byte words and lives in numpy as
uint16 bit patterns, so it can only cross the wire in binary form.
BYTES elements are numpy object arrays of `bytes`.
"""

from __future__ import annotations

import json
import mmap
import struct
from typing import Any

import numpy as np

from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc

# V2 datatype -> numpy dtype of its in-memory form.
NUMPY_DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BF16": np.dtype(np.uint16),
    "BYTES": np.dtype(np.object_),
}

# Wire form of each fixed-size datatype: little-endian, as the V2 binary extension says.
WIRE_DTYPES: dict[str, np.dtype] = {
    name: dtype.newbyteorder("<") for name, dtype in NUMPY_DTYPES.items() if name != "BYTES"
}

# numpy dtype -> V2 datatype, for outputs whose datatype the backend reports by dtype.
_FROM_NUMPY: dict[np.dtype, str] = {
    dtype: name for name, dtype in NUMPY_DTYPES.items() if name not in ("BF16", "BYTES")
}

ALL_DATATYPES = tuple(NUMPY_DTYPES)


def datatype_of(array: np.ndarray) -> str:
    """The V2 datatype of a numpy array (object and string arrays are BYTES)."""
    if array.dtype.kind in ("O", "S", "U"):
        return "BYTES"
    try:
        return _FROM_NUMPY[array.dtype]
    except KeyError:
        raise InvalidArgument(f"numpy dtype {array.dtype} has no V2 datatype") from None


def check_datatype(datatype: str, where: str) -> str:
    if datatype not in NUMPY_DTYPES:
        raise InvalidArgument(
            f"{where}: unknown datatype '{datatype}', expected one of {', '.join(ALL_DATATYPES)}"
        )
    return datatype


MAX_DIMS = 64  # numpy's limit
MAX_ELEMENTS = 2**62 // 16  # so that no element count times an item size overflows int64


def check_shape(shape: tuple[int, ...], where: str) -> tuple[int, ...]:
    """A shape numpy can hold: at most 64 dimensions, and (ignoring zero dimensions, which
    make an empty tensor) no more elements than an int64 byte count can address."""
    if len(shape) > MAX_DIMS:
        raise InvalidArgument(f"{where}: shape has {len(shape)} dimensions, at most {MAX_DIMS}")
    count = 1
    for dim in shape:
        count *= dim or 1
        if count > MAX_ELEMENTS:
            raise InvalidArgument(f"{where}: shape {list(shape)} is too large")
    return shape


def element_count(shape: tuple[int, ...] | list[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def from_raw(
    raw: bytes | memoryview, datatype: str, shape: tuple[int, ...], where: str
) -> np.ndarray:
    """Turn wire bytes into an array: zero-copy for fixed-size types, parsed for BYTES."""
    count = element_count(shape)
    if datatype == "BYTES":
        return deserialize_bytes(raw, count, where).reshape(shape)
    wire = WIRE_DTYPES[datatype]
    expected = count * wire.itemsize
    if len(raw) != expected:
        raise InvalidArgument(
            f"{where} got unexpected byte size {len(raw)}, expected {expected} "
            f"({datatype} shape {list(shape)})"
        )
    return np.frombuffer(raw, dtype=wire).reshape(shape)


def to_raw(array: np.ndarray, datatype: str) -> bytes:
    """Serialize an array to its wire bytes (row-major, little-endian)."""
    if datatype == "BYTES":
        return serialize_bytes(array)
    wire = WIRE_DTYPES[datatype]
    if array.dtype != wire:
        array = array.astype(wire)
    return np.ascontiguousarray(array).tobytes()


# Below this many bytes a copy costs less than the calls that make a view.
VIEW_FROM_BYTES = 64 * 1024


def raw_view(array: np.ndarray, datatype: str) -> bytes | memoryview:
    """to_raw without its copy where the array holds its wire bytes already: a view that
    keeps the array alive, which a writer may hand to the socket as it is (a backend's
    outputs are its callers' once `run` returns: backends/base.py). Memory shared with
    another process (a worker's output arena) is copied: a slow client must not hold it."""
    if (
        datatype == "BYTES"
        or array.nbytes < VIEW_FROM_BYTES
        or array.dtype != WIRE_DTYPES[datatype]
        or _mapped(array)
    ):
        return to_raw(array, datatype)
    return memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))


def _mapped(array: np.ndarray) -> bool:
    """Whether the array's memory is a mapping (an mmap, or a buffer over one)."""
    base = array
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return isinstance(base, mmap.mmap)


def deserialize_bytes(
    raw: bytes | memoryview, count: int, where: str, rest_allowed: bool = False
) -> np.ndarray:
    """Parse `count` length-prefixed (uint32 little-endian) elements; bytes after them are
    refused unless `rest_allowed`."""
    view = memoryview(raw)
    if count > len(view) // 4:  # each element needs at least its 4-byte length
        raise InvalidArgument(
            f"{where}: {len(view)} bytes cannot hold {count} BYTES elements "
            "(each is a 4-byte length followed by its bytes)"
        )
    out = np.empty(count, dtype=np.object_)
    offset = 0
    end = len(view)
    for i in range(count):
        if offset + 4 > end:
            raise InvalidArgument(
                f"{where}: BYTES data ends after {i} of {count} elements "
                "(each element is a 4-byte little-endian length followed by its bytes)"
            )
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        if offset + length > end:
            raise InvalidArgument(
                f"{where}: BYTES element {i} declares {length} bytes but only {end - offset} remain"
            )
        out[i] = bytes(view[offset : offset + length])
        offset += length
    if offset != end and not rest_allowed:
        raise InvalidArgument(
            f"{where}: {end - offset} bytes left over after {count} BYTES elements"
        )
    return out


def as_bytes(element: object) -> bytes:
    if isinstance(element, bytes):
        return element
    if isinstance(element, str):
        return element.encode()
    if isinstance(element, (bytearray, memoryview, np.bytes_)):
        return bytes(element)
    return str(element).encode()


def json_data(flat: np.ndarray, datatype: str) -> Any:
    """A flat tensor as V2 JSON `data`, for orjson with OPT_SERIALIZE_NUMPY: BYTES as
    text (UnicodeDecodeError where an element is not UTF-8), and NaN and Infinity
    written as Python's json writes them, as Triton does (orjson would write null)."""
    if datatype == "BYTES":
        return [e.decode() if isinstance(e, bytes) else str(e) for e in flat]
    if flat.dtype.kind == "f" and not np.isfinite(flat).all():
        import orjson  # here: worker processes import this module, and never orjson

        return orjson.Fragment(json.dumps(flat.tolist()))
    return np.ascontiguousarray(flat)


def serialize_bytes(array: np.ndarray) -> bytes:
    parts: list[bytes] = []
    for element in array.reshape(-1):
        data = as_bytes(element)
        parts.append(struct.pack("<I", len(data)))
        parts.append(data)
    return b"".join(parts)


# V2 datatype -> the name of its config DataType enum value (BYTES is TYPE_STRING).
_V2_TO_CONFIG = {
    "BOOL": "TYPE_BOOL",
    "UINT8": "TYPE_UINT8",
    "UINT16": "TYPE_UINT16",
    "UINT32": "TYPE_UINT32",
    "UINT64": "TYPE_UINT64",
    "INT8": "TYPE_INT8",
    "INT16": "TYPE_INT16",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "FP16": "TYPE_FP16",
    "FP32": "TYPE_FP32",
    "FP64": "TYPE_FP64",
    "BF16": "TYPE_BF16",
    "BYTES": "TYPE_STRING",
}
_CONFIG_TO_V2 = {value: key for key, value in _V2_TO_CONFIG.items()}


def v2_datatype(data_type: int) -> str:
    """V2 datatype name (e.g. "FP32") of a config DataType enum value."""
    name = mc.DataType.Name(data_type)
    try:
        return _CONFIG_TO_V2[name]
    except KeyError:
        raise InvalidArgument(f"datatype {name} has no V2 equivalent") from None


def config_data_type(datatype: str) -> int:
    """The config DataType enum value of a V2 datatype name."""
    return mc.DataType.Value(_V2_TO_CONFIG[datatype])
