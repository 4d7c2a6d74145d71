"""A V2 gRPC tensor's typed `contents` (InferTensorContents) as a numpy array: how a
client may send inputs (read by the gRPC front) and how some servers send outputs
(read by the remote backend)."""

from __future__ import annotations

import numpy as np

from accel_base.datatypes import NUMPY_DTYPES, element_count
from accel_base.errors import InvalidArgument
from accel_base.proto import grpc_service_pb2 as pb

# Which InferTensorContents field carries each datatype.
CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def contents_to_array(
    contents: pb.InferTensorContents, datatype: str, shape: tuple[int, ...], where: str
) -> np.ndarray:
    field = CONTENTS_FIELD.get(datatype)
    if field is None:
        raise InvalidArgument(f"{where}: {datatype} data can only be sent in raw_input_contents")
    others = [f.name for f, _ in contents.ListFields() if f.name != field]
    if others:
        raise InvalidArgument(f"{where}: {datatype} data goes in {field}, not in {others[0]}")
    values = getattr(contents, field)
    expected = element_count(shape)
    if len(values) != expected:
        raise InvalidArgument(
            f"{where}: shape {list(shape)} needs {expected} elements, {field} has {len(values)}"
        )
    if datatype == "BYTES":
        array = np.empty(expected, dtype=np.object_)
        array[:] = list(values)
    else:
        try:
            array = np.asarray(values, dtype=NUMPY_DTYPES[datatype])
        except OverflowError as exc:
            raise InvalidArgument(f"{where}: a value does not fit {datatype}: {exc}") from None
    return array.reshape(shape)
