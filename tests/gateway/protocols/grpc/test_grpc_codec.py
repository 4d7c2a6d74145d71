from __future__ import annotations

import numpy as np
import pytest

from accel_base.errors import InvalidArgument
from accel_base.proto import grpc_service_pb2 as pb
from gateway.core.inference import InferResponse, Tensor
from gateway.protocols.grpc.codec import decode_request, encode_response


def test_typed_contents_and_parameters():
    message = pb.ModelInferRequest(model_name="m", id="9")
    tensor = message.inputs.add(name="x", datatype="INT8", shape=[1, 3])
    tensor.contents.int_contents.extend([-1, 0, 1])
    message.parameters["priority"].int64_param = 2
    request = decode_request(message)
    assert request.inputs[0].data.dtype == np.int8
    assert request.inputs[0].data.tolist() == [[-1, 0, 1]]
    assert request.parameters == {"priority": 2}


def test_raw_contents_count_must_match_inputs():
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="x", datatype="INT8", shape=[1])
    message.inputs.add(name="y", datatype="INT8", shape=[1])
    message.raw_input_contents.append(b"\x01")
    with pytest.raises(InvalidArgument, match="2 inputs"):
        decode_request(message)


def test_fp16_needs_raw_contents():
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="x", datatype="FP16", shape=[1])
    with pytest.raises(InvalidArgument, match="raw_input_contents"):
        decode_request(message)


def test_response_carries_raw_outputs():
    response = InferResponse(
        "m",
        "1",
        "9",
        outputs=[
            Tensor("s", "BYTES", np.array([b"ab"], dtype=object)),
            Tensor("f", "FP32", np.array([[1.0, 2.0]], dtype=np.float32)),
        ],
    )
    message = encode_response(response)
    assert [o.name for o in message.outputs] == ["s", "f"]
    assert list(message.outputs[1].shape) == [1, 2]
    assert message.raw_output_contents[0] == b"\x02\0\0\0ab"
    assert np.frombuffer(message.raw_output_contents[1], np.float32).tolist() == [1.0, 2.0]


def fake_region(where, datatype, shape, parameters):
    """Stands in for SharedMemoryRegistry.input_array."""
    return np.full(shape, parameters["shared_memory_byte_size"], dtype=np.int8)


def shm_tensor(message: pb.ModelInferRequest, name: str) -> pb.ModelInferRequest.InferInputTensor:
    tensor = message.inputs.add(name=name, datatype="INT8", shape=[2])
    tensor.parameters["shared_memory_region"].string_param = "r"
    tensor.parameters["shared_memory_byte_size"].int64_param = 2
    return tensor


def test_raw_contents_skip_inputs_in_shared_memory():
    # As tritonclient sends it: raw contents only for the inputs not in shared memory.
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="a", datatype="INT8", shape=[1])
    shm_tensor(message, "b")
    message.inputs.add(name="c", datatype="INT8", shape=[1])
    message.raw_input_contents.extend([b"\x01", b"\x03"])
    request = decode_request(message, fake_region)
    assert [t.data.tolist() for t in request.inputs] == [[1], [2, 2], [3]]
    message.raw_input_contents.append(b"\x04")
    with pytest.raises(InvalidArgument, match="3 entries for 2 inputs not in shared memory"):
        decode_request(message, fake_region)


def test_shared_memory_input_with_contents_is_refused():
    message = pb.ModelInferRequest(model_name="m")
    shm_tensor(message, "x").contents.int_contents.extend([1, 2])
    with pytest.raises(InvalidArgument, match="also carries contents"):
        decode_request(message, fake_region)


def test_shared_memory_output_gets_an_empty_raw_entry():
    in_shm = Tensor("s", "FP32", np.zeros((1, 2), np.float32), {"shared_memory_region": "r"})
    wire = Tensor("w", "INT8", np.array([7], np.int8))
    message = encode_response(InferResponse("m", "1", outputs=[in_shm, wire]))
    assert [list(o.shape) for o in message.outputs] == [[1, 2], [1]]
    assert list(message.raw_output_contents) == [b"", b"\x07"]
    assert not message.outputs[0].parameters  # as Triton: nothing but name, datatype, shape


def test_more_than_64_dimensions():
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="x", datatype="INT8", shape=[1] * 65)
    message.raw_input_contents.append(b"\x01")
    with pytest.raises(InvalidArgument, match="65 dimensions, at most 64"):
        decode_request(message)


def test_typed_contents_out_of_range_or_in_the_wrong_field():
    message = pb.ModelInferRequest(model_name="m")
    tensor = message.inputs.add(name="x", datatype="UINT8", shape=[1])
    tensor.contents.uint_contents.append(300)
    with pytest.raises(InvalidArgument, match="does not fit UINT8"):
        decode_request(message)
    tensor.contents.uint_contents[0] = 3
    tensor.contents.fp32_contents.append(1.0)
    with pytest.raises(InvalidArgument, match="UINT8 data goes in uint_contents, not in fp32"):
        decode_request(message)


def test_contents_and_raw_contents_together():
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="x", datatype="INT8", shape=[1]).contents.int_contents.append(1)
    message.inputs.add(name="y", datatype="INT8", shape=[1])
    message.raw_input_contents.append(b"\x01")
    with pytest.raises(InvalidArgument, match="input 'x' has contents, but the request has raw"):
        decode_request(message)


def test_classification_is_refused_as_over_http():
    message = pb.ModelInferRequest(model_name="m")
    message.outputs.add(name="y").parameters["classification"].int64_param = 3
    with pytest.raises(InvalidArgument, match="classification extension is not supported"):
        decode_request(message)
