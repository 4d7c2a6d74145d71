"""The messages TorchServe's frontend and its Python worker exchange, as bytes.

A handler is run by `ts.service.Service.predict` on the batch that `ts`'s own reader
(`ts.protocol.otf_message_handler.retrieve_msg`) decodes from these bytes, and its answer
comes back encoded by `ts.protocol.otf_message_handler.create_predict_response`: so a body
is decoded (JSON, text or bytes by its content type) and an answer encoded (bytes as
they are, text as UTF-8, anything else as JSON) by TorchServe's code, not a copy of it.
The layout (big-endian 32-bit lengths, -1 ending each list) is TorchServe's.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

PREDICT = b"I"
_INT = struct.Struct("!i")
END = _INT.pack(-1)


@dataclass
class TsRequest:
    """One request as TorchServe's frontend hands it to a worker."""

    request_id: str
    headers: list[tuple[str, str]] = field(default_factory=list)
    # (name, content type, value): the body is "body"; query and form fields by name.
    inputs: list[tuple[str, str, bytes]] = field(default_factory=list)


@dataclass
class TsAnswer:
    """One request's answer as the worker encodes it."""

    request_id: str
    status: int
    reason: str
    content_type: str
    headers: dict[str, str]
    body: bytes


def _field(data: bytes) -> bytes:
    return _INT.pack(len(data)) + data


def encode_predict(requests: list[TsRequest]) -> bytes:
    """The predict command for a batch, as `retrieve_msg` reads it."""
    parts = [PREDICT]
    for request in requests:
        parts.append(_field(request.request_id.encode()))
        for name, value in request.headers:
            # UTF-8, as TorchServe's frontend encodes them.
            parts += (_field(name.encode()), _field(value.encode()))
        parts.append(END)
        for name, content_type, value in request.inputs:
            parts += (_field(name.encode()), _field(content_type.encode()), _field(value))
        parts.append(END)
    parts.append(END)
    return b"".join(parts)


class Reader:
    """Bytes read as a socket: `ts`'s reader calls recv(n) until it has n bytes."""

    def __init__(self, data: bytes) -> None:
        self._data = memoryview(data)
        self._at = 0

    def recv(self, size: int) -> bytes:
        chunk = self._data[self._at : self._at + size]
        self._at += len(chunk)
        return bytes(chunk)


def decode_predict_response(data: bytes) -> tuple[int, str, list[TsAnswer]]:
    """(the batch's code, its message, each request's answer) from a predict response."""
    view, at = memoryview(data), 0

    def integer() -> int:
        nonlocal at
        (value,) = _INT.unpack_from(view, at)
        at += 4
        return value

    def chunk() -> bytes:
        nonlocal at
        size = integer()
        value = bytes(view[at : at + size])
        at += size
        return value

    code = integer()
    message = chunk().decode()
    answers = []
    while (size := integer()) != -1:
        request_id = bytes(view[at : at + size]).decode()
        at += size
        content_type = chunk().decode()
        status = integer()
        reason = chunk().decode()
        headers = {}
        for _ in range(integer()):
            name = chunk().decode()
            headers[name] = chunk().decode()
        answers.append(TsAnswer(request_id, status, reason, content_type, headers, chunk()))
    return code, message, answers
