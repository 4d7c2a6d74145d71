"""A request and an answer as TorchServe's frontend and its Python worker exchange them,
and the worker's answer as bytes read back: a handler's intermediate responses come so,
written by `ts.protocol.otf_message_handler.create_predict_response` (streaming.py).
The layout (big-endian 32-bit lengths, -1 ending each list) is TorchServe's.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

_INT = struct.Struct("!i")


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
