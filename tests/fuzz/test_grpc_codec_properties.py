"""Property tests of the gRPC request decoder (gateway/protocols/grpc/codec.py), called directly.

For any ModelInferRequest, built field by field or parsed from arbitrary bytes,
`decode_request` either returns a request whose tensors are arrays of their declared shape
and datatype, or raises a 4xx GatewayError; never anything else.

ACCEL_FUZZ_EXAMPLES sets the examples per property (default 300; conftest.py).
"""

from __future__ import annotations

import math

import numpy as np
from google.protobuf.message import DecodeError
from hypothesis import assume, given
from hypothesis import strategies as st

from accel_base.datatypes import ALL_DATATYPES, MAX_DIMS, NUMPY_DTYPES
from accel_base.errors import GatewayError
from accel_base.proto import grpc_service_pb2 as pb
from gateway.core.shared_memory import REGION, SharedMemoryRegistry
from gateway.protocols.grpc.codec import decode_request

SHARED_MEMORY = SharedMemoryRegistry(enabled=True).input_array  # no region registered

INT64 = st.integers(-(2**63), 2**63 - 1)
# Values for every InferTensorContents field, in the field's own range.
CONTENTS = {
    "bool_contents": st.booleans(),
    "int_contents": st.integers(-(2**31), 2**31 - 1),
    "int64_contents": INT64,
    "uint_contents": st.integers(0, 2**32 - 1),
    "uint64_contents": st.integers(0, 2**64 - 1),
    "fp32_contents": st.floats(width=32),
    "fp64_contents": st.floats(),
    "bytes_contents": st.binary(max_size=6),
}
PARAMETERS = {
    "bool_param": st.booleans(),
    "int64_param": INT64,
    "string_param": st.text(max_size=6),
    "double_param": st.floats(),
    "uint64_param": st.integers(0, 2**64 - 1),
}
shapes = (
    st.lists(st.integers(0, 3), max_size=3)
    | st.lists(st.integers(0, 1), min_size=60, max_size=70)  # around numpy's 64 dimensions
    | st.lists(INT64, max_size=4)
)


def set_parameters(draw, mapping) -> None:
    keys = ["priority", "timeout", "classification", "binary_data_size", REGION, "x"]
    for key in draw(st.lists(st.sampled_from(keys) | st.text(max_size=4), max_size=3)):
        kind = draw(st.sampled_from(sorted(PARAMETERS)))
        setattr(mapping[key], kind, draw(PARAMETERS[kind]))


@st.composite
def messages(draw) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(
        model_name=draw(st.text(max_size=6)),
        model_version=draw(st.text(max_size=3)),
        id=draw(st.text(max_size=6)),
    )
    raw = draw(st.booleans())
    for _ in range(draw(st.integers(0, 3))):
        datatype = draw(st.sampled_from(ALL_DATATYPES) | st.text(max_size=5))
        shape = draw(shapes)
        tensor = message.inputs.add(name=draw(st.text(max_size=6)), datatype=datatype, shape=shape)
        set_parameters(draw, tensor.parameters)
        count = math.prod(shape) if all(d >= 0 for d in shape) else -1
        if raw:
            item = NUMPY_DTYPES[datatype].itemsize if datatype in NUMPY_DTYPES else 1
            if 0 <= count <= 64 and datatype != "BYTES":  # the size the shape needs
                blob = draw(st.binary(min_size=count * item, max_size=count * item))
            else:
                blob = draw(st.binary(max_size=40))
            message.raw_input_contents.append(blob)
        for field in draw(st.lists(st.sampled_from(sorted(CONTENTS)), max_size=2)):
            size = count if 0 <= count <= 64 and draw(st.booleans()) else draw(st.integers(0, 5))
            values = draw(st.lists(CONTENTS[field], min_size=size, max_size=size))
            getattr(tensor.contents, field).extend(values)
    for _ in range(draw(st.integers(0, 2))):
        set_parameters(draw, message.outputs.add(name=draw(st.text(max_size=6))).parameters)
    set_parameters(draw, message.parameters)
    if draw(st.integers(0, 5)) == 0:  # a stray raw entry
        message.raw_input_contents.append(draw(st.binary(max_size=8)))
    return message


def decodes_or_refuses(message: pb.ModelInferRequest) -> None:
    try:
        request = decode_request(message, SHARED_MEMORY)
    except GatewayError as exc:
        assert 400 <= exc.http_status < 500, exc.message
        assert exc.message
        return
    for tensor, sent in zip(request.inputs, message.inputs, strict=True):
        assert tensor.datatype in NUMPY_DTYPES
        assert isinstance(tensor.data, np.ndarray) and tensor.data.ndim <= MAX_DIMS
        assert tensor.data.dtype == NUMPY_DTYPES[tensor.datatype]
        assert tensor.data.shape == tuple(sent.shape)
    assert all(not o.parameters.get("classification") for o in request.outputs)


@given(messages())
def test_built_messages(message):
    decodes_or_refuses(message)


@given(messages(), st.binary(max_size=16), st.integers(0, 200))
def test_messages_with_corrupted_bytes(message, noise, position):
    """Bytes of a plausible message with a stretch overwritten: whatever still parses."""
    data = bytearray(message.SerializeToString())
    data[position : position + len(noise)] = noise
    try:
        parsed = pb.ModelInferRequest.FromString(bytes(data))
    except DecodeError:
        assume(False)
    decodes_or_refuses(parsed)
