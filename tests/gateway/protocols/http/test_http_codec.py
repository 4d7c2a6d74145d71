from __future__ import annotations

import json

import numpy as np
import pytest

from accel_base.errors import InvalidArgument
from gateway.core.inference import InferResponse, Tensor
from gateway.protocols.http.codec import decode_request, encode_response, encode_response_pieces


def binary_body(header: dict, *blobs: bytes) -> tuple[bytes, int]:
    head = json.dumps(header).encode()
    return head + b"".join(blobs), len(head)


def test_binary_inputs_are_views_of_the_body():
    data = np.arange(4, dtype=np.float32)
    body, length = binary_body(
        {
            "id": "7",
            "inputs": [
                {
                    "name": "x",
                    "shape": [2, 2],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 16},
                }
            ],
        },
        data.tobytes(),
    )
    request = decode_request(body, length, "m", "")
    tensor = request.inputs[0]
    np.testing.assert_array_equal(tensor.data, data.reshape(2, 2))
    assert tensor.parameters == {}
    assert request.id == "7"


def test_json_inputs_flat_or_nested():
    for data in ([1, 2, 3, 4], [[1, 2], [3, 4]]):
        body = json.dumps(
            {"inputs": [{"name": "x", "shape": [2, 2], "datatype": "INT16", "data": data}]}
        ).encode()
        tensor = decode_request(body, None, "m", "").inputs[0]
        assert tensor.data.dtype == np.int16
        assert tensor.data.tolist() == [[1, 2], [3, 4]]


def test_json_accepts_nan_and_infinity():
    body = b'{"inputs":[{"name":"x","shape":[2],"datatype":"FP32","data":[NaN,Infinity]}]}'
    tensor = decode_request(body, None, "m", "").inputs[0]
    assert np.isnan(tensor.data[0]) and np.isinf(tensor.data[1])


@pytest.mark.parametrize(
    ("input_", "message"),
    [
        ({"name": "x", "shape": [2], "datatype": "UINT8", "data": [1, 300]}, "range of UINT8"),
        ({"name": "x", "shape": [-1], "datatype": "UINT8", "data": [1]}, "non-negative"),
        ({"name": "x", "shape": [1], "datatype": "BF16", "data": [1]}, "only be sent as binary"),
        ({"name": "x", "shape": [1], "datatype": "BYTES", "data": [1]}, "must be strings"),
        ({"name": "x", "shape": [1], "datatype": "FP32"}, "neither 'data' nor"),
        ({"shape": [1], "datatype": "FP32", "data": [1]}, "'name' must be a string"),
    ],
)
def test_bad_json_inputs_name_the_problem(input_, message):
    body = json.dumps({"inputs": [input_]}).encode()
    with pytest.raises(InvalidArgument, match=message):
        decode_request(body, None, "m", "")


def test_header_length_past_the_body():
    with pytest.raises(InvalidArgument, match="Inference-Header-Content-Length is 99"):
        decode_request(b"{}", 99, "m", "")


def response_for(*tensors: Tensor) -> InferResponse:
    return InferResponse("m", "1", "id-1", outputs=list(tensors))


def test_encode_json_and_binary_outputs():
    request = decode_request(
        json.dumps(
            {
                "inputs": [],
                "outputs": [{"name": "a", "parameters": {"binary_data": True}}, {"name": "b"}],
            }
        ).encode(),
        None,
        "m",
        "",
    )
    a = Tensor("a", "INT32", np.array([[1, 2]], dtype=np.int32))
    b = Tensor("b", "FP32", np.array([np.nan, 1.5], dtype=np.float32))
    body, length = encode_response(response_for(a, b), request)
    header = json.loads(body[:length])
    assert header["id"] == "id-1"
    assert header["outputs"][0]["parameters"] == {"binary_data_size": 8}
    assert np.isnan(header["outputs"][1]["data"][0]) and header["outputs"][1]["data"][1] == 1.5
    assert np.frombuffer(body[length:], dtype=np.int32).tolist() == [1, 2]


def test_a_large_binary_output_stays_a_view_of_its_array():
    request = decode_request(
        json.dumps({"inputs": [], "parameters": {"binary_data_output": True}}).encode(),
        None,
        "m",
        "",
    )
    large = np.arange(50_000, dtype=np.float32)
    small = np.int32([1, 2])
    response = response_for(Tensor("a", "FP32", large), Tensor("b", "INT32", small))
    header, blobs = encode_response_pieces(response, request)
    assert isinstance(blobs[0], memoryview) and np.shares_memory(np.asarray(blobs[0]), large)
    assert blobs[1] == small.tobytes()
    assert encode_response(response, request) == (b"".join([header, *blobs]), len(header))


def test_encode_all_json_has_no_binary_part():
    request = decode_request(b'{"inputs": []}', None, "m", "")
    tensor = Tensor("s", "BYTES", np.array([b"hi", b"there"], dtype=object))
    body, length = encode_response(response_for(tensor), request)
    assert length is None
    assert json.loads(body)["outputs"][0]["data"] == ["hi", "there"]


def test_bf16_outputs_always_go_binary():
    request = decode_request(b'{"inputs": []}', None, "m", "")
    tensor = Tensor("h", "BF16", np.array([0x3FC0], dtype=np.uint16))
    body, length = encode_response(response_for(tensor), request)
    assert length is not None and body[length:] == b"\xc0\x3f"


def fake_region(where, datatype, shape, parameters):
    """Stands in for SharedMemoryRegistry.input_array: records what the decoder passed."""
    return np.full(shape, parameters["shared_memory_byte_size"], dtype=np.int32)


def test_shared_memory_inputs_come_from_the_source():
    shm = {"shared_memory_region": "r", "shared_memory_byte_size": 8}
    header = {
        "inputs": [
            {"name": "x", "shape": [1, 2], "datatype": "INT32", "parameters": shm},
            {"name": "y", "shape": [1], "datatype": "INT32", "parameters": {"binary_data_size": 4}},
        ]
    }
    body, length = binary_body(header, np.int32(5).tobytes())  # only y's bytes in the body
    request = decode_request(body, length, "m", "", fake_region)
    assert request.inputs[0].data.tolist() == [[8, 8]]
    assert request.inputs[1].data.tolist() == [5]


@pytest.mark.parametrize("extra", [{"data": [1, 2]}, {"binary_data_size": 8}])
def test_shared_memory_input_with_data_too_is_refused(extra):
    parameters = {"shared_memory_region": "r", "shared_memory_byte_size": 8}
    raw = {"name": "x", "shape": [2], "datatype": "INT32", "parameters": parameters}
    if "data" in extra:
        raw |= extra
    else:
        parameters |= extra
    body = json.dumps({"inputs": [raw]}).encode()
    with pytest.raises(InvalidArgument, match="names a shared-memory region and also carries"):
        decode_request(body, len(body), "m", "", fake_region)


def test_shared_memory_output_carries_no_data():
    request = decode_request(b'{"inputs": []}', None, "m", "")
    in_shm = Tensor(
        "o", "FP32", np.zeros((1, 4), np.float32), {"shared_memory_region": "r"}
    )  # as InferenceCore leaves an output it wrote to a region
    body, length = encode_response(response_for(in_shm), request)
    assert length is None  # no binary part: nothing follows the JSON
    assert json.loads(body)["outputs"] == [{"name": "o", "datatype": "FP32", "shape": [1, 4]}]
