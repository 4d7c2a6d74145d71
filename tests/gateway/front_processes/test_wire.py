"""The front channel's messages: requests and answers survive the trip, small tensors
inline, large ones through a shared-memory arena, errors with their class and hint."""

from __future__ import annotations

import numpy as np
import pytest

from accel_base.errors import GatewayError, InvalidArgument, Unavailable
from gateway.core.inference import InferRequest, InferResponse, RequestedOutput, Tensor
from gateway.core.scheduling.admission import Overloaded
from gateway.front_processes import wire


def trip(message: tuple, arena) -> tuple:
    """What the other side receives: the message through a real channel pair."""
    host, front = wire.channel_pair()
    try:
        import array
        import socket

        data = wire.encode(message)
        if arena is None:
            front.send(data)
        else:
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [arena.fd]))]
            front.sendmsg([data], rights)
            arena.close()
        return wire.receive(host, bytearray(wire.MAX_MESSAGE_BYTES))
    finally:
        host.close()
        front.close()


def request(*tensors: Tensor) -> InferRequest:
    return InferRequest(
        "m", "2", "id-7", {"priority": 1, "sticky": "a"}, list(tensors),
        [RequestedOutput("y", {"binary_data": True})], None, 123.5,
    )  # fmt: skip


def test_a_small_request_travels_inline():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    words = np.array([b"ab", b"", b"\x00c"], dtype=object)
    message, arena = wire.request_message(
        5, request(Tensor("x", "FP32", x), Tensor("w", "BYTES", words)), [("user", "u1")]
    )
    assert arena is None
    received, arena = trip(message, arena)
    got = wire.request_of(received, arena)
    assert (got.model_name, got.model_version, got.id, got.deadline) == ("m", "2", "id-7", 123.5)
    assert got.parameters == {"priority": 1, "sticky": "a"}
    np.testing.assert_array_equal(got.inputs[0].data, x)
    assert list(got.inputs[1].data) == [b"ab", b"", b"\x00c"]
    assert got.outputs[0].name == "y" and got.outputs[0].parameters == {"binary_data": True}
    assert got.header("user") == "u1" and got.header("other") is None


def test_a_large_tensor_travels_in_an_arena_that_outlives_the_senders_copy():
    big = np.random.default_rng(0).random((64, 1024), dtype=np.float32)  # 256 KiB
    strided = np.arange(40, dtype=np.int64)[::2]  # not contiguous
    message, arena = wire.request_message(
        1, request(Tensor("big", "FP32", big), Tensor("s", "INT64", strided)), None
    )
    assert arena is not None and len(wire.encode(message)) < 4096
    received, mapped = trip(message, arena)
    got = wire.request_of(received, mapped)
    np.testing.assert_array_equal(got.inputs[0].data, big)
    np.testing.assert_array_equal(got.inputs[1].data, strided)
    del mapped  # the arrays keep the mapping alive on their own
    assert float(got.inputs[0].data.sum()) == pytest.approx(float(big.sum()), rel=1e-5)


def test_answers_and_errors():
    response = InferResponse("m", "1", "r", {"variant": "b"}, [
        Tensor("y", "INT32", np.array([[1, 2]], dtype=np.int32))
    ])  # fmt: skip
    message, arena = wire.answer_message(9, response)
    received, arena = trip(message, arena)
    got = wire.response_of(received, arena)
    assert (got.model_name, got.parameters) == ("m", {"variant": "b"})
    np.testing.assert_array_equal(got.outputs[0].data, [[1, 2]])

    refused = wire.error_of(trip(wire.error_message(3, Overloaded("busy", 2)), None)[0])
    assert isinstance(refused, Unavailable) and refused.retry_after_s == 2
    bad = wire.error_of(trip(wire.error_message(3, InvalidArgument("shape")), None)[0])
    assert type(bad) is InvalidArgument and bad.message == "shape" and bad.http_status == 400
    # A class the base does not have keeps its statuses (on-demand's NoRoom: 503 and
    # RESOURCE_EXHAUSTED), as a GatewayError.
    unknown = wire.error_of(("error", 3, "NoRoom", "full", None, 503, "RESOURCE_EXHAUSTED"))
    assert type(unknown) is GatewayError and unknown.message == "full"
    assert (unknown.http_status, unknown.grpc_status) == (503, "RESOURCE_EXHAUSTED")


def test_a_large_result_travels_in_an_arena():
    small, arena = wire.result_message(1, b"x" * 10, 4096)
    assert arena is None and wire.result_bytes(small, None) == b"x" * 10
    big, arena = wire.result_message(2, b"y" * 10_000, 4096)
    assert arena is not None
    received, mapped = trip(big, arena)
    assert wire.result_bytes(received, mapped) == b"y" * 10_000
