"""Responses a worker sends to the gateway outside a batch's answer: a decoupled Python
model's, and a TorchServe handler's intermediate ones. They go over the gateway's
model-call socket (gateway/core/model_calls.py), whose path the gateway gives the worker
in ACCEL_GATEWAY_MODEL_CALLS, each a call_wire frame ("respond", stream token, outputs,
parameters, final, error); the gateway hands it to the request's stream
(gateway/core/decoupled.py)."""

from __future__ import annotations

import os
import socket
import threading

from accel_base import call_wire

_responses: socket.socket | None = None  # one connection for all of this worker's
_responses_lock = threading.Lock()


def connect() -> socket.socket:
    """A new connection to the gateway's model-call socket; OSError if there is none."""
    path = os.environ.get(call_wire.PATH_VARIABLE)
    if not path:
        raise OSError("this worker was started without the gateway's model-call socket")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    return sock


def send_frame(frame: bytes) -> None:
    """A response, which wants no answer. Every thread's responses share one connection,
    in the order they are sent, so that a request's responses arrive in order whichever
    threads send them. OSError if it cannot be sent (the connection is then dropped)."""
    global _responses
    with _responses_lock:
        try:
            if _responses is None:
                _responses = connect()
            _responses.sendall(frame)
        except OSError:
            if _responses is not None:
                _responses.close()
                _responses = None
            raise
