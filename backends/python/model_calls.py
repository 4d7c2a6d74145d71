"""A Python model's calls to other models of the gateway, from its worker process: one
connection per thread to the gateway's model-call socket (gateway/core/model_calls.py), whose
path the gateway gives the worker in ACCEL_GATEWAY_MODEL_CALLS."""

from __future__ import annotations

import socket
import threading

from accel_base import call_wire
from backends import response_socket
from backends.python import pb_utils

_local = threading.local()  # async_exec runs calls on threads: one connection each

# A gateway error class name -> the TritonError code a model sees.
_CODES = {
    "InvalidArgument": pb_utils.TritonError.INVALID_ARG,
    "NotFound": pb_utils.TritonError.NOT_FOUND,
    "Unavailable": pb_utils.TritonError.UNAVAILABLE,
    "Overloaded": pb_utils.TritonError.UNAVAILABLE,
    "Cancelled": pb_utils.TritonError.CANCELLED,
}


def call(request: pb_utils.InferenceRequest) -> pb_utils.InferenceResponse:
    """The other model's answer; a failure is a response with an error, as in Triton."""
    try:
        sock = _connection()
        version = request.model_version()
        inputs = [call_wire.to_wire(t.name(), t.as_numpy()) for t in request.inputs()]
        message = (
            "infer", request.model_name(), "" if version < 0 else str(version),
            request.request_id(), dict(request._parameters), inputs,
            list(request.requested_output_names()),
        )  # fmt: skip
        sock.sendall(call_wire.encode(message))
        answer = call_wire.receive_blocking(sock)
    except (OSError, EOFError, ValueError) as exc:
        broken = _local.__dict__.pop("sock", None)  # mid-frame: never reused
        if broken is not None:
            broken.close()
        return _failed(f"the call to model '{request.model_name()}' failed: {exc}")
    if answer[0] == "error":
        _, kind, text = answer
        return _failed(text, _CODES.get(kind, pb_utils.TritonError.INTERNAL))
    _, _model, _version, _id, parameters, outputs = answer
    tensors = []
    for wire in outputs:
        name, _datatype, array = call_wire.from_wire(wire, "output")
        tensors.append(pb_utils.Tensor(name, array))
    return pb_utils.InferenceResponse(tensors, parameters=parameters)


def cancelled(token: str) -> bool:
    """Whether the gateway says the request with this token was cancelled (its caller
    left); False when it cannot be asked."""
    try:
        sock = _connection()
        sock.sendall(call_wire.encode(("cancelled", token)))
        answer = call_wire.receive_blocking(sock)
    except (OSError, EOFError, ValueError):
        broken = _local.__dict__.pop("sock", None)
        if broken is not None:
            broken.close()
        return False
    return answer[0] == "ok" and bool(answer[1])


def send_frame(frame: bytes) -> None:
    """A decoupled model's response (backends/response_socket.py), its failure a
    TritonModelException the model sees."""
    try:
        response_socket.send_frame(frame)
    except OSError as exc:
        raise pb_utils.TritonModelException(f"the response could not be sent: {exc}") from None


def _failed(message: str, code: int = pb_utils.TritonError.INTERNAL) -> pb_utils.InferenceResponse:
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code))


def _connection() -> socket.socket:
    sock = getattr(_local, "sock", None)
    if sock is None:
        sock = _local.sock = response_socket.connect()
    return sock
