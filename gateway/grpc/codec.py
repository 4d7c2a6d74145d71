"""V2 gRPC messages <-> InferRequest / InferResponse.

Raw contents become numpy views of the message's bytes; typed contents go
through numpy in one call per tensor. Responses always carry raw contents,
as Triton's do.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from accel_base.datatypes import NUMPY_DTYPES, check_datatype, element_count, from_raw, to_raw
from accel_base.errors import InvalidArgument
from gateway.inference import InferRequest, InferResponse, RequestedOutput, Tensor
from gateway.proto import grpc_service_pb2 as pb

# Which InferTensorContents field carries each datatype.
_CONTENTS_FIELD = {
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


def parameter_value(parameter: pb.InferParameter) -> Any:
    choice = parameter.WhichOneof("parameter_choice")
    return getattr(parameter, choice) if choice else None


def set_parameter(target: pb.InferParameter, value: Any) -> None:
    if isinstance(value, bool):
        target.bool_param = value
    elif isinstance(value, int):
        target.int64_param = value
    elif isinstance(value, float):
        target.double_param = value
    else:
        target.string_param = str(value)


def _parameters(mapping) -> dict[str, Any]:
    if not mapping:  # the common case; skips building an iterator per tensor
        return {}
    return {key: parameter_value(value) for key, value in mapping.items()}


def contents_to_array(
    contents: pb.InferTensorContents, datatype: str, shape: tuple[int, ...], where: str
) -> np.ndarray:
    field = _CONTENTS_FIELD.get(datatype)
    if field is None:
        raise InvalidArgument(f"{where}: {datatype} data can only be sent in raw_input_contents")
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


def decode_request(message: pb.ModelInferRequest) -> InferRequest:
    raw = message.raw_input_contents
    if raw and len(raw) != len(message.inputs):
        raise InvalidArgument(
            f"raw_input_contents has {len(raw)} entries for {len(message.inputs)} inputs; "
            "give every input raw or none"
        )
    inputs = []
    for position, tensor in enumerate(message.inputs):
        where = f"input '{tensor.name}'"
        datatype = check_datatype(tensor.datatype, where)
        shape = tuple(tensor.shape)
        if shape and min(shape) < 0:
            raise InvalidArgument(f"{where}: shape {list(shape)} has a negative dimension")
        if raw:
            data = from_raw(raw[position], datatype, shape, where)
        else:
            data = contents_to_array(tensor.contents, datatype, shape, where)
        inputs.append(Tensor(tensor.name, datatype, data, _parameters(tensor.parameters)))
    return InferRequest(
        model_name=message.model_name,
        model_version=message.model_version,
        id=message.id,
        parameters=_parameters(message.parameters),
        inputs=inputs,
        outputs=[RequestedOutput(o.name, _parameters(o.parameters)) for o in message.outputs],
    )


def encode_response(response: InferResponse) -> pb.ModelInferResponse:
    message = pb.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.id
    )
    for key, value in response.parameters.items():
        set_parameter(message.parameters[key], value)
    for tensor in response.outputs:
        message.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.data.shape)
        message.raw_output_contents.append(to_raw(tensor.data, tensor.datatype))
    return message
