"""ModelInfer's raw contents as views: the same messages protobuf reads and writes."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf.message import DecodeError

from accel_base.errors import PayloadTooLarge
from accel_base.proto import grpc_service_pb2 as pb
from gateway.core.inference import InferResponse, Tensor
from gateway.core.shared_memory import BYTE_SIZE, REGION
from gateway.protocols.grpc.codec import decode_request, encode_response
from gateway.protocols.grpc.raw_fields import MAX_FIELDS, response_pieces, split_request

LARGE = np.arange(50_000, dtype=np.float32)  # 200,000 bytes: over the view threshold


def _request() -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name="identity", model_version="1", id="r-7")
    message.parameters["priority"].int64_param = 3
    message.inputs.add(name="x", datatype="FP32", shape=[1, LARGE.size])
    message.inputs.add(name="n", datatype="INT32", shape=[2])
    message.outputs.add(name="y")
    message.raw_input_contents.extend([LARGE.tobytes(), np.int32([4, 5]).tobytes()])
    return message


def _without_raw(message: pb.ModelInferRequest) -> pb.ModelInferRequest:
    rest = pb.ModelInferRequest()
    rest.CopyFrom(message)
    rest.ClearField("raw_input_contents")
    return rest


def test_a_large_request_keeps_its_raw_contents_as_views_of_the_message():
    message = _request()
    wire = message.SerializeToString()
    split = split_request(wire)
    assert split.message == _without_raw(message) and split.model_name == "identity"
    assert [bytes(raw) for raw in split.raw] == list(message.raw_input_contents)
    assert all(raw.obj is wire for raw in split.raw)  # views: nothing copied
    request = decode_request(split.message, None, split.raw)
    assert np.array_equal(request.inputs[0].data[0], LARGE)
    assert request.inputs[1].data.tolist() == [4, 5]


def test_raw_contents_between_other_fields_keep_their_order():
    message = _request()
    first, second = (
        pb.ModelInferRequest(raw_input_contents=[raw]) for raw in message.raw_input_contents
    )
    head = _without_raw(message)
    # field order is free on the wire: raw, the rest, raw again
    wire = first.SerializeToString() + head.SerializeToString() + second.SerializeToString()
    split = split_request(wire)
    assert split.message == head
    assert [bytes(raw) for raw in split.raw] == list(message.raw_input_contents)


def test_a_small_request_is_parsed_by_protobuf_whole():
    message = pb.ModelInferRequest(model_name="simple", raw_input_contents=[b"\x01" * 64])
    split = split_request(message.SerializeToString())
    assert split.raw is None and split.message == message


@pytest.mark.parametrize("cut", [1, 5, 100_000])
def test_a_large_message_cut_short_is_refused_as_protobuf_refuses_it(cut):
    wire = _request().SerializeToString()[:-cut]
    with pytest.raises(DecodeError):
        pb.ModelInferRequest.FromString(wire)
    with pytest.raises(DecodeError):
        split_request(wire)


def test_a_field_the_walk_does_not_take_apart_leaves_the_message_to_protobuf():
    message = _request()
    unknown_fixed32 = bytes([(99 << 3 | 5) & 0x7F | 0x80, (99 << 3 | 5) >> 7]) + b"\x01\x02\x03\x04"
    wire = message.SerializeToString() + unknown_fixed32
    split = split_request(wire)
    assert split.raw is None
    assert list(split.message.raw_input_contents) == list(message.raw_input_contents)


def test_a_message_of_many_tiny_fields_is_left_to_protobuf_after_a_bounded_walk():
    """2-byte fields made the per-field Python walk cost ~150x protobuf's parse: past
    MAX_FIELDS fields it stops, and protobuf reads the message whole."""
    message = _request()
    tiny = b"\x50\x00"  # an unknown varint field (10), two bytes
    walked = split_request(message.SerializeToString() + tiny * (MAX_FIELDS - 10))
    assert walked.raw is not None  # under the bound: split as usual
    wire = message.SerializeToString() + tiny * 200_000
    split = split_request(wire)
    assert split.raw is None
    assert list(split.message.raw_input_contents) == list(message.raw_input_contents)


def test_a_large_message_without_raw_contents_is_parsed_whole():
    message = pb.ModelInferRequest(model_name="m", id="x" * 100_000)
    split = split_request(message.SerializeToString())
    assert split.raw is None and split.message == message


def test_a_response_past_what_a_message_holds_is_refused_before_it_is_built():
    huge = np.broadcast_to(np.float32(0), (2**29 + 1,))  # 2 GiB of FP32, no memory behind
    with pytest.raises(PayloadTooLarge, match="past the 2147483647 a gRPC message can hold"):
        response_pieces(_response(Tensor("y", "FP32", huge)))


def _response(*tensors: Tensor) -> InferResponse:
    return InferResponse(
        model_name="identity", model_version="1", id="r-7", outputs=list(tensors),
        parameters={"sequence_id": 4},
    )  # fmt: skip


def test_response_pieces_are_the_bytes_protobuf_writes_with_large_outputs_as_views():
    large = np.arange(60_000, dtype=np.float32).reshape(2, -1)
    response = _response(
        Tensor("a", "INT32", np.int32([1, 2, 3])),
        Tensor("b", "FP32", large),
        Tensor("c", "BYTES", np.array([b"x", b"yz"], dtype=object)),
        Tensor("d", "FP32", large.copy(), {REGION: "out", BYTE_SIZE: large.nbytes}),
        Tensor("e", "FP32", large + 1),
    )
    pieces = response_pieces(response)
    assert b"".join(pieces) == encode_response(response).SerializeToString()
    views = [piece for piece in pieces if isinstance(piece, memoryview)]
    assert len(views) == 2 and np.shares_memory(np.asarray(views[0]), large)


def test_a_small_response_is_one_piece():
    response = _response(Tensor("y", "FP32", np.ones((1, 16), np.float32)))
    assert response_pieces(response) == [encode_response(response).SerializeToString()]
