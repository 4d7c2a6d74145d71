"""The wire of model calls: a Python model's worker asks the gateway to run another model
(Triton's business-logic scripting, `pb_utils.InferenceRequest(...).exec()`).

A stream socket carries frames: a 4-byte little-endian length, then a marshal'd tuple.
Tensors travel as (name, V2 datatype, shape, wire bytes), so both sides decode them
with the same checks as a front does. marshal, not pickle: the gateway must never run
code that a worker sent it.

    call:   ("infer", model, version, request id, parameters, inputs, output names)
    answer: ("ok", model, version, request id, parameters, outputs)
            ("error", error class name, message)
"""

from __future__ import annotations

import marshal
import socket
import struct
from typing import Any

import numpy as np

from accel_base.datatypes import check_shape, datatype_of, from_raw, to_raw

# The environment variable that gives a Python model's worker the socket's path.
PATH_VARIABLE = "ACCEL_GATEWAY_MODEL_CALLS"
# A frame larger than this is refused by either side (a call's tensors sit in memory
# whole, twice: the frame and the arrays made from it).
MAX_FRAME_BYTES = 256 << 20
_LENGTH = struct.Struct("<I")

WireTensor = tuple[str, str, tuple[int, ...], bytes]


def to_wire(name: str, array: np.ndarray, datatype: str | None = None) -> WireTensor:
    datatype = datatype or datatype_of(array)
    return (name, datatype, tuple(int(d) for d in array.shape), to_raw(array, datatype))


def from_wire(tensor: Any, where: str) -> tuple[str, str, np.ndarray]:
    """(name, datatype, array) of a wire tensor, checked as a front checks its input."""
    try:
        name, datatype, shape, data = tensor
        shape = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: a tensor must be (name, datatype, shape, bytes)") from None
    check_shape(shape, f"{where} '{name}'")
    return name, datatype, from_raw(data, datatype, shape, f"{where} '{name}'")


def encode(message: tuple) -> bytes:
    data = marshal.dumps(message)
    if len(data) > MAX_FRAME_BYTES:
        raise ValueError(f"a model call of {len(data)} bytes is over {MAX_FRAME_BYTES}")
    return _LENGTH.pack(len(data)) + data


def decode(data: bytes) -> tuple:
    message = marshal.loads(data)
    if not isinstance(message, tuple) or not message:
        raise ValueError("a model call frame must hold a tuple")
    return message


def frame_length(header: bytes) -> int:
    (length,) = _LENGTH.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise ValueError(f"a model call frame of {length} bytes is over {MAX_FRAME_BYTES}")
    return length


HEADER_BYTES = _LENGTH.size


def receive_blocking(sock: socket.socket) -> tuple:
    """The next frame's message from a blocking socket; EOFError when it closed."""
    length = frame_length(_read_exactly(sock, HEADER_BYTES))
    return decode(_read_exactly(sock, length))


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    buffer = bytearray(count)
    view = memoryview(buffer)
    got = 0
    while got < count:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise EOFError("the gateway closed the model-call socket")
        got += n
    return bytes(buffer)
