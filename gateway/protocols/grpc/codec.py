"""V2 gRPC messages <-> InferRequest / InferResponse.

Raw contents become numpy views of the message's bytes; typed contents go
through numpy in one call per tensor. Responses always carry raw contents,
as Triton's do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from accel_base.datatypes import check_datatype, check_shape, from_raw, to_raw
from accel_base.errors import InvalidArgument
from accel_base.proto import grpc_service_pb2 as pb
from accel_base.tensor_contents import contents_to_array
from gateway.core.inference import InferRequest, InferResponse, RequestedOutput, Tensor
from gateway.core.shared_memory import REGION as SHM_REGION
from gateway.core.shared_memory import InputSource


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


def decode_request(
    message: pb.ModelInferRequest,
    shared_memory: InputSource | None = None,
    raw: Sequence[bytes | memoryview] | None = None,
) -> InferRequest:
    """`raw`: the raw contents where they were kept out of `message` (raw_fields.py)."""
    if raw is None:
        raw = message.raw_input_contents
    inputs = []
    consumed = 0  # raw_input_contents entries used: one per input not in shared memory
    for tensor in message.inputs:
        where = f"input '{tensor.name}'"
        datatype = check_datatype(tensor.datatype, where)
        shape = tuple(tensor.shape)
        if shape and min(shape) < 0:
            raise InvalidArgument(f"{where}: shape {list(shape)} has a negative dimension")
        check_shape(shape, where)
        parameters = _parameters(tensor.parameters)
        if SHM_REGION in parameters:
            if tensor.HasField("contents"):
                raise InvalidArgument(
                    f"{where} names a shared-memory region and also carries contents; give one"
                )
            if shared_memory is None:
                raise InvalidArgument(f"{where}: shared memory is not served here")
            data = shared_memory(where, datatype, shape, parameters)
        elif raw:
            if tensor.HasField("contents"):
                raise InvalidArgument(
                    f"{where} has contents, but the request has raw_input_contents: send every "
                    "input's data one way"
                )
            if consumed == len(raw):
                raise _raw_count_error(len(raw), message)
            data = from_raw(raw[consumed], datatype, shape, where)
            consumed += 1
        else:
            data = contents_to_array(tensor.contents, datatype, shape, where)
        inputs.append(Tensor(tensor.name, datatype, data, parameters))
    if consumed != len(raw):
        raise _raw_count_error(len(raw), message)
    return InferRequest(
        model_name=message.model_name,
        model_version=message.model_version,
        id=message.id,
        parameters=_parameters(message.parameters),
        inputs=inputs,
        outputs=[_requested_output(o) for o in message.outputs],
    )


def _requested_output(output: pb.ModelInferRequest.InferRequestedOutputTensor) -> RequestedOutput:
    parameters = _parameters(output.parameters)
    if parameters.get("classification"):
        raise InvalidArgument(
            f"output '{output.name}': the classification extension is not supported by this server"
        )
    return RequestedOutput(output.name, parameters)


def _raw_count_error(count: int, message: pb.ModelInferRequest) -> InvalidArgument:
    wanted = sum(SHM_REGION not in t.parameters for t in message.inputs)
    return InvalidArgument(
        f"raw_input_contents has {count} entries for {wanted} inputs not in shared memory; "
        "give every such input raw or none"
    )


def response_header(response: InferResponse) -> pb.ModelInferResponse:
    """The response message without its raw contents."""
    message = pb.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.id
    )
    for key, value in response.parameters.items():
        set_parameter(message.parameters[key], value)
    for tensor in response.outputs:
        message.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.data.shape)
    return message


def encode_response(response: InferResponse) -> pb.ModelInferResponse:
    message = response_header(response)
    for tensor in response.outputs:
        # An output written to shared memory gets an empty entry, as in Triton, which keeps
        # raw contents aligned with outputs.
        if SHM_REGION in tensor.parameters:
            message.raw_output_contents.append(b"")
        else:
            message.raw_output_contents.append(to_raw(tensor.data, tensor.datatype))
    return message
